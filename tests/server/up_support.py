"""What the ``up`` tests share: ``up`` run as a process, and what it printed and started.

The fake vLLM itself and its records are fixtures in ``tests/server/conftest.py``.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests.support.procs import ROOT, cli_argv

ENGINE_LINE = re.compile(r"(engine\d+): pid (\d+)(?:, GPU \S+)?, http://127\.0\.0\.1:(\d+)/v1")
MODEL = "/models/EnvACE-Qwen3-8B"  # never loaded: the fake only reads the name
INSTALL_HINT = "pip install 'rehearsal-gateway[gpu]'"


def live_members(pgid: int) -> list[int]:
    """Processes of group ``pgid`` that still run (zombies waiting for a reaper do not count)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            pid, _, rest = stat.read_text().partition(" (")
        except OSError:
            continue
        fields = rest.rpartition(") ")[2].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(pid))
    return members


def assert_group_gone(pgid: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while live_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live_members(pgid) == [], f"process group {pgid} survived"


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def engines_in(output: str) -> dict[str, tuple[int, int]]:
    """``{"engine0": (pid, port), …}`` as printed by ``up``."""
    return {name: (int(pid), int(port)) for name, pid, port in ENGINE_LINE.findall(output)}


def kill_groups(pgids: list[int]) -> None:
    """Test cleanup for a failing ``up``: nothing it started may outlive the test."""
    for pgid in pgids:
        if live_members(pgid):
            os.killpg(pgid, signal.SIGKILL)


def run_up(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli_argv("up", *args),
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
