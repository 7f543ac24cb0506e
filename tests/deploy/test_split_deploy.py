"""The split stack, compose.split.yaml: compose.yaml's GPU stack plus a rehearsal engine.

Schema first (the Compose Specification), then what no schema sees: everything but the gateway's
engine settings is compose.yaml's, the rehearsal engine is compose.yaml's engine on a GPU of its
own, and the gateway's settings name it as the rehearsal set and wait for it. And what can run
here runs: the gateway started with the stack's settings, its engine hosts remapped to loopback
twins, sends every imagination to the rehearsal engine and every acting call to the main ones.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from rehearsal_gateway.server.settings.specs import REHEARSE_ONLY
from rehearsal_gateway.twin.worlds import load_world
from tests.deploy.test_assets import (
    DEPLOY,
    ENGINE_PORT,
    ENGINES,
    GPU_STACK,
    argv,
    compose,
    gateway_settings,
    interpolate,
    options,
)
from tests.server.conftest import metric_value
from tests.server.rehearsal_support import opening
from tests.support.procs import ROOT, Proc, cli_argv, free_port, start_http_server

SPLIT_STACK = "compose.split.yaml"
REHEARSAL_ENGINE = "rehearsal-engine-0"
CALLS = "rehearsal_gateway_engine_call_seconds_count"


def _devices(service: dict[str, Any]) -> list[str]:
    (device,) = service["deploy"]["resources"]["reservations"]["devices"]
    ids: list[str] = device["device_ids"]
    return ids


def _gateway_env(stack: dict[str, Any]) -> dict[str, str]:
    environment = stack["services"]["gateway"]["environment"]
    return {key: interpolate(value) for key, value in environment.items()}


def test_split_stack_is_the_gpu_stack_plus_a_rehearsal_engine() -> None:
    """Engines, Redis, Prometheus, Grafana and volumes are compose.yaml's, unchanged; the
    gateway differs only by naming the rehearsal set and waiting for it."""
    stack, gpu = compose(SPLIT_STACK), compose(GPU_STACK)
    assert stack["services"].keys() == gpu["services"].keys() | {REHEARSAL_ENGINE}
    for name in [*ENGINES, "redis", "prometheus", "grafana"]:
        assert stack["services"][name] == gpu["services"][name], name
    assert stack["volumes"] == gpu["volumes"]
    gateway = dict(stack["services"]["gateway"])
    reference = dict(gpu["services"]["gateway"])
    environment, depends_on = gateway.pop("environment"), gateway.pop("depends_on")
    assert environment == {
        **reference.pop("environment"),
        "RGW_REHEARSAL_ENGINES": environment["RGW_REHEARSAL_ENGINES"],
    }
    assert depends_on == {
        **reference.pop("depends_on"),
        REHEARSAL_ENGINE: {"condition": "service_healthy"},
    }
    assert gateway == reference


def test_rehearsal_engine_is_the_stacks_engine_on_a_gpu_of_its_own() -> None:
    """Same image, model, served name, flags, cache and health check as engine-0; its own GPU."""
    services = compose(SPLIT_STACK)["services"]
    engine = dict(services[REHEARSAL_ENGINE])
    reference = dict(services[ENGINES[0]])
    assert _devices(engine) not in [_devices(services[name]) for name in ENGINES]
    assert len(_devices(engine)) == 1
    engine.pop("deploy")
    reference.pop("deploy")
    assert engine == reference
    assert options(argv(engine))["--served-model-name"] == "EnvACE-Qwen3-8B"


def test_split_stack_gateway_names_the_rehearsal_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The main set is the two engines, the rehearsal set the rehearsal engine, rehearse only."""
    settings = gateway_settings(_gateway_env(compose(SPLIT_STACK)), monkeypatch)
    assert {spec.url for spec in settings.engines} == {
        f"http://{name}:{ENGINE_PORT}/v1" for name in ENGINES
    }
    (spec,) = settings.rehearsal_engines
    assert spec.url == f"http://{REHEARSAL_ENGINE}:{ENGINE_PORT}/v1"
    assert spec.roles == REHEARSE_ONLY
    # The engines schedule by priority, so the rehearsal engine accepts the priority imagination
    # carries.
    assert settings.engine_scheduling == "priority"
    engine = compose(SPLIT_STACK)["services"][REHEARSAL_ENGINE]
    assert options(argv(engine))["--scheduling-policy"] == "priority"


def test_split_stack_variables_are_documented() -> None:
    """Each ${VARIABLE} of the split stack has a row in docs/deploy.md's settings table."""
    page = (ROOT / "docs/deploy.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    documented = {name for row in rows for name in re.findall(r"`(\w+)`", row.split("|")[1])}
    used = set(re.findall(r"\$\{(\w+)", (DEPLOY / SPLIT_STACK).read_text()))
    assert used
    assert used <= documented


def _rehearse(gateway_url: str, count: int = 3) -> None:
    world = load_world("retail")

    def one(i: int) -> None:
        body: dict[str, Any] = {
            "model": "EnvACE-Qwen3-8B", "messages": opening(world, world.tasks[i]),
            "tools": world.tool_schemas(),
            "rehearsal": {"mode": "parallel", "budget": 3, "early_exit": False,
                          "deadline_ms": 30_000},
        }  # fmt: skip
        response = httpx.post(
            gateway_url + "/v1/chat/completions",
            json=body,
            headers={"x-session-id": f"s{i}"},
            timeout=60,
        )
        assert response.status_code == 200, response.text

    with ThreadPoolExecutor(count) as pool:
        list(pool.map(one, range(count)))


def test_split_stack_gateway_runs_here_and_imagines_on_the_rehearsal_engine(
    tmp_path: Path, start_twin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway started with the stack's settings (its hosts remapped to loopback twins)
    sends imagination to the rehearsal engine only and acting calls to the main engines only."""
    hosts = [*ENGINES, REHEARSAL_ENGINE]
    twins: dict[str, Proc] = {host: start_twin("--seed", "1") for host in hosts}
    env = _gateway_env(compose(SPLIT_STACK))
    for key in ("RGW_ENGINES", "RGW_REHEARSAL_ENGINES"):
        for host, twin in twins.items():
            env[key] = env[key].replace(f"http://{host}:{ENGINE_PORT}", twin.url)
    env["RGW_WORKERS"] = "1"  # one process is enough to see where calls go
    env.pop("RGW_REDIS_URL")
    for key in [key for key in os.environ if key.startswith("RGW_")]:
        monkeypatch.delenv(key)
    port = free_port()
    gateway = start_http_server(
        cli_argv("serve", "--port", str(port)), port=port,
        log_path=tmp_path / "gateway.log", env=env, ready_path="/ready",
    )  # fmt: skip
    try:
        _rehearse(gateway.url)
        label = {host: twin.url.removeprefix("http://") for host, twin in twins.items()}
        imagining = label[REHEARSAL_ENGINE]
        assert metric_value(gateway.url, CALLS, engine=imagining, role="rehearse") > 0
        assert metric_value(gateway.url, CALLS, engine=imagining, role="act") == 0
        acting = sum(
            metric_value(gateway.url, CALLS, engine=label[host], role="act") for host in ENGINES
        )
        assert acting > 0
        for host in ENGINES:
            assert metric_value(gateway.url, CALLS, engine=label[host], role="rehearse") == 0
    finally:
        gateway.stop()
