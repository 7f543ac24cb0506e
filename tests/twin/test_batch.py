"""The twin's ``/v1/chat/completions/batch``: vLLM 0.32's batch of conversations, on loopback."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.procs import Proc
from tests.twin.conftest import MODEL, rehearsal_request, rehearsal_text, world_request

BATCH = "/v1/chat/completions/batch"


def _imagination(world: str, order_id: str) -> dict[str, Any]:
    """A rehearsal-role request imagining ``get_order_details`` for ``order_id``."""
    tools = world_request(world)["tools"]
    text = rehearsal_text(tools, "user: where is my order?", "get_order_details",
                          {"order_id": order_id})  # fmt: skip
    return rehearsal_request(text, seed=11, temperature=0.6, max_tokens=256)


def test_one_choice_per_conversation_as_each_alone(twin: Proc) -> None:
    """Choice i answers conversation i exactly as a single call with the same seed would."""
    singles = [_imagination("retail", f"#W{n}") for n in (2000001, 2000002, 2000003)]
    batch = {**singles[0], "messages": [single["messages"] for single in singles]}
    answer = httpx.post(twin.url + BATCH, json=batch, timeout=30)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["object"] == "chat.completion"
    assert body["model"] == MODEL
    assert [choice["index"] for choice in body["choices"]] == [0, 1, 2]
    usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    for single, choice in zip(singles, body["choices"], strict=True):
        alone = httpx.post(twin.url + "/v1/chat/completions", json=single, timeout=30).json()
        assert choice["message"] == alone["choices"][0]["message"]
        assert choice["finish_reason"] == alone["choices"][0]["finish_reason"]
        for key in usage:
            usage[key] += alone["usage"][key]
    assert {key: body["usage"][key] for key in usage} == usage
    assert body["usage"]["total_tokens"] > 0


def test_tools_and_stream_are_ignored_as_vllm_ignores_them(twin: Proc) -> None:
    """vLLM's batch model declares neither: a plain JSON answer, no tool call in it."""
    single = world_request("retail")
    batch = {**single, "messages": [single["messages"]], "stream": True, "max_tokens": 64}
    answer = httpx.post(twin.url + BATCH, json=batch, timeout=30)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("application/json")
    assert answer.json()["choices"][0]["message"].get("tool_calls") in (None, [])


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"n": 2}, "n"),
        ({"messages": []}, "messages"),
        ({"messages": [[]]}, "messages.0"),
        ({"messages": "hello"}, "messages"),
        ({"tool_choice": "auto"}, "tool_choice"),
        ({"use_beam_search": True}, "n"),
        ({"model": "no-such-model"}, "model"),
    ],
)
def test_refused_batches_name_the_field(twin: Proc, change: dict[str, Any], param: str) -> None:
    single = _imagination("retail", "#W2000001")
    batch = {**single, "messages": [single["messages"]], **change}
    answer = httpx.post(twin.url + BATCH, json=batch, timeout=30)
    assert answer.status_code in (400, 404)
    assert answer.json()["error"]["param"] == param


def test_a_body_that_is_not_an_object_is_refused(twin: Proc) -> None:
    answer = httpx.post(twin.url + BATCH, json=[1, 2], timeout=30)
    assert answer.status_code == 400
    assert "object" in answer.json()["error"]["message"]
