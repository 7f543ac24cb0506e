"""The router deployments: compose.router.yaml and the k8s router overlay, checked like the others.

Schema first (the Compose Specification, the Kubernetes schemas), then what no schema sees: the
router's flags are ones vllm-router's own parser accepts and include those the gateway is tested
behind, its engines are the stack's engines, the gateway names the router with ``router=``, the
router's discovery selects the engine pods and its RBAC lets it read them. And what can run here
runs: the router with the compose command (hosts remapped to loopback twins) answers its health
check, and the gateway configured as the stack configures it serves through it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from vllm_router.launch_router import parse_router_args

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
from tests.deploy.test_k8s import (
    GATEWAY,
    NAMESPACE,
    _all,
    _container,
    _env,
    _one,
    _pod,
    _pod_labels,
    _port_names,
    _selected_workloads,
    _sleep_s,
    _validate,
    render,
    unmatched_services,
)
from tests.support.procs import ROOT, Proc, cli_argv, free_port, start_http_server
from tests.support.router import ROUTER_BIN, ROUTER_FLAGS

ROUTER_STACK = "compose.router.yaml"
ROUTER_OVERLAY = "overlays/router"
ROUTER_DOCKERFILE = DEPLOY / "router" / "Dockerfile"
BIN = Path(sys.executable).parent


def _router_pin() -> str:
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (pin,) = [d for d in dev["dev"] if d.startswith("vllm-router==")]
    return pin.removeprefix("vllm-router==")


def _has_flags(words: list[str]) -> None:
    given = options(words)
    for flag, value in zip(ROUTER_FLAGS[::2], ROUTER_FLAGS[1::2], strict=True):
        assert given.get(flag) == value, flag


# --------------------------------------------------------------------------- the image


def test_router_dockerfile_is_clean_and_pins_the_tested_release(tmp_path: Path) -> None:
    """hadolint finds nothing; the image installs the vllm-router release pyproject tests."""
    config = tmp_path / "hadolint.yaml"
    config.write_text("{}\n")
    done = subprocess.run(
        [str(BIN / "hadolint"), "--config", str(config), "--disable-ignore-pragma",
         "--format", "json", str(ROUTER_DOCKERFILE)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert json.loads(done.stdout) == [], done.stdout
    text = ROUTER_DOCKERFILE.read_text()
    pin = _router_pin()
    assert f"pip install vllm-router=={pin}" in text
    assert f'org.opencontainers.image.version="{pin}"' in text
    assert re.search(r"^USER 10001", text, re.MULTILINE)
    assert re.search(r'^ENTRYPOINT \["vllm-router"\]$', text, re.MULTILINE)


# --------------------------------------------------------------------------- compose


def test_router_stack_reuses_the_gpu_stack_around_the_router() -> None:
    """Engines, Redis, Prometheus, Grafana and volumes are compose.yaml's, unchanged."""
    stack, gpu = compose(ROUTER_STACK), compose(GPU_STACK)
    assert stack["services"].keys() == gpu["services"].keys() | {"router"}
    for name in [*ENGINES, "redis", "prometheus", "grafana"]:
        assert stack["services"][name] == gpu["services"][name], name
    assert stack["volumes"] == gpu["volumes"]
    gateway = dict(stack["services"]["gateway"])
    reference = dict(gpu["services"]["gateway"])
    for differs in ("environment", "depends_on"):
        gateway.pop(differs)
        reference.pop(differs)
    assert gateway == reference


def test_router_stack_gateway_names_the_router(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gateway's one engine is the router service, on its port, as ``router=vllm-router``."""
    services = compose(ROUTER_STACK)["services"]
    gateway, router = services["gateway"], services["router"]
    settings = gateway_settings(gateway["environment"], monkeypatch)
    (spec,) = settings.engines
    assert spec.router == "vllm-router"
    parts = urlsplit(spec.url)
    assert parts.hostname == "router"
    assert str(parts.port) == options(argv(router))["--port"]
    assert {name: rule["condition"] for name, rule in gateway["depends_on"].items()} == {
        "redis": "service_healthy",
        "router": "service_healthy",
    }


def test_router_stack_router_runs_the_tested_flags_over_the_engines() -> None:
    """vllm-router's own parser accepts the command; it hashes sessions over both engines."""
    router = compose(ROUTER_STACK)["services"]["router"]
    words = argv(router)
    parsed = parse_router_args(words)
    assert parsed.policy == "consistent_hash"
    assert sorted(parsed.worker_urls) == [f"http://{e}:{ENGINE_PORT}" for e in ENGINES]
    _has_flags(words)
    assert router["build"] == {"context": "router", "dockerfile": "Dockerfile"}
    assert (DEPLOY / "router" / "Dockerfile").is_file()
    assert {name: rule["condition"] for name, rule in router["depends_on"].items()} == {
        engine: "service_healthy" for engine in ENGINES
    }
    test = router["healthcheck"]["test"]
    assert f"127.0.0.1:{parsed.port}/readiness" in test[-1]
    assert "ports" not in router  # reachable inside the compose network only


def test_router_stack_variables_are_documented() -> None:
    """Each ${VARIABLE} of the router stack has a row in docs/deploy.md's settings table."""
    page = (ROOT / "docs/deploy.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    documented = {name for row in rows for name in re.findall(r"`(\w+)`", row.split("|")[1])}
    text = (DEPLOY / ROUTER_STACK).read_text()
    used = set(re.findall(r"\$\{(\w+)", text))
    assert used
    assert used <= documented


def _remapped(words: list[str], port: int, workers: list[str]) -> list[str]:
    """The compose command with loopback addresses: its port, its engines, its metrics port."""
    out, skip = [], False
    for i, word in enumerate(words):
        if skip:
            skip = word.startswith("http://")
            if skip:
                continue
        if word == "--worker-urls":
            out += [word, *workers]
            skip = True
            continue
        previous = words[i - 1] if i else ""
        if previous == "--host":
            word = "127.0.0.1"
        elif previous == "--port":
            word = str(port)
        elif previous == "--prometheus-port":
            word = str(free_port())
        out.append(word)
    return out


def test_router_stack_runs_here_with_its_own_command(
    tmp_path: Path, start_twin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The router started with the stack's command passes its health check, and the gateway
    started with the stack's settings serves through it."""
    services = compose(ROUTER_STACK)["services"]
    twins: list[Proc] = [start_twin("--seed", str(i)) for i in range(2)]
    port = free_port()
    words = _remapped(argv(services["router"]), port, [twin.url for twin in twins])
    router = start_http_server(
        [str(ROUTER_BIN), *words], port=port, log_path=tmp_path / "router.log",
        ready_path="/readiness",
    )  # fmt: skip
    try:
        check = services["router"]["healthcheck"]["test"]
        code = check[-1].replace("127.0.0.1:8000", f"127.0.0.1:{port}")
        done = subprocess.run([sys.executable, "-c", code], timeout=10, check=False)
        assert done.returncode == 0
        env = {key: interpolate(value) for key, value in services["gateway"]["environment"].items()}
        env["RGW_ENGINES"] = env["RGW_ENGINES"].replace("http://router:8000", router.url)
        env["RGW_WORKERS"] = "1"  # one process is enough to see it serve
        env.pop("RGW_REDIS_URL")
        for key in [key for key in os.environ if key.startswith("RGW_")]:
            monkeypatch.delenv(key)
        gateway_port = free_port()
        gateway = start_http_server(
            cli_argv("serve", "--port", str(gateway_port)), port=gateway_port,
            log_path=tmp_path / "gateway.log", env=env, ready_path="/ready",
        )  # fmt: skip
        try:
            answer = httpx.post(
                gateway.url + "/v1/chat/completions",
                json={"model": "EnvACE-Qwen3-8B", "messages": [{"role": "user", "content": "hi"}]},
                timeout=30,
            )
            assert answer.status_code == 200, answer.text
        finally:
            gateway.stop()
    finally:
        router.stop()


# --------------------------------------------------------------------------- Kubernetes


def test_router_overlay_validates_strictly() -> None:
    """Every document of the router overlay is valid against the Kubernetes schemas."""
    docs = render(ROUTER_OVERLAY)
    assert len(docs) >= 18
    for doc in docs:
        _validate(doc)
    for doc in docs:
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["metadata"]["name"]
    assert unmatched_services(docs) == []
    assert len(_all(docs, "Service")) == 4


def test_router_overlay_gateways_name_the_router_pods(monkeypatch: pytest.MonkeyPatch) -> None:
    """RGW_ENGINES is the headless router Service with ``router=vllm-router,discover=dns``."""
    docs = render(ROUTER_OVERLAY)
    settings = gateway_settings(_env(docs), monkeypatch)
    (spec,) = settings.engines
    assert (spec.router, spec.discover) == ("vllm-router", "dns")
    parts = urlsplit(spec.url)
    service = _one(docs, "Service", parts.hostname or "")
    assert service["spec"]["clusterIP"] == "None"
    assert parts.port in {p["port"] for p in service["spec"]["ports"]}
    router = _one(docs, "Deployment", "vllm-router")
    assert _selected_workloads(docs, service["spec"]["selector"]) == [router]
    assert router["spec"]["replicas"] >= 2


def test_router_overlay_router_discovers_the_engine_pods() -> None:
    """The router's flags parse, include the tested ones, and its selector picks the engines."""
    docs = render(ROUTER_OVERLAY)
    router = _one(docs, "Deployment", "vllm-router")
    container = _container(router)
    assert container["image"] == f"vllm-router:{_router_pin()}"
    parsed = parse_router_args(container["args"])
    assert parsed.policy == "consistent_hash"
    assert parsed.service_discovery is True
    assert parsed.service_discovery_namespace == NAMESPACE
    _has_flags(container["args"])
    engines = _selected_workloads(docs, parsed.selector)
    assert engines == [_one(docs, "Deployment", "vllm-engine")]
    ports = {p["name"]: p["containerPort"] for p in _container(engines[0])["ports"]}
    assert parsed.service_discovery_port == ports["http"]
    assert {p["containerPort"] for p in container["ports"]} == {parsed.port, parsed.prometheus_port}
    assert _one(docs, "Deployment", "vllm-engine")["spec"]["replicas"] == 4


def test_router_overlay_rbac_lets_the_router_read_pods_only() -> None:
    """The router's ServiceAccount is bound to a Role that reads pods, in this namespace."""
    docs = render(ROUTER_OVERLAY)
    router = _one(docs, "Deployment", "vllm-router")
    account = _pod(router)["serviceAccountName"]
    assert _one(docs, "ServiceAccount", account)
    (binding,) = _all(docs, "RoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
    ]
    role = _one(docs, "Role", binding["roleRef"]["name"])
    assert binding["roleRef"]["kind"] == "Role"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    ]


def test_router_overlay_probes_and_drain() -> None:
    """Ready on /readiness, alive on /liveness; a stopping router outlasts the gateways' DNS."""
    docs = render(ROUTER_OVERLAY)
    router = _one(docs, "Deployment", "vllm-router")
    container = _container(router)
    assert container["readinessProbe"]["httpGet"] == {"path": "/readiness", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/liveness", "port": "http"}
    assert "http" in _port_names(router)
    assert _sleep_s(container) > float(_env(docs)["RGW_DISCOVERY_INTERVAL"])
    assert _pod(router)["terminationGracePeriodSeconds"] > _sleep_s(container)
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    pdbs = {pdb["metadata"]["name"]: pdb for pdb in _all(docs, "PodDisruptionBudget")}
    selector = pdbs["vllm-router"]["spec"]["selector"]["matchLabels"]
    assert _selected_workloads(docs, selector) == [router]
    assert _pod_labels(router)["app.kubernetes.io/component"] == "router"
    assert _one(docs, "HorizontalPodAutoscaler", GATEWAY)["spec"]["minReplicas"] == 3
