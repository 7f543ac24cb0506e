"""Every series the dashboard and the Prometheus rules query exists in the metrics contract."""

from __future__ import annotations

import pytest

from tests.deploy import promql


def test_dashboard_queries_only_contract_names() -> None:
    """Each dashboard query names only series of docs/metrics-spec.md or vLLM's documented ones."""
    assert promql.unknown_names(promql.dashboard_exprs(), promql.spec_names()) == {}


def test_rules_query_only_contract_or_recorded_names() -> None:
    """Each rule names only contract series, `up`, or series recorded by rules.yml itself."""
    known = promql.spec_names() | promql.recorded_names()
    assert promql.unknown_names(promql.rule_exprs(), known) == {}


def test_recording_rules_read_only_raw_series() -> None:
    """Recording rules read exposed series directly, so their evaluation order does not matter."""
    recorded = promql.recorded_names()
    recording = [(name, expr) for name, expr in promql.rule_exprs() if name in recorded]
    assert recording
    assert promql.unknown_names(recording, promql.spec_names()) == {}


def test_dashboard_covers_rehearsal_against_real_calls() -> None:
    """The dashboard plots rehearsal and real tool-call latency and vLLM's TTFT and prefix cache."""
    used = set().union(*(promql.promql_names(expr) for _, expr in promql.dashboard_exprs()))
    assert {
        "rehearsal_gateway_rehearsal_duration_seconds_bucket",
        "rehearsal_gateway_real_tool_call_seconds_bucket",
        "rehearsal_gateway_fidelity_sum",
        "rehearsal_gateway_tokens_total",
        "rehearsal_gateway_overhead_seconds_bucket",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:prefix_cache_hits_total",
        "vllm:num_requests_waiting",
    } <= used


def test_checker_flags_a_misspelled_name() -> None:
    """The checker reports a name that is not exposed, so a typo cannot pass silently."""
    exprs = [("typo", "sum(rate(rehearsal_gateway_request_total[5m]))")]
    assert promql.unknown_names(exprs, promql.spec_names()) == {
        "typo": {"rehearsal_gateway_request_total"}
    }


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        pytest.param(
            'histogram_quantile(0.95, sum by (le, mode) (rate(a_bucket{mode=~"x|y"}[5m])))',
            {"a_bucket"},
            id="quantile-grouping-matchers",
        ),
        pytest.param(
            "sum(rate(a_sum[$__rate_interval])) / sum(rate(a_count[$__rate_interval]))",
            {"a_sum", "a_count"},
            id="grafana-interval",
        ),
        pytest.param(
            "rec:a:p95 > 2 * avg_over_time(rec:b:ratio[6h] offset 1d) and on() b_total > 1e3",
            {"rec:a:p95", "rec:b:ratio", "b_total"},
            id="recorded-offset-keywords-exponent",
        ),
        pytest.param('up{job="vllm", instance=~"engine-(0|1):8000"} == 0', {"up"}, id="string"),
        pytest.param("vllm:num_requests_waiting", {"vllm:num_requests_waiting"}, id="colon"),
        pytest.param("sum(x) without (pid) + max by (engine) (y)", {"x", "y"}, id="postfix-by"),
    ],
)
def test_promql_names_extraction(expr: str, names: set[str]) -> None:
    """Metric names are pulled out of PromQL; functions, labels, durations and numbers are not."""
    assert promql.promql_names(expr) == names


def test_exposed_names_reads_a_live_exposition() -> None:
    """exposed_names lists a /metrics page's series: counters with _total, vLLM's colons too."""
    text = (
        "# TYPE vllm:prefix_cache_hits_total counter\n"
        'vllm:prefix_cache_hits_total{model_name="m"} 3.0\n'
        "# TYPE rehearsal_gateway_fidelity histogram\n"
        'rehearsal_gateway_fidelity_bucket{le="+Inf",outcome="ok"} 1.0\n'
        'rehearsal_gateway_fidelity_count{outcome="ok"} 1.0\n'
        'rehearsal_gateway_fidelity_sum{outcome="ok"} 0.9\n'
    )
    assert promql.exposed_names(text) == {
        "vllm:prefix_cache_hits_total",
        "rehearsal_gateway_fidelity_bucket",
        "rehearsal_gateway_fidelity_count",
        "rehearsal_gateway_fidelity_sum",
    }


def test_spec_names_expand_histograms() -> None:
    """Spec histograms become _bucket/_sum/_count series; counters and gauges stay as named."""
    names = promql.spec_names()
    assert {
        "rehearsal_gateway_fidelity_bucket",
        "rehearsal_gateway_fidelity_sum",
        "rehearsal_gateway_fidelity_count",
        "rehearsal_gateway_requests_total",
        "rehearsal_gateway_engine_healthy",
    } <= names
    assert "rehearsal_gateway_fidelity" not in names
    assert len({n for n in names if n.startswith("rehearsal_gateway_")}) == 9 * 3 + 24
