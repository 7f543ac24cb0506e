"""Start real servers as subprocesses on free loopback ports and stop them reliably.

Every test that needs an engine twin, a gateway or a private redis-server goes through here, so
that no test leaves a stray process behind and every start waits for the server to answer.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Proc:
    """A running server process and the URL it answers on."""

    popen: subprocess.Popen[bytes]
    url: str
    port: int
    log_path: Path
    argv: list[str] = field(default_factory=list)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        if self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, sig)
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=5)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)


def _wait_http(proc: Proc, path: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise RuntimeError(f"{proc.argv} exited with {proc.popen.returncode}:\n{proc.log()}")
        try:
            response = httpx.get(proc.url + path, timeout=1.0)
            if response.status_code == 200:
                return
            last = f"HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            last = repr(exc)
        time.sleep(0.05)
    proc.stop()
    raise RuntimeError(f"{proc.argv} did not answer {path} in {timeout}s ({last}):\n{proc.log()}")


def start_http_server(
    argv: Sequence[str],
    *,
    port: int,
    log_path: Path,
    ready_path: str = "/health",
    env: dict[str, str] | None = None,
    timeout: float = 30.0,
    host: str = "127.0.0.1",
) -> Proc:
    """Start ``argv`` in its own process group and wait until ``ready_path`` answers 200."""
    full_env = {**os.environ, **(env or {})}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = log_path.open("wb")
    popen = subprocess.Popen(
        list(argv),
        cwd=ROOT,
        env=full_env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    log.close()
    proc = Proc(popen=popen, url=f"http://{host}:{port}", port=port, log_path=log_path)
    proc.argv = list(argv)
    _wait_http(proc, ready_path, timeout)
    return proc


def cli_argv(*args: str) -> list[str]:
    """The `rehearsal-gateway` CLI run by this interpreter (no reliance on PATH)."""
    return [sys.executable, "-m", "rehearsal_gateway.clients.cli", *args]


@contextlib.contextmanager
def running(proc: Proc) -> Iterator[Proc]:
    try:
        yield proc
    finally:
        proc.stop()
