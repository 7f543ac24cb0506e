"""What a rehearsed answer keeps of the engine's committed turn: ``logprobs`` and a ``length`` cut.

Gateway + engine twin + the real Redis on loopback, driven by the official ``openai`` SDK (and raw
SSE where the SDK would hide a chunk's shape). A rehearsed answer is written by the gateway, not
relayed, so these hold it to what the engine said of the turn it committed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.server.conftest import TWIN_MODEL
from tests.server.rehearsal_support import Stack, opening, rehearsal_of, running_stack

PARALLEL = {"mode": "parallel", "budget": 2}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    logs = tmp_path_factory.mktemp("committed")
    with running_stack(logs, twin_args=("--skill", "0.9", "--seed", "4")) as s:
        yield s


def _body(stack: Stack, **extra: Any) -> dict[str, Any]:
    return {
        "model": TWIN_MODEL,
        "messages": opening(stack.world, stack.world.tasks[0]),
        "tools": stack.world.tool_schemas(),
        "seed": 7,
        "rehearsal": PARALLEL,
        **extra,
    }


def _sse(stack: Stack, body: dict[str, Any]) -> list[dict[str, Any]]:
    chunks = []
    url = f"{stack.gateway.url}/v1/chat/completions"
    with httpx.stream("POST", url, json={**body, "stream": True}, timeout=60) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line.removeprefix("data: ")))
    return chunks


def _committed_parts(message: Any) -> list[str]:
    """What the engine generated for the committed turn, in order: its thought, then its call
    as the hermes block it wrote."""
    call = message.tool_calls[0]
    arguments = json.loads(call.function.arguments)
    rendered = json.dumps({"name": call.function.name, "arguments": arguments}, ensure_ascii=False)
    return ["<think>", message.model_extra["reasoning"], "</think>", "<tool_call>", rendered]


def test_rehearsed_answer_carries_the_committed_turns_logprobs(stack: Stack) -> None:
    """Asked for ``logprobs``, a rehearsed answer carries the engine's logprobs of the turn it
    committed — every token of its thinking and its call, the end-of-turn token last — whole,
    and streamed as the same entries spread over the chunks."""
    client = stack.sdk()
    completion = client.chat.completions.create(
        model=TWIN_MODEL, messages=_body(stack)["messages"], tools=_body(stack)["tools"], seed=7,
        logprobs=True, top_logprobs=2, extra_body={"rehearsal": PARALLEL},
    )  # fmt: skip
    assert rehearsal_of(completion)["mode"] == "parallel"
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.logprobs is not None
    entries = choice.logprobs.content
    assert entries
    assert all(len(e.top_logprobs) == 2 and e.top_logprobs[0].token == e.token for e in entries)
    spelled = "".join(e.token for e in entries)
    # The committed sample's own tokens: its thinking (each sample thinks differently) and call.
    at = 0
    for part in _committed_parts(choice.message):
        assert part in spelled[at:], (part, spelled)
        at = spelled.index(part, at) + len(part)
    assert entries[-1].token == "<|im_end|>"

    chunks = _sse(stack, _body(stack, logprobs=True, top_logprobs=2))
    streamed = [
        entry
        for chunk in chunks
        for c in chunk["choices"]
        for entry in (c["logprobs"] or {}).get("content", [])
    ]
    assert streamed == [e.model_dump() for e in entries]
    assert chunks[0]["choices"][0]["logprobs"] is None  # the role chunk, as vLLM sends it


def test_a_turn_that_shows_nothing_still_streams_its_logprobs(stack: Stack) -> None:
    """Cut at its first token (``<think>``), the committed turn shows no text, yet its one
    scored token reaches the client streamed as it does whole."""
    body = _body(stack, max_tokens=1, logprobs=True)
    answer = httpx.post(f"{stack.gateway.url}/v1/chat/completions", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    whole = answer.json()["choices"][0]
    assert whole["finish_reason"] == "length"
    assert [e["token"] for e in whole["logprobs"]["content"]] == ["<think>"]
    chunks = _sse(stack, body)
    streamed = [
        e for k in chunks for c in k["choices"] for e in (c["logprobs"] or {}).get("content", [])
    ]
    assert streamed == whole["logprobs"]["content"]


def test_rehearsed_answer_without_logprobs_has_none(stack: Stack) -> None:
    """Not asked, none: ``logprobs`` is null whole and on every chunk."""
    answer = httpx.post(f"{stack.gateway.url}/v1/chat/completions", json=_body(stack), timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["logprobs"] is None
    assert all(c["logprobs"] is None for k in _sse(stack, _body(stack)) for c in k["choices"])


@pytest.mark.parametrize("limit", [12, 60])
def test_a_cut_committed_turn_finishes_with_length(stack: Stack, limit: int) -> None:
    """A committed turn cut by ``max_tokens`` reaches the client as ``finish_reason: "length"``,
    whole and streamed (once, on the last chunk with a choice) — never ``tool_calls``."""
    body = _body(stack, max_tokens=limit)
    answer = httpx.post(f"{stack.gateway.url}/v1/chat/completions", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    whole = answer.json()
    assert whole["rehearsal"]["mode"] == "parallel"
    assert whole["choices"][0]["finish_reason"] == "length"
    chunks = _sse(stack, body)
    reasons = [c["finish_reason"] for k in chunks for c in k["choices"] if c["finish_reason"]]
    assert reasons == ["length"]
    assert [c for c in chunks if c["choices"]][-1]["choices"][0]["finish_reason"] == "length"
    assert "rehearsal" in [c for c in chunks if c["choices"]][-1]


def test_a_call_cut_before_its_closing_tag_says_length(stack: Stack) -> None:
    """Cut just before ``</tool_call>``, the engine answers text and ``length``; the core re-reads
    the call from that text and commits it, and the client is told ``length`` (whole and
    streamed), so it can see the call was cut instead of running it unawares."""
    plain = {k: v for k, v in _body(stack).items() if k != "rehearsal"}
    url = f"{stack.twin.url}/v1/chat/completions"
    full = httpx.post(url, json=plain, timeout=60).json()
    # The turn ends '}}', '\n', '</tool_call>', '<|im_end|>': leave out the last two.
    limit = full["usage"]["completion_tokens"] - 2
    cut = httpx.post(url, json={**plain, "max_tokens": limit}, timeout=60).json()["choices"][0]
    assert cut["finish_reason"] == "length"
    assert "tool_calls" not in cut["message"]  # the engine's parser sees no closed call
    spelled = [full["choices"][0]["message"]["tool_calls"][0]["function"]]
    body = _body(stack, max_tokens=limit)
    whole = httpx.post(f"{stack.gateway.url}/v1/chat/completions", json=body, timeout=60).json()
    choice = whole["choices"][0]
    assert choice["finish_reason"] == "length", choice
    calls = choice["message"]["tool_calls"]
    assert [c["function"] for c in calls] == spelled
    chunks = _sse(stack, body)
    reasons = [c["finish_reason"] for k in chunks for c in k["choices"] if c["finish_reason"]]
    assert reasons == ["length"]
