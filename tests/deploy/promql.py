"""Which metric names the deploy assets' PromQL relies on, and which names a target exposes.

The dashboard and the Prometheus rules must only name series that exist. `promql_names` pulls
the metric names out of an expression; the allowed names come either from the written contract
(`spec_names`, docs/metrics-spec.md, plus the `vllm:*` names vLLM documents) or from a live
`/metrics` page (`exposed_names`), so the same check runs before and after the gateway exists.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "docs" / "metrics-spec.md"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "rehearsal-gateway.json"
RULES = ROOT / "deploy" / "prometheus" / "rules.yml"

# vLLM's exposition names (shared/notes/vllm-facts.md, vLLM docs/design/metrics.md), as they
# appear on /metrics: counters carry `_total`, histograms their `_bucket/_sum/_count` series.
VLLM_COUNTERS = (
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
)
VLLM_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
VLLM_HISTOGRAMS = (
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
)
# Series Prometheus itself adds to every scrape target.
PROMETHEUS_SYNTHETIC = frozenset({"up"})

_HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")
_SPEC_ROW = re.compile(r"^\|\s*`(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)`\s*\|\s*(?P<type>\w+)\s*\|")

# Words that look like names in PromQL but are functions, operators or modifiers.
_KEYWORDS = frozenset(
    {
        "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
        "bool", "offset", "inf", "nan",
    }
)  # fmt: skip
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_TEMPLATE_VAR = re.compile(r"\$\{?\w+\}?")
# A name followed by "(" is a function call; the second group tells them apart.
_IDENT = re.compile(r"(?<![\w:.$])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")


def _expand(name: str, kind: str) -> set[str]:
    if kind == "histogram":
        return {name + suffix for suffix in _HISTOGRAM_SERIES}
    return {name}


def spec_families(markdown: str | None = None) -> dict[str, str]:
    """Metric name -> type for each row of a metrics table (docs/metrics-spec.md by default)."""
    text = SPEC.read_text() if markdown is None else markdown
    rows = (_SPEC_ROW.match(line) for line in text.splitlines())
    return {row["name"]: row["type"] for row in rows if row}


def spec_names(spec_text: str | None = None) -> set[str]:
    """Every series name the contract promises: gateway rows of the spec table plus vLLM's."""
    names: set[str] = set()
    for name, kind in spec_families(spec_text).items():
        names |= _expand(name, kind)
    names.update(VLLM_COUNTERS, VLLM_GAUGES)
    for histogram in VLLM_HISTOGRAMS:
        names |= _expand(histogram, "histogram")
    return names


def exposed_names(metrics_text: str) -> set[str]:
    """The series names present in a Prometheus text exposition (a live /metrics page)."""
    return {
        sample.name
        for family in text_string_to_metric_families(metrics_text)
        for sample in family.samples
    }


def promql_names(expr: str) -> set[str]:
    """The metric names an expression selects (functions, labels and keywords removed)."""
    stripped = _STRING.sub('""', expr)
    stripped = _TEMPLATE_VAR.sub(" ", stripped)
    stripped = _MATCHERS.sub(" ", stripped)
    stripped = _RANGE.sub(" ", stripped)
    stripped = _GROUPING.sub(" ", stripped)
    return {
        name
        for name, call in _IDENT.findall(stripped)
        if not call and name.lower() not in _KEYWORDS
    }


def _walk_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _walk_panels(panel.get("panels", []))


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def dashboard_panels() -> list[dict[str, Any]]:
    return list(_walk_panels(dashboard()["panels"]))


def dashboard_exprs() -> list[tuple[str, str]]:
    """(panel title, expression) for every query target of the dashboard."""
    return [
        (panel["title"], target["expr"])
        for panel in dashboard_panels()
        for target in panel.get("targets", [])
    ]


def rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(RULES.read_text())["groups"]
    return groups


def _rules() -> list[dict[str, Any]]:
    return [rule for group in rule_groups() for rule in group["rules"]]


def recorded_names() -> set[str]:
    return {rule["record"] for rule in _rules() if "record" in rule}


def alerts() -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for rule in _rules() if "alert" in rule}


def rule_exprs() -> list[tuple[str, str]]:
    """(rule name, expression) for every recording rule and alert."""
    return [(rule.get("record") or rule["alert"], rule["expr"]) for rule in _rules()]


def unknown_names(exprs: list[tuple[str, str]], known: set[str]) -> dict[str, set[str]]:
    """For each expression naming a series outside `known`, the offending names."""
    missing: dict[str, set[str]] = {}
    for where, expr in exprs:
        unknown = promql_names(expr) - known - PROMETHEUS_SYNTHETIC
        if unknown:
            missing.setdefault(where, set()).update(unknown)
    return missing
