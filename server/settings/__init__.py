"""Every gateway setting in one place: one ``BaseSettings`` read from ``RGW_*`` variables.

The CLI turns its flags into the same variables, so ``serve --engine URL`` and
``RGW_ENGINES=URL`` are one setting. Nothing here reads the environment at import time; a
``GatewaySettings()`` instance is built by whoever starts the app and handed to ``create_app``.

An engine is written ``URL[,key=value…]`` with keys ``name``, ``roles`` (``act+rehearse``),
``model`` (the engine's served model name; discovered from ``/v1/models`` when omitted),
``max_concurrency``, ``router=vllm-router`` (the URL is a router in front of a fleet of engines;
``server/engines/routers.py``) and ``discover=dns`` (the URL's host names a group of engines, one
per address it resolves to, re-resolved every ``discovery_interval`` seconds;
``server/engines/discovery.py``).
``RGW_ENGINES`` holds several, separated by whitespace, or a JSON list.

A YAML file named by ``RGW_CONFIG`` (``serve --config FILE``) holds settings under their names
(``rehearsal_mode: parallel``; engines and per-key limits as lists and mappings); a variable
wins over the file, and ``serve``'s flags win over both (``server/launcher/sources.py`` reads the
three and says where each value came from). docs/configuration.md has a complete file.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Annotated, Any, Literal, TypeVar

import orjson
from pydantic import Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from .specs import (
    ALL_ROLES,
    MASK,
    OPTIONS,
    REHEARSE_ONLY,
    EngineSpec,
    RiskClass,
    Role,
    RouterKind,
    TenantLimits,
    TenantRisk,
    mask_url,
    off_word,
    split_list,
    split_pairs,
)

__all__ = [
    "ALL_ROLES",
    "CONFIG_VARIABLE",
    "ENV_PREFIX",
    "MASK",
    "OPTIONS",
    "REHEARSAL_PRIORITY",
    "REHEARSE_ONLY",
    "EngineSpec",
    "GatewaySettings",
    "RiskClass",
    "Role",
    "RouterKind",
    "TenantLimits",
    "TenantRisk",
    "mask_url",
]

T = TypeVar("T")
# vLLM's priority of a rehearsal-role call under ``engine_scheduling = "priority"`` (vLLM's
# default, which every other call keeps, is 0; a larger number is served later).
REHEARSAL_PRIORITY = 10
ENV_PREFIX = "RGW_"
CONFIG_VARIABLE = ENV_PREFIX + "CONFIG"


class GatewaySettings(BaseSettings):
    """The gateway's configuration (env prefix ``RGW_``)."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    # The YAML file the other settings may come from (below the variables, above the defaults).
    config: str | None = None

    # Where to listen. Workers > 1 runs several uvicorn processes (metrics go multiprocess).
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    workers: int = Field(default=1, ge=1)
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    # Debugging only: put each chat request's messages in its log line (API keys never are).
    log_content: bool = False

    # Upstream engines and public model names (alias -> an engine's served model name).
    engines: Annotated[list[EngineSpec], NoDecode] = Field(
        default_factory=lambda: [EngineSpec(url="http://127.0.0.1:8100/v1")], min_length=1
    )
    aliases: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    engine_max_concurrency: int = Field(default=128, ge=1)
    max_attempts: int = Field(default=3, ge=1, le=10)
    queue_timeout: float = Field(default=30.0, gt=0)

    # Upstream timeouts (seconds); the waits of one call are in the reliability block below.
    connect_timeout: float = Field(default=3.0, gt=0)
    # Idle engine sockets close after this: below vLLM's 5 s keep-alive.
    engine_keepalive_s: float = Field(default=4.0, gt=0)
    # "wire" (asyncio sockets + httptools, the default) or "aiohttp" (server/engines/transport.py).
    engine_transport: Literal["wire", "aiohttp"] = "wire"
    # A CA bundle (PEM) for https engines with a private CA; unset: the system's CAs.
    engine_ca_file: str | None = None
    # The engines' vLLM --scheduling-policy; with "priority" imagination carries REHEARSAL_PRIORITY.
    engine_scheduling: Literal["fcfs", "priority"] = "fcfs"
    # The share of each engine's slots rehearsal may hold; the rest stays free for real work.
    rehearsal_engine_share: float = Field(default=0.5, gt=0, le=1)
    # Real work cancels the imaginations running beside it on its engine (server/engines/pool.py).
    rehearsal_yield: bool = False
    # How long an engine must have had no real work before imaginations start on it again.
    rehearsal_yield_quiet_s: float = Field(default=0.05, ge=0)
    # Imaginations ready together go as one vLLM /v1/chat/completions/batch call.
    rehearsal_batch: bool = True
    health_interval: float = Field(default=5.0, gt=0)
    health_timeout: float = Field(default=2.0, gt=0)
    # Seconds between two resolutions of each `discover=dns` engine name.
    discovery_interval: float = Field(default=10.0, gt=0)

    # Requests.
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    api_keys: Annotated[list[SecretStr], NoDecode] = Field(default_factory=list)

    # None: the in-process store; else redis://, redis+cluster://, redis+sentinel:// URLs.
    redis_url: SecretStr | None = None
    redis_prefix: str = Field(default="rgw:", min_length=1)
    # Per Redis operation, wall time on the loop (decision 0016: a busy host is not a hung Redis).
    redis_timeout: float = Field(default=1.0, gt=0, le=10)
    trace_ttl_s: int = Field(default=24 * 3600, ge=1)
    pending_ttl_s: int = Field(default=3600, ge=1)
    memory_ttl_s: int = Field(default=6 * 3600, ge=1)
    grounding_ttl_s: int = Field(default=7 * 24 * 3600, ge=1)
    memory_max_entries: int = Field(default=32, ge=1)
    grounding_max_per_tool: int = Field(default=16, ge=1)

    # Rehearsal defaults when a request sets no knob (body > headers > these); off: a drop-in.
    rehearsal_mode: Literal["off", "parallel", "sequential"] = "off"
    # K trajectories, or "auto": learned per tenant and tool, within auto_max_k and max_budget.
    rehearsal_budget: Annotated[int, Field(ge=0)] | Literal["auto"] = 4
    rehearsal_depth: int = Field(default=1, ge=1)
    rehearsal_commit: Literal["anchored", "reflect", "select"] = "anchored"
    rehearsal_deadline_ms: int = Field(default=20_000, ge=1)
    rehearsal_temperature: float = Field(default=0.6, ge=0)
    rehearsal_top_p: float = Field(default=0.95, gt=0, le=1)
    rehearsal_early_exit: bool = True
    rehearsal_repair: bool = True
    # Ask the user before a destructive call rehearsal found evidence against (docs/rehearsal.md).
    rehearsal_confirm: bool = False
    # Model-name switches, e.g. MODEL@parallel-4 (docs/configuration.md#model-name-switch).
    model_switch: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Caps: a request beyond them is a 400 naming the knob, never clamped.
    max_budget: int = Field(default=8, ge=1, le=64)
    max_depth: int = Field(default=4, ge=1, le=16)
    max_deadline_ms: int = Field(default=120_000, ge=1)
    # The rehearsal role's system instruction (DESIGN §2); a file replaces ours, e.g. upstream's.
    simulator_prompt_file: str | None = None
    # Tokens one imagined tool result may take (its whole cost on a slow engine).
    rehearse_max_tokens: int = Field(default=2048, ge=1)
    memory_note_tokens: int = Field(default=600, ge=64)
    grounding_examples: int = Field(default=3, ge=0, le=16)
    # An argument a tool's schema does not declare is invalid (rehearsal/checks.py).
    reject_undeclared_arguments: bool = True

    # The learned budget, budget "auto" (rehearsal/auto.py, docs/rehearsal-knobs.md).
    auto_max_k: int = Field(default=4, ge=1)
    auto_learning_k: int = Field(default=2, ge=0)
    auto_min_samples: int = Field(default=8, ge=1)
    auto_min_each: int = Field(default=3, ge=1)
    auto_quiet: float = Field(default=0.1, ge=0, le=1)
    auto_read_quiet: float = Field(default=0.2, ge=0, le=1)
    auto_probe_rate: float = Field(default=0.1, ge=0, le=1)
    # Trust learned from real results (rehearsal/trust.py, docs/rehearsal-knobs.md).
    trust_enabled: bool = True
    trust_min_samples: int = Field(default=8, ge=1)
    trust_threshold: float = Field(default=0.8, ge=0, le=1)
    trust_lift_threshold: float = Field(default=0.1, ge=-1, le=1)
    trust_risk_ratio: float = Field(default=2.0, ge=0)
    trust_min_vetoes: int = Field(default=4, ge=1)
    trust_off_threshold: float = Field(default=0.5, ge=0, le=1)
    trust_auto_off: bool = True
    trust_window: int = Field(default=200, ge=2)
    trust_probe_rate: float = Field(default=0.25, ge=0, le=1)
    trust_ttl_s: int = Field(default=24 * 3600, ge=1)
    # Operator pins, "tool=policy,tool=policy" (policies: trusted, learning, ignore_vetoes, off).
    trust_pins: Annotated[
        dict[str, Literal["trusted", "learning", "ignore_vetoes", "off"]], NoDecode
    ] = Field(default_factory=dict)

    # Tool risk classes (rehearsal/risk.py): operator patterns "glob=class,…", first match wins.
    risk_patterns: Annotated[dict[str, RiskClass], NoDecode] = Field(default_factory=dict)
    # Whether read_only calls are imagined at all (their real result is their own evidence).
    risk_imagine_reads: bool = True
    # Per tenant, JSON: patterns, imagine_reads, confirm (true: required) (docs/configuration.md).
    risk_overrides: Annotated[dict[str, TenantRisk], NoDecode] = Field(default_factory=dict)

    # ---- Store writes beside the answer and the in-process store's bounds (server/store/).
    store_writes_max_pending: int = Field(default=10_000, ge=1)
    store_writes_concurrency: int = Field(default=32, ge=1)
    # How long a reader waits for a held write it must see (a pending record, a trace).
    store_settle_wait_s: float = Field(default=1.0, ge=0)
    # At shutdown, how long held writes may still run before they are cut.
    store_drain_s: float = Field(default=10.0, ge=0)
    inprocess_max_keys: int = Field(default=100_000, ge=1)
    inprocess_max_bytes: int = Field(default=256 * 1024 * 1024, ge=1024)

    # ---- Fair use per API key (server/store/fair_use.py, docs/limits.md); 0 = off.
    limit_rps: float = Field(default=0, ge=0)  # requests per second (token bucket)
    limit_burst: int = Field(default=0, ge=0)  # the bucket's size; 0: max(1, 2 x rps)
    limit_concurrency: int = Field(default=0, ge=0)  # requests in flight at once
    limit_engine_calls_per_min: int = Field(default=0, ge=0)  # rehearsal engine calls
    limit_max_cost: int = Field(default=0, ge=0)  # budget x depth of one rehearsal (a 400 over it)
    # An in-flight lease outlives any request (deadline cap, stream): a dead replica's expire.
    limit_lease_s: float = Field(default=900.0, gt=0)
    # After the store fails a limit check, limits are skipped (fail open) for this long.
    limit_fail_open_s: float = Field(default=5.0, ge=0)
    # Per-tenant overrides, JSON: {"t_<24 hex>": {"rps": 5, "concurrency": 2}, "default": {...}}.
    limit_overrides: Annotated[dict[str, TenantLimits], NoDecode] = Field(default_factory=dict)

    # Prometheus multiprocess directory, required when workers > 1.
    metrics_dir: str | None = None
    # FastAPI's own OpenTelemetry; off, it costs nothing per request (its own is Prometheus).
    fastapi_telemetry: bool = False

    # ---- Reliability under faults (docs/gateway.md#faults). A stream's first chunk:
    first_byte_timeout: float = Field(default=60.0, gt=0)
    # The longest silence between two chunks of a stream once its first chunk arrived.
    chunk_timeout: float = Field(default=30.0, gt=0)
    # A pass-through call's overall bound: a whole non-streamed answer, a whole stream.
    request_timeout: float = Field(default=600.0, gt=0)
    # A rehearsal's engine calls end by deadline_ms + commit_timeout.
    commit_timeout: float = Field(default=60.0, gt=0)
    # Passive health: consecutive failed calls that take an engine out.
    eject_after_failures: int = Field(default=3, ge=1)
    # Active health: failed probes in a row (excused while real traffic flows).
    health_failures: int = Field(default=2, ge=1)
    # Canaries for an engine hung behind /health (server/engines/stalls.py); 0: none.
    engine_stall_after_s: float = Field(default=10.0, ge=0)
    engine_canary_timeout_s: float = Field(default=10.0, gt=0)
    # A second engine set for imagination only, tried first for rehearsal-role calls.
    rehearsal_engines: Annotated[list[EngineSpec], NoDecode] = Field(default_factory=list)
    # SIGTERM grace: deadline cap + one commit + 10 s; deploy/ follows it (a test).
    shutdown_grace_s: float = Field(default=190.0, gt=0)
    # Client side: an upload must arrive whole within body_timeout; headers within header_timeout.
    body_timeout: float = Field(default=30.0, gt=0)
    header_timeout: float = Field(default=10.0, gt=0)
    # Idle client connections kept (above common clients' expiry: docs/configuration.md).
    keepalive_s: float = Field(default=75.0, gt=0)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments, then ``RGW_*`` variables, then the ``RGW_CONFIG`` file, then defaults."""
        path = os.environ.get(CONFIG_VARIABLE)
        sources = [init_settings, env_settings]
        if path:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=path))
        return tuple(sources)

    @field_validator("engines", "rehearsal_engines", mode="before")
    @classmethod
    def split_engines(cls, value: Any) -> Any:
        items = split_list(value, None)
        if isinstance(items, list):
            return [EngineSpec.parse(item) if isinstance(item, str) else item for item in items]
        return items

    @field_validator("engines")
    @classmethod
    def check_unique_names(cls, value: list[EngineSpec]) -> list[EngineSpec]:
        labels = [spec.label for spec in value]
        if len(set(labels)) != len(labels):
            raise ValueError(f"engine names must be unique, got {labels}")
        return value

    @field_validator("rehearsal_engines")
    @classmethod
    def check_rehearsal_engines(
        cls, value: list[EngineSpec], info: ValidationInfo
    ) -> list[EngineSpec]:
        """Each serves the rehearse role only; names unique across both sets."""
        if any(spec.roles not in (ALL_ROLES, REHEARSE_ONLY) for spec in value):
            raise ValueError("a rehearsal engine serves the rehearse role only; leave roles out")
        labels = [spec.label for spec in [*info.data.get("engines", []), *value]]
        if len(set(labels)) != len(labels):
            raise ValueError(f"engine names must be unique across both sets, got {labels}")
        return [spec.model_copy(update={"roles": REHEARSE_ONLY}) for spec in value]

    @property
    def all_engines(self) -> list[EngineSpec]:
        """The engines of real work, then the rehearsal set."""
        return [*self.engines, *self.rehearsal_engines]

    @field_validator("redis_prefix")
    @classmethod
    def check_prefix_without_braces(cls, value: str) -> str:
        # A brace would become the Redis Cluster hash tag of every key (server/store/keys.py).
        if "{" in value or "}" in value:
            raise ValueError(f"the Redis key prefix may not contain braces, got {value!r}")
        return value

    @field_validator("aliases", mode="before")
    @classmethod
    def split_aliases(cls, value: Any) -> Any:
        return split_pairs(value)

    @field_validator("rehearsal_mode", mode="before")
    @classmethod
    def read_off_mode(cls, value: Any) -> Any:
        return off_word(value)

    @field_validator("rehearsal_budget", mode="before")
    @classmethod
    def read_auto_budget(cls, value: Any) -> Any:
        """``auto`` in any case; a number as text (an environment variable) as a number."""
        if isinstance(value, str):
            text = value.strip().lower()
            return "auto" if text == "auto" else int(text) if text.lstrip("-").isdigit() else value
        return value

    @field_validator("trust_pins", mode="before")
    @classmethod
    def split_pins(cls, value: Any) -> Any:
        value = split_pairs(value)
        if isinstance(value, dict):
            return {tool: off_word(policy) for tool, policy in value.items()}
        return value

    @field_validator("risk_patterns", mode="before")
    @classmethod
    def split_risk_patterns(cls, value: Any) -> Any:
        return split_pairs(value, last=True)

    @field_validator("risk_overrides", "limit_overrides", mode="before")
    @classmethod
    def parse_overrides(cls, value: Any) -> Any:
        return orjson.loads(value) if isinstance(value, str) and value.strip() else value or {}

    @field_validator("model_switch", "api_keys", mode="before")
    @classmethod
    def split_commas(cls, value: Any) -> Any:
        return split_list(value, ",")

    @field_validator("model_switch")
    @classmethod
    def check_switches(cls, value: list[str]) -> list[str]:
        for suffix in value:
            mode, _, budget = suffix.strip().partition("-")
            numbered = budget.isdigit() or budget == "auto"
            if mode not in ("off", "parallel", "sequential") or (budget and not numbered):
                raise ValueError(
                    f"a switch is MODE or MODE-BUDGET (parallel-4, parallel-auto), got {suffix!r}"
                )
        return [suffix.strip() for suffix in value]

    def values_for(self, cls: type[T], prefix: str = "", **given: Any) -> T:
        """A dataclass of a lower layer (the core's ``Budget``, the store's ``Lifetimes``) built
        from these settings: each field takes the value ``given`` for it, else the setting named
        ``prefix`` + field, else the setting named as the field, else the dataclass's default."""
        values: dict[str, Any] = {}
        for spec in dataclasses.fields(cls):  # type: ignore[arg-type]
            name = spec.name
            if name in given:
                values[name] = given[name]
            elif prefix + name in type(self).model_fields:
                values[name] = getattr(self, prefix + name)
            elif name in type(self).model_fields:
                values[name] = getattr(self, name)
        return cls(**values)

    def masked(self) -> dict[str, Any]:
        """The settings as printable JSON-able data, with every secret replaced by a mask."""
        data = self.model_dump(mode="json")
        data["api_keys"] = [MASK for _ in self.api_keys]
        data["redis_url"] = mask_url(self.redis_url.get_secret_value()) if self.redis_url else None
        for name in ("engines", "rehearsal_engines"):
            data[name] = [
                {
                    **spec.model_dump(mode="json"),
                    "url": mask_url(spec.url),
                    "roles": sorted(spec.roles),
                }
                for spec in getattr(self, name)
            ]
        return data
