"""The Kubernetes manifests of deploy/k8s render, validate and hang together without a cluster.

Every kustomization (the base, each overlay, and an overlay with each optional component) is
rendered with `kubectl kustomize` and each document validated strictly against the
Kubernetes 1.37 schemas of `kubernetes_validate`; ServiceMonitor, a CRD those schemas lack, is
checked against the subset of its schema the manifests use. What no schema sees is checked by
cross-reference: selectors against pod labels, named ports, probe paths, the engine Service behind
RGW_ENGINES, the RGW_* keys against GatewaySettings, the scrape jobs against the alert rules.
"""

from __future__ import annotations

import copy
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate
import pytest
import yaml

from rehearsal_gateway.server.settings import GatewaySettings
from tests.support.procs import ROOT

K8S = ROOT / "deploy" / "k8s"
K8S_VERSION = "1.37"
RENDERINGS = ("base", "overlays/one-engine", "overlays/multi-engine", "in-flight-hpa")
OVERLAYS = RENDERINGS[1:]
NAMESPACE = "rehearsal-gateway"
GATEWAY = "rehearsal-gateway"
ENGINES = "vllm-engine"
REHEARSAL_ENGINES = "vllm-rehearsal-engine"
# Optional components, each rendered as the multi-engine overlay with it added.
COMPONENTS = ("in-flight-hpa", "rehearsal-engines")
VLLM_FLAGS = (
    "--served-model-name EnvACE-Qwen3-8B",
    "--enable-auto-tool-choice",
    "--tool-call-parser hermes",
    "--reasoning-parser qwen3",
    "--enable-prefix-caching",
    "--scheduling-policy priority",  # with RGW_ENGINE_SCHEDULING=priority on the gateway
    "--host 0.0.0.0",
    "--port 8000",
)
KILL_MARGIN_S = 5  # after the drain (RGW_SHUTDOWN_GRACE_S), before the kubelet's SIGKILL
WORKLOAD_KINDS = ("Deployment", "StatefulSet")

# The part of the Prometheus Operator's ServiceMonitor schema (monitoring.coreos.com/v1) that the
# manifests use; a field outside it fails here until it is added knowingly.
_DURATION = {
    "type": "string",
    "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?"
    r"(([0-9]+)ms)?)$",
}
SERVICE_MONITOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "endpoints"],
            "properties": {
                "jobLabel": {"type": "string"},
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "matchLabels": {
                            "type": "object",
                            "additionalProperties": {"type": "string"},
                        }
                    },
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["port"],
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string", "pattern": "^/"},
                            "interval": _DURATION,
                            "scrapeTimeout": _DURATION,
                        },
                    },
                },
            },
        },
    },
}


# ---- rendering and lookups


def _kubectl() -> str:
    found = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which(
        "kubectl"
    )
    assert found, "kubectl not found: `make install` puts it in .venv/bin (the dev extra)"
    return found


def _kustomize(directory: Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        [_kubectl(), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@functools.cache
def render(target: str) -> tuple[dict[str, Any], ...]:
    """The documents `kubectl kustomize` makes of a kustomization under deploy/k8s.

    A name of ``COMPONENTS`` is the multi-engine overlay with that optional component added, the
    way the docs tell an operator to add it (kustomize only accepts relative paths, hence
    relpath).
    """
    if target not in COMPONENTS:
        return tuple(_kustomize(K8S / target))
    with tempfile.TemporaryDirectory() as scratch:
        overlay = os.path.relpath(K8S / "overlays" / "multi-engine", scratch)
        component = os.path.relpath(K8S / "components" / target, scratch)
        (Path(scratch) / "kustomization.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kustomize.config.k8s.io/v1beta1",
                    "kind": "Kustomization",
                    "resources": [overlay],
                    "components": [component],
                }
            )
        )
        return tuple(_kustomize(Path(scratch)))


def _all(docs: tuple[dict[str, Any], ...], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] == kind]


def _one(docs: tuple[dict[str, Any], ...], kind: str, name: str) -> dict[str, Any]:
    found = [doc for doc in _all(docs, kind) if doc["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def _pod(workload: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = workload["spec"]["template"]["spec"]
    return pod


def _container(workload: dict[str, Any]) -> dict[str, Any]:
    containers = _pod(workload)["containers"]
    assert len(containers) == 1
    container: dict[str, Any] = containers[0]
    return container


def _pod_labels(workload: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = workload["spec"]["template"]["metadata"]["labels"]
    return labels


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and selector.items() <= labels.items()


def _port_names(workload: dict[str, Any]) -> set[str]:
    return {port["name"] for c in _pod(workload)["containers"] for port in c.get("ports", [])}


def _selected_workloads(docs: tuple[dict[str, Any], ...], selector: dict[str, str]) -> list[Any]:
    return [
        doc
        for kind in WORKLOAD_KINDS
        for doc in _all(docs, kind)
        if _selects(selector, _pod_labels(doc))
    ]


def unmatched_services(docs: tuple[dict[str, Any], ...]) -> list[str]:
    """Services that do not select exactly one workload, or name a port its pods lack."""
    bad = []
    for service in _all(docs, "Service"):
        name = service["metadata"]["name"]
        workloads = _selected_workloads(docs, service["spec"].get("selector", {}))
        if len(workloads) != 1:
            bad.append(f"{name}: selects {len(workloads)} workloads")
            continue
        for port in service["spec"]["ports"]:
            if str(port["targetPort"]) not in _port_names(workloads[0]):
                bad.append(f"{name}: targetPort {port['targetPort']} not on its pods")
    return bad


def _env(docs: tuple[dict[str, Any], ...]) -> dict[str, str]:
    """The gateway's environment: its ConfigMap and Secret, as its envFrom reads them."""
    env: dict[str, str] = {}
    for source in _container(_one(docs, "Deployment", GATEWAY))["envFrom"]:
        if "configMapRef" in source:
            env |= _one(docs, "ConfigMap", source["configMapRef"]["name"])["data"]
        else:
            env |= _one(docs, "Secret", source["secretRef"]["name"])["stringData"]
    return env


def _sleep_s(container: dict[str, Any]) -> int:
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    return int(command[1])


def _validate(doc: dict[str, Any]) -> None:
    if doc["kind"] == "ServiceMonitor":
        # Not a built-in kind: kubernetes_validate has no schema for it and says so.
        with pytest.raises(kubernetes_validate.SchemaNotFoundError):
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        jsonschema.validate(doc, SERVICE_MONITOR_SCHEMA)
    else:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def _kustomizations() -> list[tuple[Path, dict[str, Any]]]:
    return [(path, yaml.safe_load(path.read_text())) for path in K8S.rglob("kustomization.yaml")]


def _listed(field: str) -> set[Path]:
    """Files the kustomizations name under `resources` (files, not folders) or `patches`."""
    listed = set()
    for path, kustomization in _kustomizations():
        for entry in kustomization.get(field, []):
            ref = path.parent / (entry["path"] if isinstance(entry, dict) else entry)
            if ref.is_file():
                listed.add(ref.resolve())
    return listed


# ---- schemas


@pytest.mark.parametrize("target", RENDERINGS)
def test_rendering_validates_strictly(target: str) -> None:
    """Every rendered document is valid against the Kubernetes schemas, unknown fields refused."""
    docs = render(target)
    assert len(docs) >= 12
    for doc in docs:
        _validate(doc)


@pytest.mark.parametrize(
    "path", sorted(_listed("resources")), ids=lambda p: p.relative_to(K8S).as_posix()
)
def test_raw_resource_file_validates(path: Path) -> None:
    """Each resource file is one valid document on its own, before kustomize touches it."""
    (doc,) = list(yaml.safe_load_all(path.read_text()))
    _validate(doc)


def test_every_file_is_used() -> None:
    """Every YAML file under deploy/k8s is a kustomization, a listed resource or a listed patch."""
    files = {p.resolve() for p in K8S.rglob("*.y*ml") if p.name != "kustomization.yaml"}
    assert len(files) >= 16
    assert files == _listed("resources") | _listed("patches")


def test_strict_validation_refuses_a_misspelled_field() -> None:
    """The validator bites: a typo in a probe's name fails, so a pass above means something."""
    deployment = copy.deepcopy(_one(render("base"), "Deployment", GATEWAY))
    container = _container(deployment)
    container["readinesProbe"] = container.pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)


# ---- cross-references


@pytest.mark.parametrize("target", RENDERINGS)
def test_services_select_their_workloads(target: str) -> None:
    """Each Service selects exactly one workload's pods and targets a port those pods name."""
    docs = render(target)
    assert len(_all(docs, "Service")) == 3
    assert unmatched_services(docs) == []


def test_checker_flags_a_service_that_selects_nothing() -> None:
    """The selector check reports a Service whose selector matches no pods."""
    docs = copy.deepcopy(render("base"))
    _one(docs, "Service", "redis")["spec"]["selector"]["app.kubernetes.io/name"] = "rediss"
    assert unmatched_services(docs) == ["redis: selects 0 workloads"]


@pytest.mark.parametrize("target", RENDERINGS)
def test_everything_lives_in_one_namespace(target: str) -> None:
    """The Namespace is part of the stack and every other object is placed in it."""
    docs = render(target)
    assert _one(docs, "Namespace", NAMESPACE)
    for doc in docs:
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["metadata"]["name"]


@pytest.mark.parametrize("target", RENDERINGS)
def test_gateway_probes_and_shutdown(target: str) -> None:
    """Readiness is /ready, liveness and startup /health, on a named port; shutdown fits grace."""
    gateway = _one(render(target), "Deployment", GATEWAY)
    container = _container(gateway)
    paths = {
        probe: (container[probe]["httpGet"]["path"], container[probe]["httpGet"]["port"])
        for probe in ("readinessProbe", "livenessProbe", "startupProbe")
    }
    assert paths == {
        "readinessProbe": ("/ready", "http"),
        "livenessProbe": ("/health", "http"),
        "startupProbe": ("/health", "http"),
    }
    assert "http" in _port_names(gateway)
    grace = _pod(gateway)["terminationGracePeriodSeconds"]
    drain = float(_env(render(target))["RGW_SHUTDOWN_GRACE_S"])
    assert grace == _sleep_s(container) + drain + KILL_MARGIN_S


@pytest.mark.parametrize("target", RENDERINGS)
def test_gateway_runs_unprivileged_on_a_read_only_root(target: str) -> None:
    """The Dockerfile's uid, no escalation, a read-only root with emptyDirs for /tmp and metrics."""
    docs = render(target)
    gateway = _one(docs, "Deployment", GATEWAY)
    pod, container = _pod(gateway), _container(gateway)
    uid = re.findall(r"^USER (\d+)", (ROOT / "Dockerfile").read_text(), re.MULTILINE)[-1]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == int(uid)
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    env = _env(docs)
    assert int(env["RGW_WORKERS"]) > 1  # hence multiprocess metrics, in RGW_METRICS_DIR
    empty_dirs = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    mounted = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert {"/tmp", env["RGW_METRICS_DIR"]} <= mounted.keys()
    assert {mounted["/tmp"], mounted[env["RGW_METRICS_DIR"]]} <= empty_dirs
    assert container["resources"]["requests"]["cpu"]  # the CPU HPA divides by it
    assert container["resources"]["limits"]["memory"]


@pytest.mark.parametrize("target", RENDERINGS)
def test_gateway_image_is_the_release_run_by_its_entrypoint(target: str) -> None:
    """The image is rehearsal-gateway at pyproject's version; env only, no command or args."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    container = _container(_one(render(target), "Deployment", GATEWAY))
    assert container["image"] == f"rehearsal-gateway:{version}"
    assert "command" not in container
    assert "args" not in container


@pytest.mark.parametrize("target", RENDERINGS)
def test_gateway_spreads_across_nodes(target: str) -> None:
    """A hostname topology spread over the gateway's own pods keeps replicas on separate nodes."""
    gateway = _one(render(target), "Deployment", GATEWAY)
    by_node = [
        c
        for c in _pod(gateway)["topologySpreadConstraints"]
        if c["topologyKey"] == "kubernetes.io/hostname"
    ]
    assert len(by_node) == 1
    assert _selects(by_node[0]["labelSelector"]["matchLabels"], _pod_labels(gateway))
    assert by_node[0]["whenUnsatisfiable"] == "DoNotSchedule"


@pytest.mark.parametrize("target", RENDERINGS)
def test_hpa_and_pdb_target_the_gateway(target: str) -> None:
    """The HPA scales the gateway Deployment (which leaves replicas to it); the PDB covers it."""
    docs = render(target)
    gateway = _one(docs, "Deployment", GATEWAY)
    assert "replicas" not in gateway["spec"]
    hpa = _one(docs, "HorizontalPodAutoscaler", GATEWAY)
    ref = hpa["spec"]["scaleTargetRef"]
    assert (ref["apiVersion"], ref["kind"], ref["name"]) == ("apps/v1", "Deployment", GATEWAY)
    assert 2 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    (pdb,) = _all(docs, "PodDisruptionBudget")
    selector = pdb["spec"]["selector"]["matchLabels"]
    assert _selected_workloads(docs, selector) == [gateway]
    assert pdb["spec"]["maxUnavailable"] < hpa["spec"]["minReplicas"]


@pytest.mark.parametrize(
    ("target", "engines", "min_gateways"),
    [
        pytest.param("overlays/one-engine", 1, 2, id="one-engine"),
        pytest.param("overlays/multi-engine", 4, 3, id="multi-engine"),
    ],
)
def test_overlays_size_engines_and_gateways(target: str, engines: int, min_gateways: int) -> None:
    """one-engine runs 1 engine and at least 2 gateways; multi-engine 4 engines and 3 gateways."""
    docs = render(target)
    assert _one(docs, "Deployment", ENGINES)["spec"]["replicas"] == engines
    assert _one(docs, "HorizontalPodAutoscaler", GATEWAY)["spec"]["minReplicas"] == min_gateways


def test_multi_engine_shares_its_model_cache_across_nodes() -> None:
    """Several engines mount one ReadWriteMany cache; a single engine may use ReadWriteOnce."""
    modes = {
        target: _one(render(target), "PersistentVolumeClaim", "vllm-model-cache")["spec"][
            "accessModes"
        ]
        for target in OVERLAYS[:2]
    }
    assert modes == {
        "overlays/one-engine": ["ReadWriteOnce"],
        "overlays/multi-engine": ["ReadWriteMany"],
    }


def test_in_flight_component_scales_on_the_gateway_gauge() -> None:
    """With the component, the HPA reads the in-flight Pods metric the gateway exports, plus CPU."""
    from rehearsal_gateway.server.telemetry.families import PREFIX

    metrics = _one(render("in-flight-hpa"), "HorizontalPodAutoscaler", GATEWAY)["spec"]["metrics"]
    assert [m["type"] for m in metrics] == ["Pods", "Resource"]
    assert metrics[0]["pods"]["metric"]["name"] == PREFIX + "in_flight_requests"
    assert metrics[0]["pods"]["target"]["type"] == "AverageValue"
    source = (ROOT / "server" / "telemetry" / "families.py").read_text()
    assert 'PREFIX + "in_flight_requests"' in source
    base_metrics = _one(render("base"), "HorizontalPodAutoscaler", GATEWAY)["spec"]["metrics"]
    assert [m["type"] for m in base_metrics] == ["Resource"]


@pytest.mark.parametrize("target", RENDERINGS)
def test_engines_are_discovered_through_a_headless_service(target: str) -> None:
    """RGW_ENGINES names the headless engine Service on its port, with DNS discovery."""
    docs = render(target)
    env = _env(docs)
    url, _, options = env["RGW_ENGINES"].partition(",")
    assert options == "discover=dns"
    parts = urlsplit(url)
    service = _one(docs, "Service", parts.hostname or "")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"].get("publishNotReadyAddresses", False) is False
    assert parts.port in {port["port"] for port in service["spec"]["ports"]}
    assert url == f"http://{service['metadata']['name']}:8000/v1"
    assert _selected_workloads(docs, service["spec"]["selector"]) == [
        _one(docs, "Deployment", ENGINES)
    ]
    assert float(env["RGW_DISCOVERY_INTERVAL"]) == 10


def test_rehearsal_engines_component_adds_a_second_engine_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the component: a second vLLM Deployment like the main one under labels of its own, a
    headless Service that selects it alone, and RGW_REHEARSAL_ENGINES naming that Service."""
    docs = render("rehearsal-engines")
    for doc in docs:
        _validate(doc)
    assert unmatched_services(docs) == []
    main, own = _one(docs, "Deployment", ENGINES), _one(docs, "Deployment", REHEARSAL_ENGINES)
    assert _container(own) == _container(main)  # the same model, flags, GPU and cache
    env = _env(docs)
    for key, workload in (("RGW_ENGINES", main), ("RGW_REHEARSAL_ENGINES", own)):
        url, _, options = env[key].partition(",")
        assert options == "discover=dns"
        service = _one(docs, "Service", urlsplit(url).hostname or "")
        assert service["spec"]["clusterIP"] == "None"
        assert _selected_workloads(docs, service["spec"]["selector"]) == [workload]
    for key in os.environ:
        if key.startswith("RGW_"):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    (spec,) = GatewaySettings().rehearsal_engines
    assert (spec.discover, spec.roles) == ("dns", {"rehearse"})


@pytest.mark.parametrize("target", RENDERINGS)
def test_gateway_settings_are_real_and_parse(target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ConfigMap/Secret key is an RGW_ field of GatewaySettings, and together they parse."""
    docs = render(target)
    env = _env(docs)
    assert {"RGW_API_KEYS", "RGW_REDIS_URL"} <= _one(docs, "Secret", GATEWAY + "-secrets")[
        "stringData"
    ].keys()
    unknown = [k for k in env if k.removeprefix("RGW_").lower() not in GatewaySettings.model_fields]
    assert unknown == []
    assert all(key.startswith("RGW_") for key in env)
    for key in os.environ:
        if key.startswith("RGW_"):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = GatewaySettings()
    assert (settings.host, settings.port) == ("0.0.0.0", 8000)
    assert settings.redis_url is not None  # `serve --workers N` refuses to start without it


@pytest.mark.parametrize("target", RENDERINGS)
def test_redis_url_names_the_redis_service(target: str) -> None:
    """RGW_REDIS_URL points at the in-cluster Redis Service, whose StatefulSet evicts by TTL."""
    docs = render(target)
    parts = urlsplit(_env(docs)["RGW_REDIS_URL"])
    service = _one(docs, "Service", parts.hostname or "")
    assert parts.port in {port["port"] for port in service["spec"]["ports"]}
    redis = _one(docs, "StatefulSet", "redis")
    assert redis["spec"]["serviceName"] == service["metadata"]["name"]
    args = " ".join(_container(redis)["args"])
    for setting in ("--maxmemory-policy volatile-lru", "--appendonly no", "--dir /data"):
        assert setting in args
    assert re.search(r"--maxmemory \d+[kmg]b", args)
    (policy,) = _all(docs, "NetworkPolicy")
    assert _selected_workloads(docs, policy["spec"]["podSelector"]["matchLabels"]) == [redis]
    (allowed,) = policy["spec"]["ingress"]
    (peer,) = allowed["from"]
    gateway = _one(docs, "Deployment", GATEWAY)
    assert _selected_workloads(docs, peer["podSelector"]["matchLabels"]) == [gateway]
    assert {p["port"] for p in allowed["ports"]} <= _port_names(redis)


@pytest.mark.parametrize("target", RENDERINGS)
def test_vllm_engines_serve_envace_on_a_gpu(target: str) -> None:
    """vLLM serves EnvACE with the gateway's flags, one GPU, /dev/shm and a model cache."""
    docs = render(target)
    engine = _one(docs, "Deployment", ENGINES)
    pod, container = _pod(engine), _container(engine)
    assert container["image"].startswith("vllm/vllm-openai:v")
    assert "command" not in container  # the image's `vllm serve`
    assert container["args"][0] == "Team-ACE/EnvACE-Qwen3-8B"
    argv = " ".join(container["args"])
    for flag in VLLM_FLAGS:
        assert flag in argv
    resources = container["resources"]
    assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == 1
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
    assert mounts["/dev/shm"]["emptyDir"]["medium"] == "Memory"
    env = {e["name"]: e.get("value") for e in container["env"]}
    claim = mounts[env["HF_HOME"]]["persistentVolumeClaim"]["claimName"]
    assert _one(docs, "PersistentVolumeClaim", claim)


@pytest.mark.parametrize("target", RENDERINGS)
def test_engine_probes_wait_for_the_model(target: str) -> None:
    """Engine probes hit /health; start-up allows 10 minutes; draining outlasts re-resolution."""
    docs = render(target)
    engine = _one(docs, "Deployment", ENGINES)
    container = _container(engine)
    for probe in ("readinessProbe", "startupProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}, probe
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600
    # Gateways keep the address until they re-resolve the Service; the engine serves till then.
    assert _sleep_s(container) > float(_env(docs)["RGW_DISCOVERY_INTERVAL"])
    assert _pod(engine)["terminationGracePeriodSeconds"] > _sleep_s(container)
    strategy = engine["spec"]["strategy"]["rollingUpdate"]
    assert (strategy["maxSurge"], strategy["maxUnavailable"]) == (0, 1)


def _rule_jobs() -> set[str]:
    rules = (ROOT / "deploy" / "prometheus" / "rules.yml").read_text()
    return set(re.findall(r'job="([^"]+)"', rules))


@pytest.mark.parametrize("target", OVERLAYS)
def test_service_monitors_scrape_gateway_and_engines(target: str) -> None:
    """Each ServiceMonitor selects one Service, names its port, and yields a job rules.yml uses."""
    docs = render(target)
    monitors = _all(docs, "ServiceMonitor")
    assert len(monitors) == 2
    jobs = {}
    for monitor in monitors:
        selector = monitor["spec"]["selector"]["matchLabels"]
        services = [s for s in _all(docs, "Service") if _selects(selector, s["metadata"]["labels"])]
        assert len(services) == 1, monitor["metadata"]["name"]
        ports = {port["name"] for port in services[0]["spec"]["ports"]}
        for endpoint in monitor["spec"]["endpoints"]:
            assert endpoint["port"] in ports
            assert endpoint["path"] == "/metrics"
        jobs[services[0]["metadata"]["name"]] = services[0]["metadata"]["labels"][
            monitor["spec"]["jobLabel"]
        ]
    assert jobs == {GATEWAY: "rehearsal-gateway", "vllm-engines": "vllm"}
    assert _rule_jobs() == set(jobs.values())


@pytest.mark.parametrize("target", RENDERINGS)
def test_engines_run_what_the_compose_stack_runs(target: str) -> None:
    """One vLLM release and one set of flags, whether deployed by compose or on Kubernetes."""
    container = _container(_one(render(target), "Deployment", ENGINES))
    stack = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    engine = stack["services"]["engine-0"]
    with_defaults = re.compile(r"\$\{\w+:-([^}]*)\}")
    image = with_defaults.sub(r"\1", engine["image"])
    command = [with_defaults.sub(r"\1", str(word)) for word in engine["command"]]
    assert container["image"] == image
    assert sorted(container["args"]) == sorted(command)
