"""``rehearsal-gateway serve``: run the gateway with uvicorn.

Flags become ``RGW_*`` variables and ``--config FILE`` becomes ``RGW_CONFIG``, so flags,
environment, the config file and worker processes all read one ``GatewaySettings``, checked as a
whole before anything starts (``server/launcher/sources.py``). The settings are logged at start
as one JSON line, every secret masked. With ``--workers N`` (N > 1) uvicorn starts N processes
that each build the app from the environment, and Prometheus metrics switch to multiprocess mode
in a shared directory. Every log record is written to stderr as one JSON line
(``server/telemetry/logs.py``), in each worker.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from typing import TYPE_CHECKING, Any

from ...rehearsal.budget import COMMIT_RULES, MODES

if TYPE_CHECKING:
    from ..settings import GatewaySettings

ENV_PREFIX = "RGW_"
# Each flag and the setting it sets (``server/settings/``): a flag wins over the setting's
# RGW_* variable, which wins over the --config file.
FLAG_SETTINGS: dict[str, str] = {
    "--engine": "engines",
    "--rehearsal-engine": "rehearsal_engines",
    "--alias": "aliases",
    "--discovery-interval": "discovery_interval",
    "--redis": "redis_url",
    "--host": "host",
    "--port": "port",
    "--workers": "workers",
    "--api-key": "api_keys",
    "--engine-scheduling": "engine_scheduling",
    "--log-level": "log_level",
    "--rehearsal-mode": "rehearsal_mode",
    "--rehearsal-budget": "rehearsal_budget",
    "--rehearsal-depth": "rehearsal_depth",
    "--rehearsal-commit": "rehearsal_commit",
    "--rehearsal-deadline-ms": "rehearsal_deadline_ms",
    "--model-switch": "model_switch",
}
EXAMPLE = """examples:
  rehearsal-gateway serve --engine http://127.0.0.1:8100/v1 --port 8000
  rehearsal-gateway serve --config gateway.yaml --rehearsal-mode parallel --rehearsal-budget 4"""


def register(subparsers: Any) -> None:
    """Add ``serve`` to the top-level CLI (imports stay light until it runs)."""
    parser = subparsers.add_parser(
        "serve",
        help="run the OpenAI-compatible gateway in front of one or more vLLM engines",
        description="Run the gateway. Every flag is also an RGW_* variable and a key of the "
        "--config file; a flag wins over the variable, the variable over the file "
        "(docs/configuration.md).",
        epilog=EXAMPLE,
    )
    add_settings_flags(parser)
    parser.add_argument(
        "--access-log", action="store_true", help="log every request line (off by default)"
    )
    parser.set_defaults(func=run)


def add_settings_flags(parser: argparse.ArgumentParser) -> None:
    """The flags that set settings (``serve``'s, and ``config``'s and ``doctor``'s with them)."""
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="a YAML file of settings (env RGW_CONFIG; default: none)",
    )
    parser.add_argument(
        "--engine",
        action="append",
        metavar="URL[,name=N][,roles=act+rehearse][,model=M][,max_concurrency=C][,discover=dns]",
        help="an engine's OpenAI base URL (repeatable); with discover=dns the host stands for "
        "every address it resolves to (default http://127.0.0.1:8100/v1)",
    )
    parser.add_argument(
        "--rehearsal-engine",
        action="append",
        metavar="URL[,name=N][,model=M][,max_concurrency=C][,discover=dns]",
        help="an engine for imagination only (repeatable): rehearsal-role calls go to these "
        "first, acting calls, commits and pass-through never (default: none)",
    )
    parser.add_argument(
        "--discovery-interval",
        type=float,
        metavar="SECONDS",
        help="how often a discover=dns engine name is resolved again (default 10)",
    )
    parser.add_argument(
        "--alias",
        action="append",
        metavar="PUBLIC=SERVED",
        help="a public model name (repeatable; default: none)",
    )
    parser.add_argument(
        "--redis", metavar="URL", help="Redis URL for rehearsal memory (default: in-process store)"
    )
    parser.add_argument("--host", help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="listen port (default 8000)")
    parser.add_argument("--workers", type=int, help="uvicorn worker processes (default 1)")
    parser.add_argument(
        "--api-key",
        action="append",
        metavar="KEY",
        help="require this bearer key (repeatable; prefer RGW_API_KEYS, flags show in `ps`; "
        "default: no key required)",
    )
    parser.add_argument(
        "--engine-scheduling",
        choices=("fcfs", "priority"),
        help="the engines' vLLM --scheduling-policy; with priority, rehearsal calls yield to "
        "commits and pass-through (default fcfs)",
    )
    parser.add_argument(
        "--log-level",
        choices=("critical", "error", "warning", "info", "debug"),
        help="the lowest level logged (default info)",
    )
    rehearsal = parser.add_argument_group(
        "rehearsal defaults", "what a request that sets no knob of its own gets"
    )
    rehearsal.add_argument(
        "--rehearsal-mode", choices=MODES, help="the default mode (default off: a drop-in proxy)"
    )
    rehearsal.add_argument(
        "--rehearsal-budget", metavar="K", help="imagined trajectories, or auto (default 4)"
    )
    rehearsal.add_argument(
        "--rehearsal-depth", type=int, metavar="D", help="imagined steps each (default 1)"
    )
    rehearsal.add_argument(
        "--rehearsal-commit", choices=COMMIT_RULES, help="the commit rule (default anchored)"
    )
    rehearsal.add_argument(
        "--rehearsal-deadline-ms", type=int, metavar="MS", help="rehearsal deadline (default 20000)"
    )
    rehearsal.add_argument(
        "--model-switch",
        metavar="SUFFIX[,SUFFIX]",
        help="model-name switches offered, e.g. parallel-4,sequential-2: a client asking for "
        "MODEL@parallel-4 gets that rehearsal (default: none, the switch is off)",
    )


def _flag_text(value: object) -> str:
    import orjson

    if isinstance(value, list):
        return orjson.dumps(value).decode()
    return str(value)


def given_of(args: argparse.Namespace) -> Any:
    """What the flags of ``args`` set: each setting with its flag and its value's text."""
    from .sources import Given

    flags: dict[str, tuple[str, str]] = {}
    for flag, name in FLAG_SETTINGS.items():
        value = getattr(args, flag.lstrip("-").replace("-", "_"), None)
        if value is None:
            continue
        text = ",".join(value) if flag == "--alias" else _flag_text(value)
        flags[name] = (flag, text)
    return Given(flags, getattr(args, "config", None))


def settings_from_args(args: argparse.Namespace) -> GatewaySettings:
    """Read and check the settings ``serve`` would run with (``sources.load_settings``).

    ``up`` calls this before it starts any engine, so a mistake costs no minutes of loading.
    """
    settings: GatewaySettings = loaded_from_args(args).settings
    return settings


def loaded_from_args(args: argparse.Namespace) -> Any:
    """The settings with where each value came from; ``SettingsRefused`` names what is wrong."""
    from .sources import load_settings

    return load_settings(given_of(args))


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


def refusal(command: str, exc: Exception) -> str:
    """A refusal's lines, each prefixed with the command, as a shell user reads them."""
    return "\n".join(f"rehearsal-gateway {command}: {line}" for line in str(exc).splitlines())


def run(args: argparse.Namespace) -> int:
    """Start the gateway and block until it stops."""
    import logging.config

    import uvicorn

    from ..settings import GatewaySettings
    from ..telemetry.logs import log_config
    from .sources import SettingsRefused

    try:
        settings = settings_from_args(args)
    except SettingsRefused as exc:
        print(refusal("serve", exc), file=sys.stderr)
        return 2
    if settings.workers > 1 and settings.metrics_dir is None:
        metrics_dir = tempfile.mkdtemp(prefix="rgw-metrics-")
        os.environ[ENV_PREFIX + "METRICS_DIR"] = metrics_dir
        settings = GatewaySettings()
    if settings.metrics_dir is not None:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = settings.metrics_dir
    # One JSON line like every other (secrets masked); `rehearsal-gateway config` shows the same
    # settings readably, each with where its value came from.
    logging.config.dictConfig(log_config(settings.log_level))
    logging.getLogger("rehearsal_gateway.server").info(
        "settings", extra={"settings": settings.masked()}
    )

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
