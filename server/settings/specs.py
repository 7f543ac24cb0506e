"""The value types of the settings: an engine entry, and one key's limits and risk policy.

``GatewaySettings`` (``server/settings/__init__.py``) holds these; they live apart so that the
settings module reads as the list of settings it is. An engine entry is written
``URL[,key=value…]`` on the command line (``EngineSpec.parse``).
"""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator

Role = Literal["act", "rehearse"]
RouterKind = Literal["vllm-router"]
ALL_ROLES: frozenset[Role] = frozenset(("act", "rehearse"))
REHEARSE_ONLY: frozenset[Role] = frozenset(("rehearse",))
OPTIONS = ("name", "roles", "model", "max_concurrency", "discover", "tls_name", "router")


class EngineSpec(BaseModel):
    """One upstream engine as configured: where it is, what it serves, how much load it takes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str
    name: str = ""
    roles: frozenset[Role] = ALL_ROLES
    model: str | None = None
    max_concurrency: int | None = Field(default=None, ge=1)
    # "dns": the host stands for every address it resolves to (a Kubernetes headless Service).
    discover: Literal["dns"] | None = None
    # https: the name the engine's certificate is checked against (and its Host header) when the
    # URL holds an address; discovery sets it to the group's name for every address it finds.
    tls_name: str | None = None
    # The URL is a router (balancing, health and retries across its engines are its own); the
    # gateway tells it which calls belong together in the form that kind of router hashes on.
    router: RouterKind | None = None

    @field_validator("url")
    @classmethod
    def check_http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"engine URL must be http(s)://host:port[/v1], got {value!r}")
        return value.rstrip("/")

    @property
    def label(self) -> str:
        """The engine's name for metrics and logs: the configured name, else host:port."""
        return self.name or urlsplit(self.url).netloc

    @classmethod
    def parse(cls, text: str) -> EngineSpec:
        """Read the ``URL[,key=value…]`` form used on the command line."""
        url, *options = (part.strip() for part in text.split(","))
        fields: dict[str, Any] = {"url": url}
        for option in options:
            key, sep, value = option.partition("=")
            if not sep or key not in OPTIONS:
                allowed = "|".join(OPTIONS)
                raise ValueError(f"engine options are {allowed}=value, got {option!r}")
            fields[key] = frozenset(value.split("+")) if key == "roles" else value
        return cls.model_validate(fields)


MASK = "********"  # what a secret reads as wherever settings are shown


def split_list(value: Any, sep: str | None) -> Any:
    if not isinstance(value, str):
        return value
    stripped = value.strip()
    if stripped.startswith("["):
        return orjson.loads(stripped)
    return [item for item in stripped.split(sep) if item.strip()]


def split_pairs(value: Any, *, last: bool = False) -> Any:
    """``"k=v,k=v"`` or a JSON object as text, as a dict (split at the last ``=`` with ``last``,
    for keys that may hold one); anything else as given."""
    if not isinstance(value, str):
        return value
    stripped = value.strip()
    if stripped.startswith("{"):
        return orjson.loads(stripped)
    items = (item for item in stripped.split(",") if item.strip())
    pairs = (item.rpartition("=") if last else item.partition("=") for item in items)
    return {key.strip(): val.strip() for key, _, val in pairs}


def mask_url(url: str) -> str:
    """Hide the password (and a bare token user) in a URL's userinfo, keep the rest readable."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    netloc = f"{user}:{MASK}@{hostport}" if user else f"{MASK}@{hostport}"
    return urlunsplit(parts._replace(netloc=netloc))


def off_word(value: Any) -> Any:
    """YAML reads a bare ``off`` as false: in a config file that can only mean ``"off"``."""
    return "off" if value is False else value


class TenantLimits(BaseModel):
    """One key's fair-use limits (docs/limits.md): ``None`` keeps the gateway-wide value; 0: off."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rps: float | None = Field(default=None, ge=0)
    burst: int | None = Field(default=None, ge=0)
    concurrency: int | None = Field(default=None, ge=0)
    engine_calls_per_min: int | None = Field(default=None, ge=0)
    max_cost: int | None = Field(default=None, ge=0)


RiskClass = Literal["read_only", "write", "destructive", "unknown"]


class TenantRisk(BaseModel):
    """One key's tool risk policy (docs/rehearsal.md#risk-classes): ``None`` keeps the
    gateway-wide value; its patterns are tried before the gateway's."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    patterns: dict[str, RiskClass] | None = None
    imagine_reads: bool | None = None
    confirm: bool | None = None  # true: every request of the key asks before doubted destruction
