"""vLLM engines as local child processes: start them, wait for their health, stop them for good.

Each engine runs in its own process group (vLLM starts an engine-core process beside its API
server), writes its whole output to one log file, and is stopped with its group: SIGTERM to every
group at once, one shared grace period, then SIGKILL to whatever is left. ``rehearsal-gateway up``
(``server/launcher/up.py``) is the only user.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

ENGINE_HOST = "127.0.0.1"
POLL_S = 0.5
PROGRESS_EVERY_S = 10.0
TAIL_LINES = 40


class EngineStartFailed(Exception):
    """An engine exited, or did not answer ``/health``, before it was ready."""

    def __init__(self, message: str, log_path: Path | None = None) -> None:
        super().__init__(message)
        self.log_path = log_path


def engine_url(port: int) -> str:
    """The OpenAI base URL of a local engine on ``port``."""
    return f"http://{ENGINE_HOST}:{port}/v1"


@dataclass(frozen=True)
class EnginePlan:
    """One engine to start: its name, loopback port, GPU, command line and log file."""

    name: str
    port: int
    gpu: str | None
    argv: tuple[str, ...]
    log_path: Path

    @property
    def url(self) -> str:
        """The engine's OpenAI base URL, as the gateway is configured with it."""
        return engine_url(self.port)

    def describe(self) -> str:
        """The command as one shell line, with the GPU it gets."""
        prefix = "" if self.gpu is None else f"CUDA_VISIBLE_DEVICES={self.gpu} "
        return prefix + shlex.join(self.argv)


@dataclass
class EngineProcess:
    """A started engine: its plan, its process (the leader of its own group), when it started."""

    plan: EnginePlan
    popen: subprocess.Popen[bytes]
    started: float


def start_engine(plan: EnginePlan, env: dict[str, str]) -> EngineProcess:
    """Start one engine in a new session (its own process group), output to its log file."""
    if plan.gpu is not None:
        env = {**env, "CUDA_VISIBLE_DEVICES": plan.gpu}
    try:
        with plan.log_path.open("wb") as log:
            popen = subprocess.Popen(
                plan.argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
    except OSError as exc:
        raise EngineStartFailed(f"{plan.name}: cannot run {plan.argv[0]}: {exc}") from exc
    return EngineProcess(plan, popen, time.monotonic())


def wait_healthy(engines: Sequence[EngineProcess], timeout: float) -> None:
    """Block until every engine answers ``GET /health`` with 200, printing progress.

    Raises `EngineStartFailed` as soon as one engine exits or ``timeout`` seconds pass.
    """
    begin = time.monotonic()
    next_progress = begin + PROGRESS_EVERY_S
    pending = list(engines)
    # trust_env=False: a proxy configured for the outside world must not see loopback probes.
    with httpx.Client(timeout=2.0, trust_env=False) as http:
        while pending:
            for engine in list(pending):
                plan = engine.plan
                code = engine.popen.poll()
                if code is not None:
                    message = f"{plan.name} exited with code {code} while starting"
                    raise EngineStartFailed(message, plan.log_path)
                if _healthy(http, plan):
                    pending.remove(engine)
                    elapsed = time.monotonic() - engine.started
                    print(f"  {plan.name}: healthy after {elapsed:.1f} s", flush=True)
            now = time.monotonic()
            if pending and now - begin > timeout:
                plan = pending[0].plan
                message = f"{plan.name} did not answer /health within {timeout:g} s"
                raise EngineStartFailed(message, plan.log_path)
            if pending and now >= next_progress:
                next_progress = now + PROGRESS_EVERY_S
                for engine in pending:
                    waited = now - engine.started
                    last = last_line(engine.plan.log_path)
                    print(f"  {engine.plan.name}: loading, {waited:.0f} s … {last}", flush=True)
            if pending:
                time.sleep(POLL_S)


def _healthy(http: httpx.Client, plan: EnginePlan) -> bool:
    try:
        response = http.get(f"http://{ENGINE_HOST}:{plan.port}/health")
    except httpx.HTTPError:
        return False
    return response.status_code == 200


def stop_engines(engines: Sequence[EngineProcess], grace: float, hurry: threading.Event) -> None:
    """Stop every engine's whole process group (see `stop_process_groups`)."""
    stop_process_groups([engine.popen for engine in engines], grace, hurry)


def stop_process_groups(
    processes: Sequence[subprocess.Popen[bytes]],
    grace: float,
    hurry: threading.Event | None = None,
) -> None:
    """Stop the process groups these leaders head: SIGTERM to all, one shared ``grace``, SIGKILL.

    Every process must have been started with ``start_new_session=True``. Setting ``hurry`` (a
    second Ctrl-C) cuts the grace period short. Groups whose leader has already exited are
    signalled too: a child of theirs may still hold a port or a GPU.
    """
    for popen in processes:
        _signal_group(popen, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for popen in processes:
        while popen.poll() is None and not (hurry and hurry.is_set()):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=min(left, 0.1))
    for popen in processes:
        _signal_group(popen, signal.SIGKILL)
        try:
            popen.wait(timeout=10)
        except subprocess.TimeoutExpired:  # stuck in the kernel (a GPU driver call): say so
            print(f"process {popen.pid} survived SIGKILL", file=sys.stderr)


def _signal_group(popen: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    # The group id is the leader's pid (start_new_session); it outlives the leader while any
    # member does, so no unrelated group can hold it yet.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(popen.pid, sig)


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports on 127.0.0.1 that nothing listens on right now."""
    # All sockets stay bound until every port is picked, so the ports are distinct.
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


def watch_engines(engines: Sequence[EngineProcess], done: threading.Event) -> threading.Thread:
    """A daemon thread that reports, with its log's tail, any engine that exits while serving."""

    def _watch() -> None:
        reported: set[str] = set()
        while not done.wait(2.0):
            for engine in engines:
                code = engine.popen.poll()
                if code is None or engine.plan.name in reported or done.is_set():
                    continue
                reported.add(engine.plan.name)
                message = f"{engine.plan.name} exited with code {code} while serving"
                print(f"rehearsal-gateway up: {message}", file=sys.stderr, flush=True)
                print(log_tail(engine.plan.log_path), file=sys.stderr, flush=True)

    thread = threading.Thread(target=_watch, name="engine-watch", daemon=True)
    thread.start()
    return thread


def _read_end(path: Path, size: int) -> str:
    try:
        with path.open("rb") as log:
            log.seek(max(log.seek(0, os.SEEK_END) - size, 0))
            return log.read().decode(errors="replace")
    except OSError:
        return ""


def last_line(path: Path, width: int = 120) -> str:
    """The last non-empty line of a log, cut to ``width`` characters (progress display)."""
    lines = [line.strip() for line in _read_end(path, 4096).splitlines() if line.strip()]
    return lines[-1][:width] if lines else "(no output yet)"


def log_tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of a log, framed with its path."""
    tail = _read_end(path, 64 * 1024).splitlines()[-lines:]
    body = "\n".join(tail) if tail else "(the log is empty)"
    return f"--- last {len(tail)} lines of {path} ---\n{body}\n--- end of {path.name} ---"
