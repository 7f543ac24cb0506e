"""Fixtures for the gateway suites: gateways, misbehaving engines and a metrics reader.

Gateways run in this process (``tests.support.inprocess``: uvicorn in a thread, real HTTP on
loopback, so ``server/`` is measured by coverage); ``process=True`` starts a ``serve`` process
instead, for tests about the process itself (signals, workers, uvicorn's log lines).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.server.up_support import kill_groups
from tests.support import inprocess
from tests.support.inprocess import InProcessGateway
from tests.support.procs import ROOT, Proc, cli_argv, free_port, start_http_server

TWIN_MODEL = "EnvACE-Qwen3-8B"

# Short intervals so health changes are seen within a test; long enough to stay cheap.
FAST_HEALTH = {"RGW_HEALTH_INTERVAL": "0.2", "RGW_HEALTH_TIMEOUT": "0.5"}


@pytest.fixture
def start_gateway(tmp_path: Path) -> Iterator[Callable[..., Proc | InProcessGateway]]:
    """Factory: ``start_gateway(engine_url, …, env={...})`` -> a running gateway."""
    started: list[Proc | InProcessGateway] = []

    def _start(
        *engines: str,
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        process: bool = False,
    ) -> Proc | InProcessGateway:
        engine_args = [arg for url in engines for arg in ("--engine", url)]
        if not process:
            gateway = inprocess.start_gateway(
                [*engine_args, *args],
                log_path=tmp_path / f"gateway-{len(started)}.log",
                env={**FAST_HEALTH, **(env or {})},
            )
            started.append(gateway)
            return gateway
        port = free_port()
        argv = ["serve", "--port", str(port), *engine_args]
        proc = start_http_server(
            cli_argv(*argv, *args),
            port=port,
            log_path=tmp_path / f"gateway-{port}.log",
            env={**FAST_HEALTH, **(env or {})},
        )
        started.append(proc)
        return proc

    yield _start
    for proc in started:
        proc.stop()


@pytest.fixture
def vllm_gateway(vllm_engine: Proc, tmp_path: Path) -> Iterator[Proc]:
    """A gateway (in-process store) in front of the session's real vLLM."""
    port = free_port()
    proc = start_http_server(
        cli_argv("serve", "--port", str(port), "--engine", vllm_engine.url + "/v1"),
        port=port,
        log_path=tmp_path / "gateway-vllm.log",
        env=FAST_HEALTH,
    )
    yield proc
    proc.stop()


@pytest.fixture
def start_double(tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    """Factory: ``start_double("hang")`` -> a running misbehaving engine (engine_double.py)."""
    started: list[Proc] = []

    def _start(chat: str, model: str = "double-model") -> Proc:
        port = free_port()
        argv = [sys.executable, "-m", "tests.server.engine_double", "--port", str(port)]
        proc = start_http_server(
            [*argv, "--chat", chat, "--model", model],
            port=port,
            log_path=tmp_path / f"double-{port}.log",
        )
        started.append(proc)
        return proc

    yield _start
    for proc in started:
        proc.stop()


def metric_value(base_url: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``, read from ``/metrics``."""
    text = httpx.get(base_url + "/metrics", timeout=5).text
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        series, _, value = line.rpartition(" ")
        if all(f'{key}="{val}"' in series for key, val in labels.items()):
            total += float(value)
    return total


@pytest.fixture
def fake_vllm(tmp_path: Path) -> Path:
    """An executable named vllm that runs tests/support/fake_vllm.py with this interpreter."""
    path = tmp_path / "bin" / "vllm"
    path.parent.mkdir()
    path.write_text(
        f'#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m tests.support.fake_vllm "$@"\n'
    )
    path.chmod(0o755)
    return path


@pytest.fixture
def records(tmp_path: Path) -> Iterator[Path]:
    """Where the fake writes what it was given; every group it recorded is gone afterwards."""
    path = tmp_path / "records"
    path.mkdir()
    yield path
    kill_groups([json.loads(f.read_text())["pgid"] for f in path.glob("*.json")])
