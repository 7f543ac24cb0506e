"""``rehearsal-gateway up``: start vLLM engines for a model, wait for them, serve the gateway.

Each engine is one ``vllm serve`` with the flags EnvACE needs (hermes tool calls, the Qwen3
reasoning parser, prefix caching) on a free loopback port, one GPU each when ``--gpus`` lists
them (``server/launcher/processes.py`` runs the processes). Once every engine answers
``/health`` the gateway starts in this process through ``serve``'s own code: ``up`` takes
``serve``'s flags, adds the engines it started to ``--engine`` and calls
``server.launcher.serve.run``, so both read one ``GatewaySettings``. Ctrl-C or SIGTERM stops
the gateway, then every engine's process group.

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

if TYPE_CHECKING:
    from ..settings import GatewaySettings
    from .processes import EnginePlan, EngineProcess

ENVACE_FLAGS = (
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "hermes",
    "--reasoning-parser",
    "qwen3",
    "--enable-prefix-caching",
)
# Set by `up` itself: a second copy among the pass-through flags would break the wiring.
RESERVED_FLAGS = ("--host", "--port", "--served-model-name")
MAX_NUM_SEQS = "--max-num-seqs"
STOP_GRACE_S = 15.0
START_TIMEOUT_S = 1200.0  # an 8B model loads in minutes; a first download can take longer
INSTALL_HINT = (
    "install it with `pip install 'rehearsal-gateway[gpu]'`, or point --vllm at the vllm "
    "executable of a vLLM environment (e.g. --vllm /opt/vllm/bin/vllm)"
)


class UsageError(Exception):
    """A flag, a missing vLLM or a gateway setting that makes starting pointless."""


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
        "--engine adds engines that already run). Ctrl-C stops everything.",
        epilog="examples:\n"
        "  rehearsal-gateway up --model Qwen/Qwen3-8B --gpus 0,1 --port 8000\n"
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


def engine_gpus(engines: int | None, gpus: str | None) -> list[str | None]:
    """One entry per engine: the GPU it gets, or None without ``--gpus``."""
    if gpus is None:
        count = 1 if engines is None else engines
        if count < 1:
            raise UsageError(f"--engines must be at least 1, got {count}")
        return [None] * count
    ids = [item.strip() for item in gpus.split(",")]
    if not all(ids) or len(set(ids)) != len(ids):
        raise UsageError(f"--gpus takes distinct ids separated by commas, got {gpus!r}")
    count = len(ids) if engines is None else engines
    if count < 1:
        raise UsageError(f"--engines must be at least 1, got {count}")
    if count > len(ids):
        raise UsageError(f"{count} engines need {count} GPUs, --gpus lists {len(ids)}")
    return list(ids[:count])


def _extra_vllm_args(args: argparse.Namespace) -> list[str]:
    extra = [*args.vllm_arg, *args.vllm_args]
    for arg in extra:
        for flag in RESERVED_FLAGS:
            if arg == flag or arg.startswith(flag + "="):
                hint = " (use up's own --served-model-name)" if flag == RESERVED_FLAGS[2] else ""
                raise UsageError(f"{flag} is set by up for each engine{hint}")
    return extra


def batch_slots(extra: list[str], default: int, workers: int = 1) -> tuple[int, tuple[str, ...]]:
    """Each gateway worker's slots per engine, and the vLLM flags (none when the user set them).

    The workers' slots per engine (``max_concurrency`` each) must add up to vLLM's
    ``--max-num-seqs`` for ``RGW_REHEARSAL_ENGINE_SHARE`` to be a share of the engine's batch: a
    ``--max-num-seqs`` among the vLLM arguments is split between the workers, else vLLM is given
    the workers' ``RGW_ENGINE_MAX_CONCURRENCY`` (``default``) each. The gateway never has more
    calls than that in flight on one engine, so a larger vLLM batch would stay unused.
    """
    for index, arg in enumerate(extra):
        value = None
        if arg == MAX_NUM_SEQS:
            value = extra[index + 1] if index + 1 < len(extra) else ""
        elif arg.startswith(MAX_NUM_SEQS + "="):
            value = arg.split("=", 1)[1]
        if value is not None:
            if not value.isdigit() or int(value) < 1:
                raise UsageError(f"{MAX_NUM_SEQS} must be a positive integer, got {value!r}")
            return max(1, int(value) // workers), ()
    return default, (MAX_NUM_SEQS, str(default * workers))


def _vllm_argv(
    args: argparse.Namespace,
    vllm: str,
    port: int,
    extra: list[str],
    scheduling: str,
    batch: tuple[str, ...],
) -> tuple[str, ...]:
    from .processes import ENGINE_HOST

    # The gateway's RGW_ENGINE_SCHEDULING says how the engines schedule: they must agree.
    policy = ("--scheduling-policy", "priority") if scheduling == "priority" else ()
    return (vllm, "serve", args.model, "--host", ENGINE_HOST, "--port", str(port),
            "--served-model-name", args.served_model_name, *batch, *ENVACE_FLAGS, *policy,
            *extra)  # fmt: skip


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
    from .processes import EnginePlan, free_ports

    try:
        vllm = find_vllm(args.vllm)
        gpus = engine_gpus(args.engines, args.gpus)
        extra = _extra_vllm_args(args)
        args.served_model_name = args.served_model_name or Path(args.model.rstrip("/")).name
        ports = free_ports(len(gpus))
        names = [f"engine{index}" for index in range(len(gpus))]
        others = list(args.engine or [])
        args.engine = [*_engine_specs(names, ports, args.served_model_name, None), *others]
        settings = _check_gateway(args)
        slots, batch = batch_slots(extra, settings.engine_max_concurrency, settings.workers)
        args.engine = [*_engine_specs(names, ports, args.served_model_name, slots), *others]
        scheduling = settings.engine_scheduling
        log_dir = _log_dir(args.log_dir)
    except UsageError as exc:
        print(f"rehearsal-gateway up: {exc}", file=sys.stderr)
        return 2
    plans = [
        EnginePlan(
            name,
            port,
            gpu,
            _vllm_argv(args, vllm, port, extra, scheduling, batch),
            log_dir / f"{name}.log",
        )
        for name, port, gpu in zip(names, ports, gpus, strict=True)
    ]
    print(f"rehearsal-gateway up: {len(plans)} engine(s) for {args.model}, logs in {log_dir}")
    return _run_engines(args, plans)


def _engine_specs(names: list[str], ports: list[int], model: str, slots: int | None) -> list[str]:
    """The gateway's ``--engine`` entries for the engines ``up`` starts."""
    from .processes import engine_url

    cap = "" if slots is None else f",max_concurrency={slots}"
    return [
        f"{engine_url(port)},name={name},model={model}{cap}"
        for name, port in zip(names, ports, strict=True)
    ]


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
