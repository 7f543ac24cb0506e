"""The container and deploy assets hold together when read: Docker cannot run here, so these
checks pin what a `docker compose up` and a Grafana import would trip over."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy import promql

ROOT = promql.ROOT
DEPLOY = ROOT / "deploy"
COMPOSE_FILES = ("compose.yaml", "compose.twin.yaml")
YAML_FILES = sorted(p.relative_to(ROOT).as_posix() for p in DEPLOY.rglob("*.y*ml"))
ENGINES = ("engine-0", "engine-1")
VLLM_FLAGS = (
    "--enable-auto-tool-choice",
    "--tool-call-parser hermes",
    "--reasoning-parser qwen3",
    "--enable-prefix-caching",
)


def _yaml(relative: str) -> Any:
    return yaml.safe_load((ROOT / relative).read_text())


def _compose(name: str) -> dict[str, Any]:
    data: dict[str, Any] = _yaml(f"deploy/{name}")
    return data


def _argv(service: dict[str, Any]) -> str:
    return " ".join(str(part) for part in service["command"])


@pytest.mark.parametrize("relative", YAML_FILES)
def test_yaml_parses(relative: str) -> None:
    """Every YAML file under deploy/ parses to a mapping."""
    assert isinstance(_yaml(relative), dict)


def test_yaml_files_found() -> None:
    """The YAML listing sees the compose files, Prometheus files and Grafana provisioning."""
    assert len(YAML_FILES) >= 6


def test_dashboard_is_valid_with_unique_panel_ids() -> None:
    """The dashboard JSON loads, has a uid and title, and no two panels share an id."""
    dashboard = promql.dashboard()
    assert dashboard["uid"]
    assert dashboard["title"]
    ids = [panel["id"] for panel in promql.dashboard_panels()]
    assert all(isinstance(panel_id, int) for panel_id in ids)
    assert len(ids) == len(set(ids))


def test_every_panel_uses_the_datasource_variable() -> None:
    """The dashboard declares a Prometheus `datasource` variable and every query panel uses it."""
    variables = promql.dashboard()["templating"]["list"]
    assert {"name": "datasource", "type": "datasource", "query": "prometheus"}.items() <= next(
        v for v in variables if v["name"] == "datasource"
    ).items()
    queried = [panel for panel in promql.dashboard_panels() if panel["type"] != "row"]
    assert queried
    for panel in queried:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


def test_panels_do_not_overlap() -> None:
    """Panels sit on a 24-column grid without overlapping, as Grafana lays them out."""
    taken: set[tuple[int, int]] = set()
    for panel in promql.dashboard_panels():
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & taken, panel["title"]
        taken |= cells


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_stack_has_every_service(name: str) -> None:
    """Both stacks run the gateway, two engines, Redis, Prometheus and Grafana."""
    services = _compose(name)["services"]
    assert {"gateway", *ENGINES, "redis", "prometheus", "grafana"} <= services.keys()


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_gateway_points_at_engines_and_redis(name: str) -> None:
    """The gateway's command names each engine service and Redis by their compose names."""
    services = _compose(name)["services"]
    argv = _argv(services["gateway"])
    for engine in ENGINES:
        assert f"--engine http://{engine}:8000/v1" in argv
    assert "--redis redis://redis:6379/0" in argv
    assert services["gateway"]["depends_on"]["redis"]["condition"] == "service_healthy"


@pytest.mark.parametrize("engine", ENGINES)
def test_vllm_engines_serve_envace_with_parsers_and_gpu(engine: str) -> None:
    """Each vLLM engine enables hermes tool calls, qwen3 reasoning, prefix caching and has a GPU."""
    service = _compose("compose.yaml")["services"][engine]
    assert service["image"].startswith("vllm/vllm-openai:")
    argv = _argv(service)
    for flag in VLLM_FLAGS:
        assert flag in argv
    assert "EnvACE-Qwen3-8B" in argv
    devices = service["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]


def test_engines_get_distinct_gpus() -> None:
    """No two vLLM engines reserve the same GPU."""
    services = _compose("compose.yaml")["services"]
    ids = [
        tuple(services[e]["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"])
        for e in ENGINES
    ]
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize("engine", ENGINES)
def test_twin_stack_runs_the_twin_without_gpu(engine: str) -> None:
    """The laptop stack's engines are `rehearsal-gateway twin` on :8000, with no GPU reservation."""
    service = _compose("compose.twin.yaml")["services"][engine]
    assert service["entrypoint"] == ["rehearsal-gateway", "twin"]
    assert "--port 8000" in _argv(service)
    assert "deploy" not in service
    assert "vllm" not in str(service.get("image", ""))


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_bind_mounts_exist(name: str) -> None:
    """Every ./relative bind mount of a compose file points at a file or folder in the repo."""
    for service in _compose(name)["services"].values():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("./"):
                assert (DEPLOY / source).exists(), f"{name}: {volume}"


def test_prometheus_scrapes_the_compose_services() -> None:
    """Prometheus scrapes the gateway and each engine at the names and ports compose gives them."""
    config = _yaml("deploy/prometheus/prometheus.yml")
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    targets = {
        name: {t for static in job["static_configs"] for t in static["targets"]}
        for name, job in jobs.items()
    }
    assert targets["rehearsal-gateway"] == {"gateway:8000"}
    assert targets["vllm"] == {f"{engine}:8000" for engine in ENGINES}
    assert config["rule_files"] == ["/etc/prometheus/rules.yml"]
    for name in COMPOSE_FILES:
        mounts = _compose(name)["services"]["prometheus"]["volumes"]
        assert "./prometheus/rules.yml:/etc/prometheus/rules.yml:ro" in mounts


def test_alerts_cover_the_issue() -> None:
    """Alerts cover fidelity, degraded rate, engine down, slow rehearsal and error rate."""
    alerts = promql.alerts()
    assert {
        "RehearsalFidelityDropping",
        "RehearsalDegradedRateRising",
        "RehearsalEngineDown",
        "RehearsalSlowerThanRealCalls",
        "RehearsalGatewayErrorRate",
    } <= alerts.keys()
    assert alerts["RehearsalSlowerThanRealCalls"]["for"] == "10m"
    for rule in alerts.values():
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["summary"]


def test_grafana_provisioning_matches_mounts() -> None:
    """The dashboard provider reads the folder compose mounts; the datasource is Prometheus."""
    provider = _yaml("deploy/grafana/provisioning/dashboards/rehearsal-gateway.yaml")
    path = provider["providers"][0]["options"]["path"]
    for name in COMPOSE_FILES:
        assert f"./grafana/dashboards:{path}:ro" in _compose(name)["services"]["grafana"]["volumes"]
    datasource = _yaml("deploy/grafana/provisioning/datasources/prometheus.yaml")["datasources"][0]
    assert (datasource["type"], datasource["url"]) == ("prometheus", "http://prometheus:9090")


def _dockerfile() -> str:
    return (ROOT / "Dockerfile").read_text()


def test_dockerfile_is_multistage_slim_and_non_root() -> None:
    """Two stages on python:3.11-slim; the final one runs as a numeric non-root user."""
    text = _dockerfile()
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in text
    assert len(re.findall(r"^FROM \$\{PYTHON_IMAGE\} AS \w+$", text, re.MULTILINE)) == 2
    users = re.findall(r"^USER (\S+)$", text, re.MULTILINE)
    assert users
    assert users[-1].split(":")[0] not in {"0", "root"}


def test_dockerfile_entrypoint_and_healthcheck() -> None:
    """The image starts `rehearsal-gateway serve` and health-checks GET /health."""
    text = _dockerfile()
    assert 'ENTRYPOINT ["rehearsal-gateway", "serve"]' in text
    assert re.search(r"HEALTHCHECK .*\n.*http://127\.0\.0\.1:8000/health", text)


def test_dockerfile_installs_without_torch() -> None:
    """The image installs the project without the `gpu` extra; its build fails if torch appears."""
    text = _dockerfile()
    installs = re.findall(r"pip install[^&\n]*", text)
    assert installs
    for install in installs:
        for heavy in ("gpu", "vllm", "torch"):
            assert heavy not in install
    assert "find_spec('torch')" in text


def test_dockerfile_copies_what_the_build_needs() -> None:
    """Every COPY source exists and the copied packages are exactly those pyproject installs."""
    text = _dockerfile()
    sources = [
        part
        for line in re.findall(r"^COPY (?!--from)(.+)$", text, re.MULTILINE)
        for part in line.split()[:-1]
    ]
    # README.md is pyproject's `readme`: setuptools cannot build the wheel without it.
    assert "README.md" in sources
    for source in sources:
        assert (ROOT / source).exists(), source
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {
        p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    }
    assert packages <= {Path(s).name for s in sources}


def test_dockerignore_keeps_the_context_small() -> None:
    """The build context leaves out virtualenvs, git history and caches."""
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", ".venv-*", ".cache", "tests"} <= ignored
