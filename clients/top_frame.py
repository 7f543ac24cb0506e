"""The numbers `rehearsal-gateway top` shows, computed from the gateway's /metrics text.

Pure: exposition text becomes a `MetricsSnapshot`, and two snapshots a `TopFrame` (traffic,
rehearsal against real tool-call latency, fidelity, vetoes, tokens by role, engines), so the
view in ``clients/top.py`` is drawn from a fixed frame in tests.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from . import vetoes

PREFIX = "rehearsal_gateway_"
TOKEN_KINDS = ("prompt", "completion", "cached")
# (row label, histogram name without prefix) for the latency table, in display order.
LATENCIES = (
    ("rehearsal", "rehearsal_duration_seconds"),
    ("real tool call", "real_tool_call_seconds"),
    ("imagined result", "imagined_observation_seconds"),
    ("commit", "commit_duration_seconds"),
    ("request", "request_duration_seconds"),
    ("overhead", "overhead_seconds"),
)

Labels = Mapping[str, str]


@dataclass(frozen=True)
class MetricsSnapshot:
    """Every sample of one /metrics page, by series name (`x_total`, `x_bucket`, …)."""

    series: Mapping[str, tuple[tuple[Labels, float], ...]]

    def samples(self, name: str) -> tuple[tuple[Labels, float], ...]:
        return self.series.get(PREFIX + name, ())

    def total(self, name: str) -> float:
        return sum(value for _, value in self.samples(name))

    def by_label(self, name: str, label: str) -> dict[str, float]:
        totals: dict[str, float] = defaultdict(float)
        for labels, value in self.samples(name):
            totals[labels.get(label, "")] += value
        return dict(totals)

    def quantile(self, name: str, q: float) -> float | None:
        """Prometheus' histogram_quantile over all label sets of a histogram, since start."""
        cumulative: dict[float, float] = defaultdict(float)
        for labels, value in self.samples(name + "_bucket"):
            cumulative[float(labels["le"])] += value
        return bucket_quantile(q, sorted(cumulative.items()))


def bucket_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """Interpolate quantile q in cumulative (upper bound, count) buckets, as Prometheus does."""
    if not buckets or buckets[-1][0] != math.inf or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for index, (upper, count) in enumerate(buckets):
        if count >= rank:
            if upper == math.inf:
                # Beyond the largest finite bound: report that bound, like Prometheus.
                return buckets[index - 1][0] if index > 0 else None
            if count == below:
                return upper
            return lower + (upper - lower) * (rank - below) / (count - below)
        lower, below = upper, count
    return None


def parse_snapshot(text: str) -> MetricsSnapshot:
    """Parse Prometheus text exposition; raises ValueError when the text is not one."""
    from prometheus_client.parser import text_string_to_metric_families

    series: dict[str, list[tuple[Labels, float]]] = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            series[sample.name].append((dict(sample.labels), sample.value))
    return MetricsSnapshot({name: tuple(values) for name, values in series.items()})


@dataclass(frozen=True)
class LatencyRow:
    label: str
    p50: float | None
    p95: float | None
    count: float


@dataclass(frozen=True)
class EngineRow:
    name: str
    healthy: bool | None
    queue_depth: float | None


@dataclass(frozen=True)
class TopFrame:
    """The numbers one refresh shows. Rates need a previous snapshot; quantiles are since start."""

    url: str
    requests_per_s: float | None
    requests: float
    in_flight: float
    outcomes: dict[str, float]
    latencies: tuple[LatencyRow, ...]
    fidelity_mean: float | None
    fidelity_count: float
    vetoes: dict[str, int]  # by kind (clients/vetoes.py)
    early_exits: float
    degraded: dict[str, float]
    store_errors: float
    tokens: dict[str, dict[str, float]]
    engines: tuple[EngineRow, ...] = field(default=())

    def latency(self, label: str) -> LatencyRow:
        return next(row for row in self.latencies if row.label == label)

    def p95_ratio(self) -> float | None:
        """Rehearsal p95 over real tool-call p95: below 1, rehearsing costs less than one call."""
        rehearsal, real = self.latency("rehearsal").p95, self.latency("real tool call").p95
        if rehearsal is None or not real:
            return None
        return rehearsal / real


def _counter_delta(current: float, previous: float) -> float:
    # A counter that went down was reset (a restarted gateway): count from zero, as rate() does.
    return current - previous if current >= previous else current


def build_frame(
    url: str,
    current: MetricsSnapshot,
    previous: MetricsSnapshot | None = None,
    elapsed_s: float = 0.0,
) -> TopFrame:
    """Turn the latest snapshot (and the one before it, for rates) into what `top` shows."""
    requests = current.total("requests_total")
    rate = None
    if previous is not None and elapsed_s > 0:
        rate = _counter_delta(requests, previous.total("requests_total")) / elapsed_s
    fidelity_count = current.total("fidelity_count")
    tokens: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(TOKEN_KINDS, 0.0))
    for labels, value in current.samples("tokens_total"):
        tokens[labels.get("role", "")][labels.get("kind", "")] = value
    return TopFrame(
        url=url,
        requests_per_s=rate,
        requests=requests,
        in_flight=current.total("in_flight_requests"),
        outcomes=current.by_label("requests_total", "outcome"),
        latencies=tuple(
            LatencyRow(
                label,
                current.quantile(name, 0.5),
                current.quantile(name, 0.95),
                current.total(name + "_count"),
            )
            for label, name in LATENCIES
        ),
        fidelity_mean=current.total("fidelity_sum") / fidelity_count if fidelity_count else None,
        fidelity_count=fidelity_count,
        vetoes=vetoes.from_samples(current.samples("vetoes_total")),
        early_exits=current.total("early_exits_total"),
        degraded=current.by_label("degraded_total", "reason"),
        store_errors=current.total("store_errors_total"),
        tokens=dict(tokens),
        engines=_engines(current),
    )


def _engines(snapshot: MetricsSnapshot) -> tuple[EngineRow, ...]:
    # With several workers a gauge may come once per process: an engine counts as healthy only
    # if every worker saw it healthy, and its queue is the deepest any worker saw.
    health: dict[str, list[float]] = defaultdict(list)
    depth: dict[str, list[float]] = defaultdict(list)
    for labels, value in snapshot.samples("engine_healthy"):
        health[labels.get("engine", "")].append(value)
    for labels, value in snapshot.samples("engine_queue_depth"):
        depth[labels.get("engine", "")].append(value)
    return tuple(
        EngineRow(
            name,
            min(health[name]) >= 1 if name in health else None,
            max(depth[name]) if name in depth else None,
        )
        for name in sorted(health.keys() | depth.keys())
    )
