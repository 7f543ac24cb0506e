"""Real failures and repair through the gateway on loopback, against the engine double.

The double (``imagine:0``) answers an acting call with ``n`` calls of the first tool, choice
``i`` with ``{"key": i}``, and imagines every call as found. A conversation in which
``lookup {"key": 0}`` already failed for real therefore makes the anchor a repeat.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.server.conftest import metric_value

LOOKUP = {"type": "function", "function": {
    "name": "lookup", "description": "Look a key up.",
    "parameters": {"type": "object", "properties": {"key": {"type": "integer"}},
                   "required": ["key"]},
}}  # fmt: skip
FAILED_LOOKUP = [
    {"role": "user", "content": "Look key 0 up."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "client-1", "type": "function",
         "function": {"name": "lookup", "arguments": '{"key": 0}'}}]},
    {"role": "tool", "tool_call_id": "client-1", "content": '{"error": "key 0 is locked"}'},
]  # fmt: skip


def _post(gateway_url: str, budget: int) -> dict[str, Any]:
    body = {"model": "double-model", "messages": FAILED_LOOKUP, "tools": [LOOKUP],
            "rehearsal": {"mode": "parallel", "budget": budget}}  # fmt: skip
    with httpx.Client(base_url=gateway_url, timeout=30) as client:
        answer = client.post("/v1/chat/completions", json=body)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_a_call_that_failed_for_real_is_not_committed_again(
    start_double: Any, start_gateway: Any
) -> None:
    """The repeated lookup is vetoed unimagined; a different key is committed instead."""
    gateway = start_gateway(start_double("imagine:0").url + "/v1")
    answer = _post(gateway.url, budget=3)
    (call,) = answer["choices"][0]["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"key": 1}
    summary = answer["rehearsal"]
    assert summary["commit_path"] == "replaced"
    assert summary["checked_veto_codes"] == {"REAL_FAILURE_REPEATED": 1}
    vetoes = metric_value(
        gateway.url, "rehearsal_gateway_vetoes_total", code="REAL_FAILURE_REPEATED", source="check"
    )
    assert vetoes == 1


def test_every_sample_a_repeat_makes_one_repair_call_then_falls_back(
    start_double: Any, start_gateway: Any
) -> None:
    """K = 2, both samples repeat: one re-asking call; its repeat too leaves the anchor, flagged.
    The repeats cost no imagination, which leaves room for the one hindsight probe (trust)."""
    gateway = start_gateway(start_double("imagine:0").url + "/v1")
    answer = _post(gateway.url, budget=2)
    summary = answer["rehearsal"]
    assert (summary["commit_path"], summary["engine_calls"]) == ("anchor_vetoed", 4)
    # The anchor's walk and the repair's: the alternative repeating the anchor is not walked.
    assert summary["checked_veto_codes"] == {"REAL_FAILURE_REPEATED": 2}
    calls = metric_value(gateway.url, "rehearsal_gateway_engine_call_seconds_count", role="commit")
    assert calls == 1


def test_a_vetoed_repeat_teaches_trust_through_its_probe(
    start_double: Any, start_gateway: Any
) -> None:
    """K = 3: the repeat is vetoed, probed once (imagined as found) and another key committed;
    trust counts the miss: an imagined success of a call whose real outcome, the
    conversation's, is an error."""
    gateway = start_gateway(start_double("imagine:0").url + "/v1")
    summary = _post(gateway.url, budget=3)["rehearsal"]
    assert (summary["commit_path"], summary["engine_calls"]) == ("replaced", 4)
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        rows = client.get("/v1/rehearsals/trust").json()["data"]
    (lookup,) = [row for row in rows if row["tool"] == "lookup"]
    assert (lookup["counts"]["oe"], lookup["samples"]) == (1, 1)
