"""``rehearsal-gateway doctor``: is everything the gateway needs there, and set up as it needs?

It reads the settings exactly as ``serve`` would (same flags, variables and ``--config`` file, the
same checks), then asks each engine what it serves — its models and their ``max_model_len``,
whether prefix caching is on (vLLM's ``vllm:cache_config_info``), which tool parser it runs when
the engine tells (vLLM's ``/server_info``, served in its dev mode only) — and the Redis store its
version, whether it is a cluster, and how long a round trip takes. Each finding is one line,
``ok``, ``warn`` or ``FAIL``, and each problem says how to fix it. Exit 0 when nothing failed, 1
when something did, 2 when the settings themselves are refused.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import httpx

    from ..settings import EngineSpec, GatewaySettings

Level = Literal["ok", "warn", "FAIL"]
TIMEOUT_S = 5.0
PINGS = 5
# Below this an agent's conversation with tools and a rehearsal note soon hits the limit.
SHORT_CONTEXT = 16_384
EXAMPLE = """examples:
  rehearsal-gateway doctor --engine http://127.0.0.1:8100/v1
  rehearsal-gateway doctor --config gateway.yaml"""
ENGINE_FLAGS = "--enable-auto-tool-choice --tool-call-parser hermes --enable-prefix-caching"


@dataclass(frozen=True, slots=True)
class Finding:
    """One line of the report: how it stands, what was checked, what was found, the fix."""

    level: Level
    subject: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        fix = f"; fix: {self.fix}" if self.fix else ""
        return f"{self.level:<4}  {self.subject}: {self.detail}{fix}"


def register(subparsers: Any) -> None:
    """Add ``doctor``: ``serve``'s settings flags, then the checks."""
    from .serve import add_settings_flags

    parser = subparsers.add_parser(
        "doctor",
        help="check the settings, every engine and Redis; say what is wrong and how to fix it",
        description="Read the settings as serve would, then ask each engine and the Redis store "
        "what they run. Exit 0 when nothing failed, 1 when something did, 2 when the settings "
        "are refused.",
        epilog=EXAMPLE,
    )
    add_settings_flags(parser)
    parser.set_defaults(func=run)


def _metric_labels(exposition: str, family: str) -> dict[str, str] | None:
    """The labels of the first sample of ``family`` in a Prometheus exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        for metric in text_string_to_metric_families(exposition):
            if metric.name == family and metric.samples:
                return dict(metric.samples[0].labels)
    except ValueError:
        return None
    return None


async def _get(client: httpx.AsyncClient, url: str) -> tuple[int, Any] | str:
    """``(status, JSON or text)``, or why the engine could not be asked."""
    import httpx

    try:
        response = await client.get(url)
    except httpx.TimeoutException:
        return f"no answer within {TIMEOUT_S:g} s"
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    try:
        return response.status_code, response.json()
    except ValueError:
        return response.status_code, response.text


async def check_engine(
    client: httpx.AsyncClient, spec: EngineSpec
) -> tuple[list[Finding], set[str]]:
    """What one engine serves and how, as findings; and the models it serves."""
    base = spec.url if spec.url.endswith("/v1") else spec.url + "/v1"
    root = base.removesuffix("/v1")
    subject = f"engine {spec.label} ({spec.url})"
    health = await _get(client, root + "/health")
    if isinstance(health, str) or health[0] != 200:
        why = health if isinstance(health, str) else f"/health answered HTTP {health[0]}"
        fix = "start the engine, or point --engine (RGW_ENGINES) at it"
        return [Finding("FAIL", subject, f"unreachable: {why}", fix)], set()
    findings: list[Finding] = []
    models = await _get(client, base + "/models")
    cards = models[1].get("data", []) if not isinstance(models, str) and isinstance(
        models[1], dict) else []  # fmt: skip
    served = {str(c.get("id")): c.get("max_model_len") for c in cards if isinstance(c, dict)}
    if not served:
        findings.append(Finding("FAIL", subject, "lists no model at /v1/models",
                                "is it a vLLM (or OpenAI-compatible) server?"))  # fmt: skip
    else:
        shown = ", ".join(f"{m} (max_model_len {n})" for m, n in served.items())
        findings.append(Finding("ok", subject, f"serves {shown}"))
    if spec.model and served and spec.model not in served:
        findings.append(Finding("FAIL", subject, f"does not serve model {spec.model!r}",
                                f"set model= to one of {', '.join(served)}"))  # fmt: skip
    short = [m for m, n in served.items() if isinstance(n, int) and n < SHORT_CONTEXT]
    if short:
        findings.append(Finding("warn", subject, f"max_model_len below {SHORT_CONTEXT} for "
                                f"{', '.join(short)}: long agent conversations will be cut",
                                "start vLLM with a larger --max-model-len"))  # fmt: skip
    if spec.router is None:
        findings += await _engine_config(client, root, subject)
    return findings, set(served)


async def _engine_config(client: httpx.AsyncClient, root: str, subject: str) -> list[Finding]:
    """Prefix caching (from /metrics) and the tool parser (from /server_info, when served)."""
    findings: list[Finding] = []
    metrics = await _get(client, root + "/metrics")
    text = metrics[1] if not isinstance(metrics, str) and isinstance(metrics[1], str) else ""
    cache = _metric_labels(text, "vllm:cache_config_info")
    caching = None if cache is None else cache.get("enable_prefix_caching")
    if caching is None:
        findings.append(Finding("warn", subject, "prefix caching unknown (no "
                                "vllm:cache_config_info in /metrics)",
                                f"make sure vLLM runs with {ENGINE_FLAGS}"))  # fmt: skip
    elif caching.lower() != "true":
        findings.append(Finding("FAIL", subject, "prefix caching is off: every imagined "
                                "trajectory prefills the whole conversation again",
                                "start vLLM with --enable-prefix-caching"))  # fmt: skip
    else:
        findings.append(Finding("ok", subject, "prefix caching on"))
    info = await _get(client, root + "/server_info")
    parser = _tool_parser(info[1]) if not isinstance(info, str) and info[0] == 200 else None
    if parser is None:
        findings.append(Finding("ok", subject, "tool parser not exposed by the engine "
                                f"(vLLM needs {ENGINE_FLAGS} for EnvACE)"))  # fmt: skip
    elif parser != "hermes":
        findings.append(Finding("FAIL", subject, f"tool parser {parser!r}: EnvACE writes "
                                "hermes tool calls", "start vLLM with --tool-call-parser "
                                "hermes --enable-auto-tool-choice"))  # fmt: skip
    else:
        findings.append(Finding("ok", subject, "tool parser hermes"))
    return findings


def _tool_parser(info: Any) -> str | None:
    """The ``tool_call_parser`` anywhere in vLLM's ``/server_info`` answer."""
    if isinstance(info, dict):
        if isinstance(info.get("tool_call_parser"), str):
            return str(info["tool_call_parser"])
        for value in info.values():
            if (found := _tool_parser(value)) is not None:
                return found
    return None


async def check_store(settings: GatewaySettings) -> list[Finding]:
    """The Redis store: version, topology, round-trip time; the in-process store says so."""
    from redis.exceptions import RedisError

    from ..settings import mask_url
    from ..store.connect import connect

    if settings.redis_url is None:
        return [Finding("ok", "store", "in-process (one process only: rehearsal memory is lost "
                        "on restart and not shared between workers or replicas)")]  # fmt: skip
    url = settings.redis_url.get_secret_value()
    subject = f"Redis {mask_url(url)}"
    try:
        connection = connect(url, timeout_s=max(settings.redis_timeout, 1.0), max_connections=2)
    except ValueError as exc:
        return [Finding("FAIL", subject, str(exc), "see docs/configuration.md (redis_url)")]
    try:
        info = await connection.client.info("server")
        cluster = await connection.client.info("cluster")
        times = []
        for _ in range(PINGS):
            started = time.perf_counter()
            await connection.client.ping()
            times.append((time.perf_counter() - started) * 1000)
    except (RedisError, OSError, TimeoutError) as exc:
        why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return [Finding("FAIL", subject, f"unreachable: {why}",
                        "start Redis there, or point --redis (RGW_REDIS_URL) at it")]  # fmt: skip
    finally:
        await connection.aclose()
    version = _first(info, "redis_version")
    enabled = str(_first(cluster, "cluster_enabled")) in ("1", "True", "true")
    kind = "cluster" if connection.kind == "cluster" or enabled else connection.kind
    median = statistics.median(times)
    detail = f"Redis {version}, {kind}, round trip {median:.2f} ms (median of {PINGS})"
    if median > settings.redis_timeout * 1000 / 4:
        return [Finding("warn", subject, detail, "a store this slow degrades rehearsals: move "
                        "Redis closer, or raise RGW_REDIS_TIMEOUT")]  # fmt: skip
    return [Finding("ok", subject, detail)]


def _first(info: Any, key: str) -> Any:
    """``key`` of an INFO answer: one node's mapping, or a cluster's mapping per node."""
    if not isinstance(info, dict):
        return None
    if key in info:
        return info[key]
    return next((v.get(key) for v in info.values() if isinstance(v, dict) and key in v), None)


async def examine(settings: GatewaySettings) -> list[Finding]:
    """Every finding about the engines and the store, engines first, concurrently."""
    import httpx

    async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
        engines = asyncio.gather(*(check_engine(client, spec) for spec in settings.all_engines))
        per_engine, store = await asyncio.gather(engines, check_store(settings))
    findings = [finding for found, _ in per_engine for finding in found]
    served = {model for _, models in per_engine for model in models}
    for alias, target in settings.aliases.items():
        if served and target not in served:
            findings.append(Finding("FAIL", f"alias {alias}", f"points at {target!r}, which no "
                                    "engine serves", "correct --alias / RGW_ALIASES"))  # fmt: skip
    return [*findings, *store]


def run(args: argparse.Namespace) -> int:
    """Read the settings, check everything, print one line per finding."""
    from .serve import loaded_from_args
    from .sources import SettingsRefused

    try:
        loaded = loaded_from_args(args)
    except SettingsRefused as exc:
        for line in str(exc).splitlines():
            print(Finding("FAIL", "settings", line).line())
        return 2
    settings = loaded.settings
    changed = sum(source.kind != "default" for source in loaded.sources.values())
    print(Finding("ok", "settings", f"{changed} set (see `rehearsal-gateway config "
                  "--changed`); rehearsal default "
                  f"{settings.rehearsal_mode} K={settings.rehearsal_budget}").line())  # fmt: skip
    findings = asyncio.run(examine(settings))
    for finding in findings:
        print(finding.line(), flush=True)
    failed = sum(f.level == "FAIL" for f in findings)
    warned = sum(f.level == "warn" for f in findings)
    print(f"{failed} problem(s), {warned} warning(s)", file=sys.stderr if failed else sys.stdout)
    return 1 if failed else 0
