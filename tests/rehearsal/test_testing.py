"""The shipped fakes behave as documented, so other rooms can rely on them."""

from __future__ import annotations

import pytest

from rehearsal_gateway.rehearsal.messages import GenerationRequest
from rehearsal_gateway.rehearsal.testing import (
    InMemoryStore,
    ScriptedGenerator,
    about,
    acting,
    answer_turn,
    multi_call_turn,
    veto,
)


def act_request() -> GenerationRequest:
    return GenerationRequest(role="act", messages=({"role": "user", "content": "hi"},))


async def test_scripted_generator_records_and_answers_in_order() -> None:
    """Queued responses are used once, in order, and every request is recorded."""
    engine = ScriptedGenerator().enqueue(acting(answer_turn("a")), acting(answer_turn("b")))
    first = await engine.generate(act_request())
    second = await engine.generate(act_request())
    assert [first.choices[0].content, second.choices[0].content] == ["a", "b"]
    assert len(engine.requests) == 2
    assert engine.pending == 0


async def test_unscripted_calls_fail_loudly() -> None:
    """A call nothing was scripted for raises LookupError (a test bug, not an engine fault)."""
    engine = ScriptedGenerator().enqueue(veto("TOOL_NOT_AVAILABLE"), role="rehearse")
    with pytest.raises(LookupError):
        await engine.generate(act_request())


async def test_matchers_select_by_tool() -> None:
    """``about`` only accepts rehearsal requests for its tool."""
    matcher = about("get_order")
    rehearse = GenerationRequest(
        role="rehearse",
        messages=({"role": "user", "content": "Current tool to simulate:\n- name: get_order\n"},),
    )
    assert matcher(rehearse)
    assert not matcher(act_request())


def test_multi_call_turn_keeps_order() -> None:
    """A multi-call turn keeps its calls in the given order with distinct ids."""
    turn = multi_call_turn(("a", {}), ("b", {"x": 1}))
    assert [c.name for c in turn.tool_calls] == ["a", "b"]
    assert len({c.id for c in turn.tool_calls}) == 2


async def test_in_memory_store_orders_and_caps() -> None:
    """Memory is newest first and capped; grounding puts the exact arguments first."""
    from rehearsal_gateway.rehearsal.prompts import GroundingObservation

    store = InMemoryStore(max_entries=3)
    await store.append_memory("t", "s", [{"n": 1}, {"n": 2}])
    await store.append_memory("t", "s", [{"n": 3}, {"n": 4}])
    assert await store.recent_memory("t", "s", 10) == [{"n": 4}, {"n": 3}, {"n": 2}]
    store.add_grounding("t", GroundingObservation("f", {"a": 1}, {"r": 1}))
    store.add_grounding("t", GroundingObservation("f", {"a": 2}, {"r": 2}))
    found = await store.grounding("t", "f", '{"a":1}', 5)
    assert [g["result"] for g in found] == [{"r": 1}, {"r": 2}]
