"""Tool risk classes through the gateway on loopback, against the engine double.

The double (``imagine:0``) refuses an acting call whose tools carry ``annotations`` with a 400,
as a strict engine would; it answers ``n`` calls of the first tool and imagines each as found.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from rehearsal_gateway.server.http.auth import key_digest, tenant_of
from tests.server.conftest import metric_value

KEY_A, KEY_B = "sk-risk-a", "sk-risk-b"
LOOKUP = {"type": "function", "function": {
    "name": "lookup", "description": "Look a key up.",
    "parameters": {"type": "object", "properties": {"key": {"type": "integer"}},
                   "required": ["key"]},
}}  # fmt: skip
ASK = [{"role": "user", "content": "Look key 0 up."}]
KNOBS = {"mode": "parallel", "budget": 2}


def _chat(url: str, tool: dict[str, Any], key: str | None = None, **knobs: Any) -> dict[str, Any]:
    body = {"model": "double-model", "messages": ASK, "tools": [tool],
            "rehearsal": {**KNOBS, "trace": True, **knobs}}  # fmt: skip
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    answer = httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def _trace(url: str, summary: dict[str, Any], key: str | None = None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    answer = httpx.get(f"{url}/v1/rehearsals/{summary['id']}", headers=headers, timeout=10)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


@pytest.mark.parametrize(
    ("tool", "risk"),
    [
        pytest.param({**LOOKUP, "annotations": {"destructiveHint": True}}, "destructive",
                     id="on-the-entry"),
        pytest.param({**LOOKUP, "function": {**LOOKUP["function"],
                                             "annotations": {"readOnlyHint": True}}},
                     "read_only", id="in-the-function"),
    ],
)  # fmt: skip
def test_annotations_class_a_tool_and_never_reach_the_engine(
    start_double: Any, start_gateway: Any, tool: dict[str, Any], risk: str
) -> None:
    """The engine refuses annotations, yet the rehearsal succeeds: they were read, then stripped."""
    gateway = start_gateway(start_double("imagine:0").url + "/v1")
    answer = _chat(gateway.url, tool)
    summary = answer["rehearsal"]
    assert summary["committed_risk"] == [risk]
    assert _trace(gateway.url, summary)["risk"] == {
        "lookup": {"risk": risk, "source": "annotations"}
    }
    commits = metric_value(gateway.url, "rehearsal_gateway_commits_total", risk=risk)
    assert commits == 1


def test_the_request_map_wins_then_tenant_patterns_then_the_gateways(
    start_double: Any, start_gateway: Any
) -> None:
    """``rehearsal.risk`` over annotations; key A's own pattern over the gateway's; key B: the
    gateway's pattern."""
    overrides = {tenant_of(key_digest(KEY_A)): {"patterns": {"look*": "write"}}}
    env = {"RGW_API_KEYS": f"{KEY_A},{KEY_B}", "RGW_RISK_PATTERNS": "lookup=read_only,*=write",
           "RGW_RISK_OVERRIDES": json.dumps(overrides)}  # fmt: skip
    gateway = start_gateway(start_double("imagine:0").url + "/v1", env=env)
    annotated = {**LOOKUP, "annotations": {"readOnlyHint": True}}
    asked = _chat(gateway.url, annotated, KEY_A, risk={"lookup": "destructive"})["rehearsal"]
    assert _trace(gateway.url, asked, KEY_A)["risk"]["lookup"] == {
        "risk": "destructive",
        "source": "request",
    }
    own = _chat(gateway.url, LOOKUP, KEY_A)["rehearsal"]
    assert _trace(gateway.url, own, KEY_A)["risk"]["lookup"] == {
        "risk": "write",
        "source": "operator",
    }
    assert _chat(gateway.url, LOOKUP, KEY_B)["rehearsal"]["committed_risk"] == ["read_only"]


def test_a_bad_class_is_a_400_naming_the_tool(start_double: Any, start_gateway: Any) -> None:
    """A class outside the four is refused before any engine call, naming ``rehearsal.risk.X``."""
    gateway = start_gateway(start_double("imagine:0").url + "/v1")
    body = {"model": "double-model", "messages": ASK, "tools": [LOOKUP],
            "rehearsal": {**KNOBS, "risk": {"lookup": "harmless"}}}  # fmt: skip
    answer = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=30)
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "rehearsal.risk.lookup"


def test_real_results_are_counted_by_the_calls_class(start_double: Any, start_gateway: Any) -> None:
    """The real error sent back for a committed write lands in real_results{risk="write"}."""
    gateway = start_gateway(start_double("imagine:0").url + "/v1")
    answer = _chat(gateway.url, LOOKUP, risk={"lookup": "write"})
    (call,) = answer["choices"][0]["message"]["tool_calls"]
    messages = [
        *ASK,
        answer["choices"][0]["message"],
        {"role": "tool", "tool_call_id": call["id"], "content": '{"error": "locked"}'},
    ]
    body = {"model": "double-model", "messages": messages, "tools": [LOOKUP],
            "rehearsal": {**KNOBS, "risk": {"lookup": "write"}}}  # fmt: skip
    again = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=30)
    assert again.status_code == 200, again.text
    name = "rehearsal_gateway_real_results_total"
    assert metric_value(gateway.url, name, risk="write", outcome="error") == 1
    assert metric_value(gateway.url, name, outcome="ok") == 0


def test_a_responses_tool_carries_its_annotations_into_the_class(
    start_double: Any, start_gateway: Any
) -> None:
    """A flat Responses function tool with hints is classed by them, and the engine never sees
    them."""
    gateway = start_gateway(start_double("imagine:0").url + "/v1")
    function = LOOKUP["function"]
    tool = {"type": "function", **function, "annotations": {"destructiveHint": False}}
    body = {"model": "double-model", "input": "Look key 0 up.", "tools": [tool],
            "rehearsal": KNOBS}  # fmt: skip
    answer = httpx.post(f"{gateway.url}/v1/responses", json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.json()["rehearsal"]["committed_risk"] == ["write"]


def test_reads_not_imagined_by_the_operators_choice(start_double: Any, start_gateway: Any) -> None:
    """RGW_RISK_IMAGINE_READS=false: a read is committed on its one acting call, path ``read``."""
    env = {"RGW_RISK_IMAGINE_READS": "false"}
    gateway = start_gateway(start_double("imagine:0").url + "/v1", env=env)
    summary = _chat(gateway.url, {**LOOKUP, "annotations": {"readOnlyHint": True}})["rehearsal"]
    assert (summary["commit_path"], summary["engine_calls"]) == ("read", 1)
    assert summary["committed_rehearsed"] is False
    assert metric_value(gateway.url, "rehearsal_gateway_commits_total", path="read") == 1


def test_a_pass_through_sends_no_annotations(start_double: Any, start_gateway: Any) -> None:
    """Rehearsal off: the body is rebuilt without the annotations, which the engine refuses."""
    gateway = start_gateway(start_double("imagine:0").url + "/v1")
    tool = {**LOOKUP, "annotations": {"readOnlyHint": True}}
    body = {"model": "double-model", "messages": ASK, "tools": [tool]}
    answer = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    assert "rehearsal" not in answer.json()


def test_a_relayed_response_sends_no_annotations(start_double: Any, start_gateway: Any) -> None:
    """``/v1/responses`` without rehearsal is relayed: the annotations are stripped there too,
    and the rest of each tool reaches the engine as sent."""
    gateway = start_gateway(start_double("imagine:0").url + "/v1")
    function = LOOKUP["function"]
    plain = {"type": "function", **function, "name": "other"}
    tool = {"type": "function", **function, "annotations": {"readOnlyHint": True}}
    body = {"model": "double-model", "input": "Look key 0 up.", "tools": [tool, plain]}
    answer = httpx.post(f"{gateway.url}/v1/responses", json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    relayed = answer.json()
    assert "rehearsal" not in relayed
    assert relayed["tools"] == [{k: v for k, v in tool.items() if k != "annotations"}, plain]
