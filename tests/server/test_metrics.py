"""The metrics module: spec names, per-app registries, what a request leaves behind."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram

from rehearsal_gateway.server.telemetry.families import REQUEST_BUCKETS
from rehearsal_gateway.server.telemetry.metrics import GatewayMetrics

SPEC = Path(__file__).resolve().parents[2] / "docs" / "metrics-spec.md"
IMPLEMENTED = {
    "rehearsal_gateway_requests_total",
    "rehearsal_gateway_request_duration_seconds",
    "rehearsal_gateway_engine_call_seconds",
    "rehearsal_gateway_engine_errors_total",
    "rehearsal_gateway_in_flight_requests",
    "rehearsal_gateway_engine_healthy",
    "rehearsal_gateway_engine_queue_depth",
    "rehearsal_gateway_store_writes_total",
    "rehearsal_gateway_rate_limited_total",
    "rehearsal_gateway_limits_failed_open_total",
}


def spec_rows() -> dict[str, tuple[str, set[str]]]:
    rows = {}
    for match in re.finditer(r"^\| `(\w+)` \| (\w+) \| ([^|]*) \|", SPEC.read_text(), re.M):
        name, kind, labels = match.groups()
        rows[name] = (kind, {label.strip() for label in labels.split(",") if label.strip() != "—"})
    return rows


def test_families_match_the_spec() -> None:
    """Every implemented family has the spec's name, type and labels."""
    metrics = GatewayMetrics()
    families = {family.name: family for family in metrics.registry.collect()}
    rows = spec_rows()
    for name in IMPLEMENTED:
        kind, labels = rows[name]
        base = name.removesuffix("_total")
        family = families[base]
        assert family.type == kind
        for attr in vars(metrics).values():
            if getattr(attr, "_name", None) == base:
                assert set(attr._labelnames) == labels


def test_registries_are_per_app() -> None:
    """Two metrics objects in one process never share a counter."""
    first, second = GatewayMetrics(), GatewayMetrics()
    first.observe_request("passthrough", "ok", 0.01)
    assert (
        first.registry.get_sample_value(
            "rehearsal_gateway_requests_total", {"mode": "passthrough", "outcome": "ok"}
        )
        == 1
    )
    assert (
        second.registry.get_sample_value(
            "rehearsal_gateway_requests_total", {"mode": "passthrough", "outcome": "ok"}
        )
        is None
    )


def test_recorders_and_exposition() -> None:
    """The recording methods land in the exposition text under the spec's names."""
    metrics = GatewayMetrics()
    with metrics.track_in_flight():
        assert metrics.registry.get_sample_value("rehearsal_gateway_in_flight_requests") == 1
    metrics.observe_engine_call("e1", "passthrough", 0.002)
    metrics.engine_error("e1", "timeout")
    metrics.engine_state("e1", healthy=True, queue_depth=3)
    body, content_type = metrics.render()
    text = body.decode()
    assert content_type.startswith("text/plain")
    assert 'rehearsal_gateway_engine_call_seconds_count{engine="e1",role="passthrough"} 1.0' in text
    assert 'rehearsal_gateway_engine_errors_total{engine="e1",kind="timeout"} 1.0' in text
    assert 'rehearsal_gateway_engine_healthy{engine="e1"} 1.0' in text
    assert 'rehearsal_gateway_engine_queue_depth{engine="e1"} 3.0' in text
    assert "rehearsal_gateway_in_flight_requests 0.0" in text


def test_the_in_flight_gauge_reads_true_at_every_read_and_nesting() -> None:
    """Tallied in one process: every read sees the requests in flight, through nesting and
    exceptions, and it returns to zero; several workers write straight to the gauge."""
    metrics = GatewayMetrics()

    def in_flight() -> float | None:
        return metrics.registry.get_sample_value("rehearsal_gateway_in_flight_requests")

    with metrics.track_in_flight():
        with metrics.track_in_flight():
            assert in_flight() == 2
        assert in_flight() == 1
        try:
            with metrics.track_in_flight():
                assert in_flight() == 2
                raise RuntimeError("the request failed")
        except RuntimeError:
            pass
        assert in_flight() == 1
    assert in_flight() == 0
    assert in_flight() == 0  # a second read adds nothing


def test_tallied_series_export_what_prometheus_client_would() -> None:
    """One process tallies counters and flushes them on every read (histograms are observed
    directly): the samples are the ones prometheus_client's own ``inc``/``observe`` give, bucket
    edges and overflow too, and a second read after more updates adds only those."""
    tallied = GatewayMetrics()
    plain = CollectorRegistry()
    histogram = Histogram("h", "h", ("engine", "role"), buckets=REQUEST_BUCKETS, registry=plain)
    counter = Counter("c", "c", ("engine", "kind"), registry=plain)

    def samples(registry: CollectorRegistry, names: tuple[str, str]) -> dict[str, float]:
        return {
            sample.name.removeprefix(name) + sample.labels.get("le", ""): sample.value
            for family in registry.collect()
            if family.name in names
            for name in (family.name,)
            for sample in family.samples
            if sample.labels.get("engine") == "e1" and not sample.name.endswith("_created")
        }

    values = [0.0, 0.001, 0.0011, 0.0025, 0.7, 120.0, 121.0, 5000.0]
    for updates in (values, values[:3]):
        for value in updates:
            tallied.observe_engine_call("e1", "act", value)
            histogram.labels("e1", "act").observe(value)
            tallied.engine_error("e1", "timeout")
            counter.labels("e1", "timeout").inc()
        ours = samples(
            tallied.registry,
            ("rehearsal_gateway_engine_call_seconds", "rehearsal_gateway_engine_errors"),
        )
        assert ours == pytest.approx(samples(plain, ("h", "c")))
    assert ours["_count"] == ours["_bucket+Inf"] == ours["_total"] == 11
    assert ours["_bucket0.001"] == 4  # 0.0 and 0.001, both rounds: le is inclusive
    tallied.engine_error("e1", "timeout")
    tallied._children[(tallied.engine_errors, ("e1", "timeout"))].inc(-5)  # what inc() refuses
    assert (
        tallied.registry.get_sample_value(  # the read still works, nothing added
            "rehearsal_gateway_engine_errors_total", {"engine": "e1", "kind": "timeout"}
        )
        == 11
    )


def test_workers_share_one_exposition(start_twin, start_gateway) -> None:
    """With ``--workers 2`` every worker's counts appear, merged, in any worker's ``/metrics``."""
    twin = start_twin("--seed", "1")
    redis_env = {"RGW_REDIS_URL": "redis://127.0.0.1:6379/0", "RGW_REDIS_PREFIX": "rgwtest-wk:"}
    gateway = start_gateway(twin.url + "/v1", args=("--workers", "2"), env=redis_env, process=True)
    body = {"model": "EnvACE-Qwen3-8B", "messages": [{"role": "user", "content": "hi"}]}
    for _ in range(6):
        # A new connection each time, so both workers take some of the requests.
        assert httpx.post(gateway.url + "/v1/chat/completions", json=body).status_code == 200
    line = 'rehearsal_gateway_requests_total{mode="passthrough",outcome="ok"}'
    for _ in range(4):
        assert f"{line} 6.0" in httpx.get(gateway.url + "/metrics").text


def test_workers_without_redis_refuse_to_start(tmp_path) -> None:
    """``--workers 2`` with the in-process store exits with a clear message instead of serving."""
    import subprocess

    from tests.support.procs import cli_argv

    argv = cli_argv("serve", "--port", "1", "--workers", "2")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "--workers=2: more than 1 needs a Redis URL (--redis" in done.stderr
