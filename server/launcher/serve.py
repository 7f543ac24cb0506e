"""``rehearsal-gateway serve``: run the gateway with uvicorn.

Flags become ``RGW_*`` variables, so flags, environment and worker processes all read one
``GatewaySettings``. The settings are printed at start with every secret masked. With
``--workers N`` (N > 1) uvicorn starts N processes that each build the app from the environment,
and Prometheus metrics switch to multiprocess mode in a shared directory. Every log record is
written to stderr as one JSON line (``server/telemetry/logs.py``), in each worker.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..settings import GatewaySettings

ENV_PREFIX = "RGW_"


def register(subparsers: Any) -> None:
    """Add ``serve`` to the top-level CLI (imports stay light until it runs)."""
    parser = subparsers.add_parser(
        "serve",
        help="run the OpenAI-compatible gateway in front of one or more vLLM engines",
        description="Run the gateway. Every flag can also be set as an RGW_* variable.",
    )
    parser.add_argument(
        "--engine",
        action="append",
        metavar="URL[,name=N][,roles=act+rehearse][,model=M][,max_concurrency=C][,discover=dns]",
        help="an engine's OpenAI base URL, e.g. http://127.0.0.1:8100/v1 (repeatable); with "
        "discover=dns the host stands for every address it resolves to",
    )
    parser.add_argument(
        "--rehearsal-engine",
        action="append",
        metavar="URL[,name=N][,model=M][,max_concurrency=C][,discover=dns]",
        help="an engine for imagination only (repeatable): rehearsal-role calls go to these "
        "first, acting calls, commits and pass-through never",
    )
    parser.add_argument(
        "--discovery-interval",
        type=float,
        metavar="SECONDS",
        help="how often a discover=dns engine name is resolved again (default 10)",
    )
    parser.add_argument(
        "--alias", action="append", metavar="PUBLIC=SERVED", help="a public model name (repeatable)"
    )
    parser.add_argument("--redis", metavar="URL", help="Redis URL for rehearsal memory")
    parser.add_argument("--host", help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="listen port (default 8000)")
    parser.add_argument("--workers", type=int, help="uvicorn worker processes (default 1)")
    parser.add_argument(
        "--api-key",
        action="append",
        metavar="KEY",
        help="require this bearer key (repeatable; prefer RGW_API_KEYS, flags show in `ps`)",
    )
    parser.add_argument(
        "--engine-scheduling",
        choices=("fcfs", "priority"),
        help="the engines' vLLM --scheduling-policy; with priority, rehearsal calls yield to "
        "commits and pass-through (default fcfs)",
    )
    parser.add_argument("--log-level", choices=("critical", "error", "warning", "info", "debug"))
    parser.add_argument("--access-log", action="store_true", help="log every request line")
    parser.set_defaults(func=run)


class SettingsRefused(ValueError):
    """The flags and ``RGW_*`` variables do not make settings the gateway can run with."""


def settings_from_args(args: argparse.Namespace) -> GatewaySettings:
    """Export the flags as ``RGW_*`` variables and read the settings ``serve`` would run with.

    ``up`` calls this before it starts any engine, so a mistake costs no minutes of loading.
    """
    from pydantic import ValidationError

    from ..settings import GatewaySettings

    _export(args)
    try:
        settings = GatewaySettings()
    except ValidationError as exc:
        raise SettingsRefused(f"invalid settings\n{exc}") from exc
    if settings.workers > 1 and settings.redis_url is None:
        raise SettingsRefused(
            "--workers > 1 needs --redis URL (RGW_REDIS_URL): with the in-process store each "
            "worker would keep its own rehearsal memory, and a tool result reaching another "
            "worker than the one that committed the call would be lost"
        )
    return settings


def _export(args: argparse.Namespace) -> None:
    import orjson

    values: dict[str, str | None] = {
        "ENGINES": orjson.dumps(args.engine).decode() if args.engine else None,
        "REHEARSAL_ENGINES": (
            orjson.dumps(args.rehearsal_engine).decode()
            if getattr(args, "rehearsal_engine", None)
            else None
        ),
        "ALIASES": ",".join(args.alias) if args.alias else None,
        "DISCOVERY_INTERVAL": _text(args.discovery_interval),
        "REDIS_URL": args.redis,
        "HOST": args.host,
        "PORT": _text(args.port),
        "WORKERS": _text(args.workers),
        "API_KEYS": orjson.dumps(args.api_key).decode() if args.api_key else None,
        "LOG_LEVEL": args.log_level,
        "ENGINE_SCHEDULING": getattr(args, "engine_scheduling", None),
    }
    for name, value in values.items():
        if value is not None:
            os.environ[ENV_PREFIX + name] = value


def uvicorn_options(settings: GatewaySettings) -> dict[str, Any]:
    """The uvicorn options that make the gateway's edges: drain, keep-alive, its protocol."""
    from ..http.protocol import GatewayProtocol

    return {
        # SIGTERM: stop accepting, let in-flight requests finish within the grace (a rehearsal
        # may run to its deadline cap plus one commit), then stop. deploy/ follows this setting.
        "timeout_graceful_shutdown": math.ceil(settings.shutdown_grace_s),
        "timeout_keep_alive": settings.keepalive_s,
        # A class (uvicorn's ``http`` option takes one): header timeout, one-write answers and
        # disconnect signals (server/http/protocol.py). Worker processes receive it pickled, by
        # name; the timeout itself comes from each worker's app (its lifespan state).
        "http": GatewayProtocol,
        # The gateway serves no WebSocket route; uvicorn then loads no WebSocket library (one
        # whose deprecated module older uvicorn imports, warning at every start).
        "ws": "none",
        # Nothing in the gateway reads the client's address or scheme, so X-Forwarded-* need not
        # be applied to every request by uvicorn's middleware for it;
        # nor is ``server: uvicorn`` worth a header on every answer.
        "proxy_headers": False,
        "server_header": False,
    }


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def run(args: argparse.Namespace) -> int:
    """Start the gateway and block until it stops."""
    import orjson
    import uvicorn

    from ..settings import GatewaySettings
    from ..telemetry.logs import log_config

    try:
        settings = settings_from_args(args)
    except SettingsRefused as exc:
        print(f"rehearsal-gateway serve: {exc}", file=sys.stderr)
        return 2
    if settings.redis_url is None:
        print("rehearsal store: in-process (no Redis URL configured; one process only)", flush=True)
    if settings.workers > 1 and settings.metrics_dir is None:
        metrics_dir = tempfile.mkdtemp(prefix="rgw-metrics-")
        os.environ[ENV_PREFIX + "METRICS_DIR"] = metrics_dir
        settings = GatewaySettings()
    if settings.metrics_dir is not None:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = settings.metrics_dir
    shown = orjson.dumps(settings.masked(), option=orjson.OPT_INDENT_2).decode()
    print(f"rehearsal-gateway serve, settings:\n{shown}", flush=True)

    common: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "log_level": settings.log_level,
        # JSON lines, applied by uvicorn in each worker process (server/telemetry/logs.py).
        "log_config": log_config(settings.log_level),
        "access_log": args.access_log,
        **uvicorn_options(settings),
    }
    if settings.workers > 1:
        uvicorn.run(
            "rehearsal_gateway.server.app:app_from_environment",
            factory=True,
            workers=settings.workers,
            **common,
        )
    else:
        from ..app import create_app

        uvicorn.run(create_app(settings, owns_process=True), **common)
    return 0
