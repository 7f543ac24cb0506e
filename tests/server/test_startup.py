"""Start-up fails fast and says where: settings checked as a whole, unreachable parts named."""

from __future__ import annotations

import logging
import os
import subprocess
import time
from pathlib import Path

import pytest

from rehearsal_gateway.server import app as gateway_app
from rehearsal_gateway.server.engines import health
from tests.server.conftest import FAST_HEALTH
from tests.support import inprocess
from tests.support.procs import ROOT, cli_argv, free_port


def _serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.upper().startswith("RGW_")}
    argv = cli_argv("serve", "--port", str(free_port()), *args)
    return subprocess.run(
        argv, cwd=ROOT, env={**clean, **(env or {})}, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        pytest.param(
            (),
            {"RGW_REHEARSAL_BUDGET": "20"},
            "RGW_REHEARSAL_BUDGET=20: the default budget must be between 0 and 8 (the cap, "
            "RGW_MAX_BUDGET)",
            id="default-above-cap",
        ),
        pytest.param(
            ("--rehearsal-depth", "9"),
            {},
            "--rehearsal-depth=9: the default depth must be between 1 and 4",
            id="flag-above-cap",
        ),
        pytest.param(
            (),
            {"RGW_REHEARSAL_MOD": "parallel"},
            "RGW_REHEARSAL_MOD: no such setting (did you mean RGW_REHEARSAL_MODE?)",
            id="misspelt-variable",
        ),
        pytest.param(
            (),
            {"RGW_MAX_BUDGET": "lots"},
            "RGW_MAX_BUDGET=lots: Input should be a valid integer",
            id="not-a-number",
        ),
        pytest.param(
            (),
            {"RGW_LIMIT_MAX_COST": "2", "RGW_REHEARSAL_MODE": "parallel"},
            "RGW_LIMIT_MAX_COST=2: is below the default rehearsal's cost (budget x depth = 4)",
            id="cross-field",
        ),
        pytest.param(
            (),
            {
                "RGW_LIMIT_MAX_COST": "3",
                "RGW_REHEARSAL_MODE": "parallel",
                "RGW_REHEARSAL_BUDGET": "auto",
                "RGW_REHEARSAL_DEPTH": "2",
            },
            "RGW_LIMIT_MAX_COST=3: is below the default rehearsal's cost (budget x depth = 8)",
            id="cross-field-auto",
        ),
    ],
)
def test_bad_settings_stop_serve_with_one_line(
    args: tuple[str, ...], env: dict[str, str], expected: str
) -> None:
    """A bad setting stops `serve` with exit 2 and one line naming where it came from."""
    done = _serve(*args, env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("rehearsal-gateway serve: " + expected), lines[0]
    assert "pydantic" not in done.stderr
    assert "Traceback" not in done.stderr


def test_client_and_twin_variables_are_not_settings_and_not_refused() -> None:
    """RGW_URL, RGW_API_KEY and RGW_TWIN_* belong to other commands: serve leaves them be."""
    from rehearsal_gateway.server.launcher.sources import unknown_variables

    environ = {"RGW_URL": "x", "RGW_API_KEY": "k", "RGW_TWIN_SKILL": "1", "RGW_PORT": "1"}
    assert unknown_variables(environ) == []
    assert unknown_variables({"RGW_READ_TIMEOUT": "3"}) == [
        "RGW_READ_TIMEOUT: no such setting (did you mean RGW_REDIS_TIMEOUT?)"
    ]


def _warnings(caplog: pytest.LogCaptureFixture, needle: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
            and needle in r.getMessage()]  # fmt: skip


def _wait_for(caplog: pytest.LogCaptureFixture, needle: str, count: int) -> list[str]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(_warnings(caplog, needle)) < count:
        time.sleep(0.05)
    return _warnings(caplog, needle)


def test_unreachable_engine_and_redis_are_named_at_start_and_while_down(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dead engine and a dead Redis are warned about with URL and reason, and again later."""
    monkeypatch.setattr(health, "DOWN_REMINDER_S", 0.1)
    monkeypatch.setattr(gateway_app, "DOWN_REMINDER_S", 0.2)
    caplog.set_level(logging.WARNING, logger="rehearsal_gateway")
    dead_engine = f"http://127.0.0.1:{free_port()}/v1"
    dead_redis = f"redis://127.0.0.1:{free_port()}/0"
    gateway = inprocess.start_gateway(
        ["--engine", dead_engine, "--redis", dead_redis],
        log_path=tmp_path / "gateway.log", env=FAST_HEALTH,
    )  # fmt: skip
    try:
        engine = _wait_for(caplog, dead_engine, 2)
        store = _wait_for(caplog, dead_redis, 2)
    finally:
        gateway.stop()
    assert len(engine) >= 2
    assert "is unreachable: ConnectError" in engine[0]
    assert len(store) >= 2
    assert store[0].startswith(f"Redis store {dead_redis} is unreachable: redis: ")
