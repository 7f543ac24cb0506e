"""The gateway's Prometheus metric families: names, help, labels and buckets, as
docs/metrics-spec.md pins them, and the label values exported at zero from the start.

``GatewayMetrics`` (``server/telemetry/metrics.py``) is these families plus the operations that
record them. The declarations live here so that what the gateway exports reads as one list.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from rehearsal_gateway.rehearsal.checks import CHECK_CODE
from rehearsal_gateway.rehearsal.hindsight import REPEAT_CODE
from rehearsal_gateway.rehearsal.parsing import PARSE_CLASSES, VETO_CODES
from rehearsal_gateway.rehearsal.risk import RISKS

PREFIX = "rehearsal_gateway_"

# Request-level latencies: sub-millisecond pass-through up to multi-second rehearsals.
REQUEST_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
)  # fmt: skip
# The gateway's own time: fine around the 1 ms p50 target (docs/metrics.md, "Buckets").
OVERHEAD_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
)  # fmt: skip
# Real tool calls: a local function (tens of ms) up to a slow API or a human (10 minutes).
REAL_CALL_BUCKETS = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
)  # fmt: skip
FIDELITY_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)

# Label values known in advance. Their series are exported at zero from the start, so that a
# rate() over an error that has never happened is 0 rather than an absent series, and every name
# the dashboard and the alert rules query exists on a fresh gateway.
ENGINE_ERROR_KINDS = ("connect", "timeout", "status_5xx", "status_4xx", "protocol", "saturated")
EJECTION_CAUSES = ("calls", "probes", "canary")
CANARY_OUTCOMES = ("answered", "silent")
STORE_OPS = (  # the operations of server/store/backends.py
    "ping", "save_trace", "load_trace", "save_pending", "take_pending", "append_memory",
    "recent_memory", "save_grounding", "grounding", "record_trust", "trust_table",
    "record_budget", "budget_table",
    "save_settled", "limits",
)  # fmt: skip
# ---- background store writes and fair-use limits (server/store/writer.py, limits.py)
STORE_WRITE_OPS = ("settle", "feedback", "charge")
STORE_WRITE_OUTCOMES = ("written", "failed", "dropped", "cut")
LIMIT_KINDS = ("rate", "concurrency", "engine_calls", "budget_depth")
OUTCOMES = ("ok", "error")  # imagined or real outcome of one committed call
TRUST_POLICIES = ("trusted", "learning", "ignore_vetoes", "off")
AUTO_BUDGETS = ("0", "probe", "2", "4")  # the learned K's usual values (rehearsal.auto)
COMMIT_PATHS = (
    "anchor", "anchor_vetoed", "replaced", "valid_fallback", "trust_off", "auto_off", "selected",
    "reflected", "reflect_fallback", "least_bad", "repaired", "early_exit", "salvaged", "read",
    "confirm",
)  # fmt: skip
COMMIT_CHECKS = ("ok", "schema_invalid", "unchecked")
# A committed turn's risk class (its riskiest call's, rehearsal/risk.py); ``none``: an answer.
COMMIT_RISKS = (*RISKS, "none")
DEGRADED_REASONS = ("deadline", "engine_error", "store_unavailable")
REHEARSED_MODES = ("parallel", "sequential")


class MetricFamilies:
    """Every family of the gateway, registered in one ``CollectorRegistry``."""

    def __init__(self, reg: CollectorRegistry) -> None:
        self.requests = Counter(
            PREFIX + "requests",
            "Chat requests by rehearsal mode and outcome.",
            ("mode", "outcome"),
            registry=reg,
        )
        self.request_seconds = Histogram(
            PREFIX + "request_duration_seconds",
            "Whole request, first byte in to last byte out.",
            ("mode",),
            buckets=REQUEST_BUCKETS,
            registry=reg,
        )
        self.relayed_requests = Counter(
            PREFIX + "relayed_requests",
            "Requests to vLLM routes the gateway relays, by route template and outcome.",
            ("route", "outcome"),
            registry=reg,
        )
        self.relayed_seconds = Histogram(
            PREFIX + "relayed_request_duration_seconds",
            "A relayed request, first byte in to last byte out.",
            ("route",),
            buckets=REQUEST_BUCKETS,
            registry=reg,
        )
        self.engine_call_seconds = Histogram(
            PREFIX + "engine_call_seconds",
            "One engine call by role, until its last byte.",
            ("engine", "role"),
            buckets=REQUEST_BUCKETS,
            registry=reg,
        )
        self.engine_errors = Counter(
            PREFIX + "engine_errors",
            "Engine failures by kind (connect, timeout, status_5xx, status_4xx, protocol).",
            ("engine", "kind"),
            registry=reg,
        )
        self._rehearsal_families(reg)
        self._reliability_families(reg)
        self._fair_use_families(reg)
        self.in_flight = Gauge(
            PREFIX + "in_flight_requests",
            "Chat requests being served now.",
            registry=reg,
            multiprocess_mode="livesum",
        )
        self.engine_healthy = Gauge(
            PREFIX + "engine_healthy",
            "1 when the engine's last health check passed.",
            ("engine",),
            registry=reg,
            multiprocess_mode="livemostrecent",
        )
        self.engine_queue_depth = Gauge(
            PREFIX + "engine_queue_depth",
            "The engine's vllm:num_requests_waiting as last seen.",
            ("engine",),
            registry=reg,
            multiprocess_mode="livemostrecent",
        )

    def _reliability_families(self, reg: CollectorRegistry) -> None:
        """Faults seen at the edges: engines taken out of routing, clients gone mid-upload."""
        self.engine_ejections = Counter(
            PREFIX + "engine_ejections",
            "Engines taken out of routing, by cause (calls: failures in a row; probes; canary).",
            ("engine", "cause"),
            registry=reg,
        )
        self.engine_canaries = Counter(
            PREFIX + "engine_canaries",
            "One-token calls to engines whose calls waited in silence, by outcome.",
            ("engine", "outcome"),
            registry=reg,
        )
        self.rehearsal_preemptions = Counter(
            PREFIX + "rehearsal_preemptions",
            "Rehearsal-role calls cancelled for real work on their engine (RGW_REHEARSAL_YIELD).",
            ("engine",),
            registry=reg,
        )
        self.client_disconnects = Counter(
            PREFIX + "client_disconnects",
            "Clients that left before their request was read (stage upload) or answered.",
            ("stage",),
            registry=reg,
        )

    def _rehearsal_families(self, reg: CollectorRegistry) -> None:
        """The families of rehearsal, feedback and the store (docs/metrics-spec.md)."""
        self.rehearsal_seconds = Histogram(
            PREFIX + "rehearsal_duration_seconds",
            "The rehearsal phase: acting and imagining, before the commit.",
            ("mode",), buckets=REQUEST_BUCKETS, registry=reg,
        )  # fmt: skip
        self.imagined_seconds = Histogram(
            PREFIX + "imagined_observation_seconds",
            "One rehearsal-role engine call: one imagined tool result.",
            buckets=REQUEST_BUCKETS, registry=reg,
        )  # fmt: skip
        self.real_call_seconds = Histogram(
            PREFIX + "real_tool_call_seconds",
            "Our response with a committed tool call until the client's real result arrives.",
            buckets=REAL_CALL_BUCKETS, registry=reg,
        )  # fmt: skip
        self.commit_seconds = Histogram(
            PREFIX + "commit_duration_seconds",
            "The commit phase (a reflect call, or select without one).",
            ("commit",), buckets=REQUEST_BUCKETS, registry=reg,
        )  # fmt: skip
        self.overhead_seconds = Histogram(
            PREFIX + "overhead_seconds",
            "Gateway time not spent waiting on engines or the store.",
            ("mode",), buckets=OVERHEAD_BUCKETS, registry=reg,
        )  # fmt: skip
        self.fidelity = Histogram(
            PREFIX + "fidelity",
            "Similarity in [0, 1] between the imagined and the real tool result.",
            ("outcome",), buckets=FIDELITY_BUCKETS, registry=reg,
        )  # fmt: skip
        self.vetoes = Counter(
            PREFIX + "vetoes",
            "Vetoes by code and source (imagined by the simulator, or a deterministic check).",
            ("code", "source"), registry=reg,
        )  # fmt: skip
        self.imagination_parse = Counter(
            PREFIX + "imagination_parse",
            "Imagined answers by how they met the rehearsal format (ok, or the way they missed).",
            ("parse",), registry=reg,
        )  # fmt: skip
        self.outcome_predictions = Counter(
            PREFIX + "outcome_predictions",
            "Committed calls with a real result: imagined outcome x real outcome (ok | error).",
            ("imagined", "real"), registry=reg,
        )  # fmt: skip
        self.trust_decisions = Counter(
            PREFIX + "trust_decisions",
            "Candidate tools of rehearsed requests by the trust policy their imagination had.",
            ("policy",), registry=reg,
        )  # fmt: skip
        self.auto_budgets = Counter(
            PREFIX + "auto_budgets",
            "Rehearsals under budget auto by the K their anchor's tool learned (probe: a probe).",
            ("budget",), registry=reg,
        )  # fmt: skip
        self.commits = Counter(
            PREFIX + "commits",
            "Rehearsed commits by decision path, the committed call's schema check and risk class.",
            ("path", "check", "risk"), registry=reg,
        )  # fmt: skip
        self.real_results = Counter(
            PREFIX + "real_results",
            "Real results of committed calls by the call's risk class and outcome (ok | error).",
            ("risk", "outcome"), registry=reg,
        )  # fmt: skip
        self.early_exits = Counter(
            PREFIX + "early_exits", "Rehearsals that ended early.", ("mode",), registry=reg
        )
        self.degraded = Counter(
            PREFIX + "degraded", "Degraded answers by reason.", ("reason",), registry=reg
        )
        self.tokens = Counter(
            PREFIX + "tokens", "Tokens by role and kind.", ("role", "kind"), registry=reg
        )
        self.store_errors = Counter(
            PREFIX + "store_errors", "Store (Redis) failures by operation.", ("op",), registry=reg
        )

    def _fair_use_families(self, reg: CollectorRegistry) -> None:
        """Background store writes and fair-use limits (docs/limits.md)."""
        self.store_writes = Counter(
            PREFIX + "store_writes",
            "Background store writes by kind and outcome (written, failed, dropped, cut).",
            ("op", "outcome"),
            registry=reg,
        )
        self.rate_limited = Counter(
            PREFIX + "rate_limited",
            "Requests refused (429) by a per-key limit, by limit.",
            ("limit",),
            registry=reg,
        )
        self.limits_failed_open = Counter(
            PREFIX + "limits_failed_open",
            "Limit checks skipped because the store was unavailable (the request was let through).",
            registry=reg,
        )

    def start_series(self, engines: Iterable[str]) -> None:
        """Export the series of every label value known in advance, at zero."""
        for engine in engines:
            for kind in ENGINE_ERROR_KINDS:
                self.engine_errors.labels(engine, kind)
            self.rehearsal_preemptions.labels(engine)
            for cause in EJECTION_CAUSES:
                self.engine_ejections.labels(engine, cause)
            for outcome in CANARY_OUTCOMES:
                self.engine_canaries.labels(engine, outcome)
        for op in STORE_OPS:
            self.store_errors.labels(op)
        for reason in DEGRADED_REASONS:
            self.degraded.labels(reason)
        for code in VETO_CODES:
            self.vetoes.labels(code, "imagined")
        self.vetoes.labels(CHECK_CODE, "check")
        self.vetoes.labels(REPEAT_CODE, "check")
        for parse in PARSE_CLASSES:
            self.imagination_parse.labels(parse)
        for imagined in OUTCOMES:
            for real in OUTCOMES:
                self.outcome_predictions.labels(imagined, real)
        for policy in TRUST_POLICIES:
            self.trust_decisions.labels(policy)
        for learned in AUTO_BUDGETS:
            self.auto_budgets.labels(learned)
        for path in COMMIT_PATHS:
            for check in COMMIT_CHECKS:
                for risk in COMMIT_RISKS:
                    self.commits.labels(path, check, risk)
        for risk in RISKS:
            for outcome in OUTCOMES:
                self.real_results.labels(risk, outcome)
        for mode in REHEARSED_MODES:
            self.early_exits.labels(mode)
        for op in STORE_WRITE_OPS:
            for outcome in STORE_WRITE_OUTCOMES:
                self.store_writes.labels(op, outcome)
        for limit in LIMIT_KINDS:
            self.rate_limited.labels(limit)
