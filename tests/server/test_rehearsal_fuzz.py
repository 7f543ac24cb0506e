"""Fuzzed rehearsal requests: odd knobs, headers, histories and tool results never get a 5xx.

Each body is a plausible world conversation with hypothesis-chosen rehearsal knobs (in and out
of range, of every JSON type), ``X-Rehearsal-*`` headers, ``tool_choice``, ``n``, ``stream`` and a
trailing tool message answering an id that looks like ours. Whatever comes back is either a 4xx
envelope or a well-formed answer with exactly one choice.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rehearsal_gateway.twin.worlds import load_world
from tests.server.conftest import TWIN_MODEL
from tests.server.rehearsal_support import Stack, opening, running_stack

WORLD = load_world("retail")

scalars = (
    st.none() | st.booleans() | st.integers(-3, 12) | st.floats(-1, 3, allow_nan=False)
    | st.sampled_from(["parallel", "sequential", "off", "reflect", "select", "", "x", "4"])
)  # fmt: skip
knobs = st.fixed_dictionaries(
    {},
    optional={
        name: scalars
        for name in (
            "mode", "budget", "depth", "commit", "deadline_ms", "temperature", "top_p",
            "early_exit", "trace", "bogus",
        )
    },
)  # fmt: skip
headers = st.fixed_dictionaries(
    {},
    optional={
        name: st.sampled_from(["parallel", "sequential", "off", "2", "0", "-1", "abc", "99", ""])
        for name in ("X-Rehearsal-Mode", "X-Rehearsal-Budget", "X-Rehearsal-Depth",
                     "X-Rehearsal-Commit", "X-Rehearsal-Deadline-Ms")
    },
)  # fmt: skip
tool_results = st.lists(
    st.fixed_dictionaries(
        {
            "role": st.just("tool"),
            "tool_call_id": st.sampled_from(["call_" + "a" * 24, "call_", "chatcmpl-tool-1", ""]),
            "content": st.text(max_size=12) | st.sampled_from(['{"error": "no"}', "[]", "{}"]),
        }
    ),
    max_size=2,
)
requests = st.fixed_dictionaries(
    {"task": st.integers(0, len(WORLD.tasks) - 1), "headers": headers},
    optional={
        "rehearsal": knobs | scalars,
        "tool_choice": st.sampled_from(["auto", "none", "required"]),
        "n": st.integers(1, 3),
        "stream": st.booleans(),
        "seed": st.integers(0, 5),
        "results": tool_results,
    },
)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A zero-latency twin behind a gateway with Redis (shared by the fuzz)."""
    with running_stack(tmp_path_factory.mktemp("fuzz"), twin_args=("--skill", "0.5")) as s:
        yield s


def _body(case: dict[str, Any]) -> dict[str, Any]:
    messages = opening(WORLD, WORLD.tasks[case["task"]])
    if case.get("results"):
        arguments = json.dumps({"order_id": "W1001"})
        function = {"name": "get_order", "arguments": arguments}
        call = {"id": "call_" + "a" * 24, "type": "function", "function": function}
        messages += [{"role": "assistant", "content": "", "tool_calls": [call]}, *case["results"]]
    body: dict[str, Any] = {
        "model": TWIN_MODEL,
        "messages": messages,
        "tools": WORLD.tool_schemas(),
    }
    for key in ("rehearsal", "tool_choice", "n", "stream", "seed"):
        if key in case:
            body[key] = case[key]
    return body


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=requests)
def test_fuzzed_rehearsal_requests_never_get_a_5xx(stack: Stack, case: dict[str, Any]) -> None:
    """150 generated rehearsal requests: a 4xx envelope or one well-formed answer, never a 5xx."""
    body = _body(case)
    url = stack.gateway.url + "/v1/chat/completions"
    response = httpx.post(url, json=body, headers=case["headers"], timeout=60)
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert set(response.json()["error"]) >= {"message", "type", "param", "code"}
        return
    if body.get("stream"):
        events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(event) for event in events[:-1]]
        assert not [c for c in chunks if "error" in c], chunks
        return
    answer = response.json()
    assert len(answer["choices"]) == body.get("n", 1) or "rehearsal" not in answer
    if "rehearsal" in answer:
        assert len(answer["choices"]) == 1
        assert answer["usage"]["total_tokens"] > 0
