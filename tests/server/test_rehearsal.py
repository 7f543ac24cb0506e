"""Rehearsal through the gateway: one committed call, its summary, its trace and its cost.

Gateway + engine twin + the real Redis server on loopback, driven by the official ``openai`` SDK.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.server.rehearsal_support import (
    Stack,
    chat,
    opening,
    rehearsal_of,
    run_committed,
    running_stack,
)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A weak policy (skill 0.5) with a faithful imagination (fidelity 1), zero latency."""
    logs = tmp_path_factory.mktemp("rehearsal")
    with running_stack(logs, twin_args=("--skill", "0.5", "--fidelity", "1.0", "--seed", "3")) as s:
        yield s


def _trace(stack: Stack, rehearsal_id: str) -> dict[str, Any]:
    response = httpx.get(f"{stack.gateway.url}/v1/rehearsals/{rehearsal_id}", timeout=10)
    assert response.status_code == 200, response.text
    trace: dict[str, Any] = response.json()
    return trace


def test_parallel_commits_one_call_and_matches_the_formula(stack: Stack) -> None:
    """Parallel K=4 (select, depth 1): one minted tool call; calls = 1 acting call, one imagined
    call per walked action the check let through, and one commit-role call per candidate beyond
    the K sampled (a repair when every candidate failed a check, a reflect when nothing was
    clean)."""
    task = stack.world.tasks[0]
    before = stack.twin_requests()
    completion = chat(
        stack.sdk(), stack.world, opening(stack.world, task),
        mode="parallel", budget=4, commit="select", early_exit=False, seed=11,
    )  # fmt: skip
    calls = completion.choices[0].message.tool_calls
    assert calls is not None
    assert len(calls) == 1
    assert calls[0].id.startswith("call_")
    assert completion.choices[0].finish_reason == "tool_calls"
    summary = rehearsal_of(completion)
    assert summary["mode"] == "parallel"
    assert summary["budget"] == 4
    trace = _trace(stack, summary["id"])
    expected = _expected_calls(trace, summary, sampled=4, act=1)
    assert trace["engine_calls"] == expected
    assert stack.twin_requests() - before == sum(expected.values())
    usage = completion.usage
    assert usage is not None
    billed = sum(t["prompt"] + t["completion"] for t in summary["tokens"].values())
    assert usage.total_tokens == billed


def test_sequential_commits_one_call_and_matches_the_formula(stack: Stack) -> None:
    """Sequential K=3 (select, depth 1, no early exit): 3 acting + 3 rehearsal calls."""
    task = stack.world.tasks[1]
    before = stack.twin_requests()
    completion = chat(
        stack.sdk(), stack.world, opening(stack.world, task),
        mode="sequential", budget=3, commit="select", early_exit=False, seed=5,
    )  # fmt: skip
    assert len(completion.choices[0].message.tool_calls or []) == 1
    summary = rehearsal_of(completion)
    trace = _trace(stack, summary["id"])
    expected = _expected_calls(trace, summary, sampled=3, act=3)
    assert trace["engine_calls"] == expected
    assert stack.twin_requests() - before == sum(expected.values())


def test_reflect_adds_exactly_one_commit_call(stack: Stack) -> None:
    """``commit: reflect`` costs one more acting call than ``select`` for the same rehearsal."""
    task = stack.world.tasks[2]
    before = stack.twin_requests()
    completion = chat(
        stack.sdk(), stack.world, opening(stack.world, task),
        mode="parallel", budget=2, commit="reflect", early_exit=False, seed=8,
    )  # fmt: skip
    summary = rehearsal_of(completion)
    trace = _trace(stack, summary["id"])
    assert trace["engine_calls"]["commit"] == 1
    # 1 act + the imagined calls (a new reflected action is imagined once more) + 1 commit
    assert stack.twin_requests() - before == 2 + _imagined(trace)
    assert trace["memory_note"].startswith("<rehearsal_memory>")


def test_bad_knobs_are_400s_naming_the_parameter(stack: Stack) -> None:
    """Each bad knob is a 400 envelope that names it; nothing is clamped."""
    task = stack.world.tasks[0]
    body = {"model": "EnvACE-Qwen3-8B", "messages": opening(stack.world, task),
            "tools": stack.world.tool_schemas()}  # fmt: skip
    cases: list[tuple[dict[str, Any], dict[str, str], str]] = [
        ({"rehearsal": {"budget": 99}}, {}, "rehearsal.budget"),
        ({"rehearsal": {"depth": "deep"}}, {}, "rehearsal.depth"),
        ({"rehearsal": {"mode": "bogus"}}, {}, "rehearsal.mode"),
        ({"rehearsal": {"budgett": 2}}, {}, "rehearsal.budgett"),
        ({"rehearsal": "parallel"}, {}, "rehearsal"),
        ({}, {"X-Rehearsal-Depth": "abc"}, "X-Rehearsal-Depth"),
        ({}, {"X-Rehearsal-Deadline-Ms": "999999999"}, "X-Rehearsal-Deadline-Ms"),
        ({"rehearsal": {"mode": "parallel"}, "n": 2}, {}, "n"),
    ]
    before = stack.twin_requests()
    for extra, headers, param in cases:
        response = httpx.post(
            stack.gateway.url + "/v1/chat/completions",
            json={**body, **extra}, headers=headers, timeout=10,
        )  # fmt: skip
        assert response.status_code == 400, (extra, headers, response.text)
        error = response.json()["error"]
        assert error["param"] == param, (extra, headers, error)
        assert error["type"] == "invalid_request_error"
    assert stack.twin_requests() == before  # nothing reached an engine


def test_headers_set_knobs_and_body_wins(stack: Stack) -> None:
    """``X-Rehearsal-*`` headers turn rehearsal on; the body's ``rehearsal`` object overrides."""
    task = stack.world.tasks[3]
    completion = chat(
        stack.sdk(), stack.world, opening(stack.world, task),
        headers={"X-Rehearsal-Mode": "sequential", "X-Rehearsal-Budget": "2"}, seed=2,
    )  # fmt: skip
    assert rehearsal_of(completion)["mode"] == "sequential"
    completion = chat(
        stack.sdk(), stack.world, opening(stack.world, task),
        headers={"X-Rehearsal-Mode": "sequential", "X-Rehearsal-Budget": "2"},
        mode="parallel", seed=2,
    )  # fmt: skip
    summary = rehearsal_of(completion)
    assert (summary["mode"], summary["budget"]) == ("parallel", 2)


def test_no_rehearsal_without_tools_or_with_tool_choice_none(stack: Stack) -> None:
    """Without tools, or with ``tool_choice: none``, the request is passed through."""
    client = stack.sdk()
    task = stack.world.tasks[0]
    plain = client.chat.completions.create(
        model="EnvACE-Qwen3-8B", messages=opening(stack.world, task), seed=1,
        extra_body={"rehearsal": {"mode": "parallel"}},
    )  # fmt: skip
    assert "rehearsal" not in (plain.model_extra or {})
    none = client.chat.completions.create(
        model="EnvACE-Qwen3-8B", messages=opening(stack.world, task), seed=1,
        tools=stack.world.tool_schemas(), tool_choice="none",
        extra_body={"rehearsal": {"mode": "parallel"}},
    )  # fmt: skip
    assert "rehearsal" not in (none.model_extra or {})


def test_rehearsal_never_commits_a_vetoed_action_and_errs_less(stack: Stack) -> None:
    """Over seeded first turns ``select`` never commits a vetoed action and errs less than off."""
    client = stack.sdk()
    errors = {"off": 0, "parallel": 0}
    for seed in (1, 2):
        for task in stack.world.tasks:
            for mode in ("off", "parallel"):
                knobs: dict[str, Any] = {"mode": mode}
                if mode == "parallel":
                    knobs.update(budget=4, commit="select", early_exit=False)
                completion = chat(client, stack.world, opening(stack.world, task),
                                  seed=seed, **knobs)  # fmt: skip
                state = stack.world.new_state(task)
                results = run_committed(stack.world, state, completion)
                errors[mode] += sum(isinstance(r, dict) and "error" in r for _, r in results)
                if mode == "parallel":
                    _assert_not_vetoed(stack, completion)
    assert errors["parallel"] < errors["off"], errors


def _assert_not_vetoed(stack: Stack, completion: Any) -> None:
    summary = rehearsal_of(completion)
    trace = _trace(stack, summary["id"])
    vetoed = {t["signature"] for t in trace["trace"] if str(t["outcome"]).startswith("veto")}
    committed = trace["committed"]["tool_calls"]
    for call in committed:
        signature = _signature(call["name"], call["arguments"])
        assert signature not in vetoed, (signature, trace["why"])
    chosen = trace["chosen_trajectory"]
    if chosen is not None:
        assert not str(trace["trace"][chosen]["outcome"]).startswith("veto"), trace["why"]


def _expected_calls(
    trace: dict[str, Any], summary: dict[str, Any], *, sampled: int, act: int
) -> dict[str, int]:
    """The engine calls a depth-1 select rehearsal of ``sampled`` candidates costs, by role.

    Each walk imagines its one call unless the check vetoed it (schema-invalid, or a repeat of
    a real failure): walked, never imagined. Each candidate beyond the sampled ones came from a
    commit-role call: the repair (every candidate failed a check) or the reflect (every one had
    evidence against it), each walked like the rest when its action is new.
    """
    extra = len(trace["candidates"]) - sampled
    assert 0 <= extra <= 2
    imagined = len(trace["trace"]) - summary["checked_vetoes"]
    assert imagined == _imagined(trace)
    if summary["commit_path"] == "repaired":
        assert extra >= 1
    return {"act": act, "rehearse": imagined, **({"commit": extra} if extra else {})}


def _imagined(trace: dict[str, Any]) -> int:
    """Rehearsal-role calls the trace shows: every observation not decided by the schema check."""
    return sum(
        observation["source"] == "imagined"
        for trajectory in trace["trace"]
        for step in trajectory["steps"]
        for observation in step["observations"]
    )


def _signature(name: str, arguments: str) -> str:
    import json

    return f"{name} {json.dumps(json.loads(arguments), sort_keys=True, separators=(',', ':'))}"


def test_minted_tool_call_ids_are_call_and_24_base62_characters() -> None:
    import re

    from rehearsal_gateway.server.rehearse.committed import mint_tool_call_id

    ids = [mint_tool_call_id() for _ in range(500)]
    assert all(re.fullmatch(r"call_[0-9A-Za-z]{24}", i) for i in ids)
    assert len(set(ids)) == len(ids)
    assert len({c for i in ids for c in i[5:]}) == 62  # every base62 digit turns up


def test_a_minted_id_writes_its_number_in_base62_least_significant_digit_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two digits per step write the same characters as one ``divmod`` by 62 per digit."""
    import secrets
    import string

    from rehearsal_gateway.server.rehearse import committed

    digits62 = string.digits + string.ascii_letters
    for number in (0, 1, 61, 62, 3843, 3844, 62**24 - 1, 123456789 * 62**17 + 987654321):
        monkeypatch.setattr(secrets, "randbelow", lambda _bound, n=number: n)
        expected, rest = "", number
        for _ in range(24):
            rest, digit = divmod(rest, 62)
            expected += digits62[digit]
        assert committed.mint_tool_call_id() == "call_" + expected
