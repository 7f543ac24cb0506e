"""``rehearsal-gateway up``: start vLLM engines for a model, wait for them, serve the gateway.

Each engine is one ``vllm serve`` with the flags EnvACE needs (hermes tool calls, the Qwen3
reasoning parser, prefix caching) on a free loopback port, one GPU each when ``--gpus`` lists
them; ``--rehearsal-engines`` / ``--rehearsal-gpus`` add a second set that only imagines
(``server/launcher/engine_sets.py`` plans both sets, ``server/launcher/processes.py`` runs the
processes). Once every engine answers ``/health`` the gateway starts in this process through
``serve``'s own code: ``up`` takes ``serve``'s flags, adds the engines it started to
``--engine`` and ``--rehearsal-engine`` and calls ``server.launcher.serve.run``, so both read
one ``GatewaySettings``. Ctrl-C or SIGTERM stops the gateway, then every engine's process group.

Errors::

    UsageError          exit 2: bad flags, no vLLM executable, settings serve would reject
    EngineStartFailed   exit 1: an engine exited or did not answer /health in time (launch.py)

A stop signal raises `Stopped` (a ``BaseException``, so that no ``except Exception`` on the way
swallows it): exit 0 once the gateway served, 128 + the signal while engines were starting.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from .engine_sets import (
    ENVACE_FLAGS,
    MAIN_PREFIX,
    REHEARSAL_PREFIX,
    EngineSet,
    UsageError,
    batch_slots,
    engine_gpus,
    extra_vllm_args,
    rehearsal_gpus,
    vllm_argv,
)

if TYPE_CHECKING:
    from ..settings import GatewaySettings
    from .processes import EnginePlan, EngineProcess

__all__ = ["ENVACE_FLAGS", "UsageError", "batch_slots", "register", "run"]

STOP_GRACE_S = 15.0
START_TIMEOUT_S = 1200.0  # an 8B model loads in minutes; a first download can take longer
INSTALL_HINT = (
    "install it with `pip install 'rehearsal-gateway[gpu]'`, or point --vllm at the vllm "
    "executable of a vLLM environment (e.g. --vllm /opt/vllm/bin/vllm)"
)


class Stopped(BaseException):
    """SIGINT or SIGTERM arrived while starting or serving."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def register(subparsers: Any) -> None:
    """Add ``up``: ``serve``'s flags (taken from its parser, so they cannot drift) plus ours."""
    from . import serve as serve_cli

    scratch = argparse.ArgumentParser(add_help=False).add_subparsers()
    serve_cli.register(scratch)
    parser = subparsers.add_parser(
        "up",
        parents=[scratch.choices["serve"]],
        add_help=False,  # serve's -h comes with its flags
        help="start vLLM engines for a model, then serve the gateway in front of them",
        description="Start N `vllm serve` engines with the EnvACE flags on free loopback ports, "
        "wait until they are healthy, then run the gateway (every `serve` flag applies; "
        "--engine adds engines that already run). With --rehearsal-engines or --rehearsal-gpus "
        "a second set starts too, and the gateway sends it only rehearsal-role calls. "
        "Ctrl-C stops everything.",
        epilog="examples:\n"
        "  rehearsal-gateway up --model Qwen/Qwen3-8B --gpus 0,1 --port 8000\n"
        "  rehearsal-gateway up --model Qwen/Qwen3-8B --gpus 0,1,2 --rehearsal-gpus 3\n"
        "  rehearsal-gateway up --model /models/envace --rehearsal-mode parallel "
        "-- --max-model-len 32768",
    )
    group = parser.add_argument_group("vLLM engines")
    group.add_argument(
        "--model", required=True, metavar="PATH_OR_NAME", help="what vLLM loads (required)"
    )
    group.add_argument(
        "--engines", type=int, metavar="N", help="engines to start (default: one per GPU, else 1)"
    )
    group.add_argument(
        "--gpus",
        metavar="ID,…",
        help="one GPU per engine, as CUDA_VISIBLE_DEVICES, e.g. 0,1 (default: none)",
    )
    group.add_argument(
        "--rehearsal-engines",
        type=int,
        metavar="N",
        help="engines to start for imagination only, the gateway's --rehearsal-engine set "
        "(default: one per --rehearsal-gpus GPU, else 0)",
    )
    group.add_argument(
        "--rehearsal-gpus",
        metavar="ID,…",
        help="one GPU per rehearsal engine, none of --gpus' (needed with --gpus; default: none)",
    )
    group.add_argument(
        "--served-model-name", metavar="NAME", help="the name clients ask for (default: basename)"
    )
    group.add_argument(
        "--vllm", metavar="PATH", help="the vllm executable (default: beside python, else PATH)"
    )
    group.add_argument(
        "--vllm-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more flag for every engine, joined with =: --vllm-arg=--max-model-len=32768 "
        "(repeatable; default: none)",
    )
    group.add_argument("--log-dir", metavar="DIR", help="engine logs (default: a new temp dir)")
    group.add_argument(
        "--start-timeout",
        type=float,
        default=START_TIMEOUT_S,
        metavar="S",
        help=f"seconds for every engine to become healthy (default {START_TIMEOUT_S:g})",
    )
    group.add_argument(
        "vllm_args",
        nargs="*",
        metavar="-- VLLM_ARGS",
        help="everything after -- goes to vLLM (default: none)",
    )
    parser.set_defaults(func=run)


def find_vllm(explicit: str | None) -> str:
    """The vllm executable: ``--vllm``, else the one beside this Python, else the one on PATH."""
    if explicit is not None:
        path = Path(explicit)
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
        raise UsageError(f"--vllm {explicit}: no such executable; {INSTALL_HINT}")
    beside = Path(sys.executable).parent / "vllm"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("vllm")
    if found is None:
        raise UsageError(
            f"vLLM not found (no vllm beside {sys.executable} or on PATH); {INSTALL_HINT}"
        )
    return found


def _check_gateway(args: argparse.Namespace) -> GatewaySettings:
    """Reject, before minutes of loading, what ``serve`` would reject once the engines are up."""
    from . import serve as serve_cli
    from .sources import SettingsRefused

    try:
        settings = serve_cli.settings_from_args(args)
    except SettingsRefused as exc:
        raise UsageError(str(exc)) from exc
    if settings.port == 0:
        return settings
    family, kind, proto, _, address = socket.getaddrinfo(
        settings.host, settings.port, type=socket.SOCK_STREAM
    )[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            sock.bind(address)
        except OSError as exc:
            raise UsageError(f"the gateway cannot listen on {address}: {exc.strerror}") from exc
    return settings


class _Signals:
    """SIGINT/SIGTERM handling: raise `Stopped` once, defer it around a spawn, then only hurry."""

    def __init__(self) -> None:
        self.stopping = False
        self.hurry = threading.Event()
        self._deferring = False
        self._pending: int | None = None

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.stopping:
            self.hurry.set()  # a second signal: skip the grace period
        elif self._deferring:
            self._pending = signum
        else:
            self.stopping = True
            raise Stopped(signum)

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self.handle)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Hold a stop until the block is over (so no engine starts untracked)."""
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False
        if self._pending is not None:
            self.stopping = True
            raise Stopped(self._pending)


def run(args: argparse.Namespace) -> int:
    """Start the engines, wait for their health, serve the gateway; stop everything after."""
    from .processes import free_ports

    try:
        vllm = find_vllm(args.vllm)
        gpus = engine_gpus(args.engines, args.gpus)
        imagining = rehearsal_gpus(args.rehearsal_engines, args.rehearsal_gpus, gpus)
        extra = extra_vllm_args(args)
        args.served_model_name = args.served_model_name or Path(args.model.rstrip("/")).name
        ports = free_ports(len(gpus) + len(imagining))
        main = EngineSet(MAIN_PREFIX, tuple(gpus), tuple(ports[: len(gpus)]))
        rehearsal = EngineSet(REHEARSAL_PREFIX, tuple(imagining), tuple(ports[len(gpus) :]))
        others = (list(args.engine or []), list(args.rehearsal_engine or []))
        _wire(args, main, rehearsal, others, None)
        settings = _check_gateway(args)
        slots, batch = batch_slots(extra, settings.engine_max_concurrency, settings.workers)
        _wire(args, main, rehearsal, others, slots)
        scheduling = settings.engine_scheduling
        log_dir = _log_dir(args.log_dir)
    except UsageError as exc:
        print(f"rehearsal-gateway up: {exc}", file=sys.stderr)
        return 2
    argv_for = {port: vllm_argv(args, vllm, port, extra, scheduling, batch) for port in ports}
    plans = [*main.plans(argv_for, log_dir), *rehearsal.plans(argv_for, log_dir)]
    sets = f"{len(gpus)} engine(s)"
    if imagining:
        sets += f" and {len(imagining)} rehearsal engine(s)"
    print(f"rehearsal-gateway up: {sets} for {args.model}, logs in {log_dir}")
    return _run_engines(args, plans)


def _wire(
    args: argparse.Namespace,
    main: EngineSet,
    rehearsal: EngineSet,
    others: tuple[list[str], list[str]],
    slots: int | None,
) -> None:
    """Point the gateway's two sets at the engines ``up`` starts, beside any already running.

    A rehearsal engine takes the main engines' slots too: it serves the rehearse role with all of
    them (``RGW_REHEARSAL_ENGINE_SHARE`` applies to engines that also act).
    """
    model = args.served_model_name
    args.engine = [*main.specs(model, slots), *others[0]]
    args.rehearsal_engine = [*rehearsal.specs(model, slots), *others[1]] or None


def _log_dir(flag: str | None) -> Path:
    if flag is None:
        return Path(tempfile.mkdtemp(prefix="rgw-up-"))
    try:
        Path(flag).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--log-dir {flag}: {exc.strerror}") from exc
    return Path(flag)


def _run_engines(args: argparse.Namespace, plans: list[EnginePlan]) -> int:
    from . import serve as serve_cli
    from .processes import (
        EngineStartFailed,
        log_tail,
        start_engine,
        stop_engines,
        wait_healthy,
        watch_engines,
    )

    signals = _Signals()
    signals.install()
    env = {name: value for name, value in os.environ.items() if not name.startswith("RGW_")}
    engines: list[EngineProcess] = []
    serving = False
    done = threading.Event()
    try:
        for plan in plans:
            with signals.deferred():
                engines.append(start_engine(plan, env))
            gpu = "" if plan.gpu is None else f", GPU {plan.gpu}"
            print(f"  {plan.name}: pid {engines[-1].popen.pid}{gpu}, {plan.url}, {plan.log_path}")
            print(f"    $ {plan.describe()}", flush=True)
        print(f"waiting for /health (up to {args.start_timeout:g} s)", flush=True)
        wait_healthy(engines, args.start_timeout)
        serving = True
        watch_engines(engines, done)
        code: int = serve_cli.run(args)
    except Stopped as stop:
        code = 0 if serving else 128 + stop.signum
        if not serving:
            print(
                "rehearsal-gateway up: interrupted while the engines were starting", file=sys.stderr
            )
    except EngineStartFailed as exc:
        signals.stopping = True
        print(f"rehearsal-gateway up: {exc}", file=sys.stderr)
        if exc.log_path is not None:
            print(log_tail(exc.log_path), file=sys.stderr)
        code = 1
    finally:
        signals.stopping = True
        done.set()
        signals.install()  # uvicorn's supervisor (--workers) leaves its own handlers behind
        if engines:
            print(f"stopping {len(engines)} engine(s)", flush=True)
            stop_engines(engines, STOP_GRACE_S, signals.hurry)
            print("every engine stopped", flush=True)
    return code
