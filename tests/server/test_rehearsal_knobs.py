"""Which calls get a budget, and the shortcut for requests that name no knob.

A request that says nothing of rehearsal skips budget resolution when the server's defaults
rehearse nothing. These pin that the shortcut answers exactly what the full resolution answers.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest

from rehearsal_gateway.rehearsal.budget import Budget, BudgetCaps
from rehearsal_gateway.rehearsal.request import PlannerSettings
from rehearsal_gateway.server.chat.service import ChatService
from rehearsal_gateway.server.engines.pool import affinity_key
from rehearsal_gateway.server.errors import InvalidRequest
from rehearsal_gateway.server.rehearse.inputs import resolve_knobs
from rehearsal_gateway.server.rehearse.service import RehearsalService, _off_unless_asked
from tests.server.test_engines import make_pool

CAPS = BudgetCaps(max_budget=8, max_depth=3, max_deadline_ms=60_000)
OFF = Budget(mode="off")
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
BODY: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}], "tools": TOOLS}


def test_off_defaults_take_the_shortcut_and_active_ones_do_not() -> None:
    assert _off_unless_asked(OFF, CAPS)
    assert _off_unless_asked(replace(OFF, mode="parallel", budget=0), CAPS)  # budget 0 is off
    assert not _off_unless_asked(replace(OFF, mode="parallel", budget=4), CAPS)


def test_defaults_over_their_caps_are_left_to_each_request_which_gets_a_400() -> None:
    over = replace(OFF, mode="parallel", budget=12)
    assert not _off_unless_asked(over, CAPS)
    with pytest.raises(InvalidRequest) as raised:
        resolve_knobs(BODY, {}, defaults=over, caps=CAPS)
    assert raised.value.param == "default.budget"


def _service(defaults: Budget) -> RehearsalService:
    """A service for its knob reading only: nothing here calls an engine or the store."""
    return RehearsalService(
        None, None, None, None,  # type: ignore[arg-type]
        defaults=defaults, caps=CAPS, planner=PlannerSettings(),
    )  # fmt: skip


@pytest.mark.parametrize("defaults", [OFF, replace(OFF, mode="parallel", budget=4)])
@pytest.mark.parametrize(
    ("extra", "headers", "rehearsed_when_off"),
    [
        ({}, {}, False),
        ({}, {"x-session-id": "s", "user-agent": "sdk"}, False),
        ({"rehearsal": None}, {}, False),
        ({"rehearsal": {"mode": "sequential", "budget": 2}}, {}, True),
        ({}, {"X-Rehearsal-Mode": "sequential", "X-Rehearsal-Budget": "2"}, True),
        ({}, {"x-rehearsal-mode": "sequential", "x-rehearsal-budget": "2"}, True),
        ({"tools": None}, {"X-Rehearsal-Mode": "sequential"}, False),
    ],
)
def test_budget_for_answers_what_the_full_resolution_answers(
    defaults: Budget, extra: dict[str, Any], headers: dict[str, str], rehearsed_when_off: bool
) -> None:
    body = {**BODY, **extra}
    expected = resolve_knobs(body, headers, defaults=defaults, caps=CAPS)
    assert _service(defaults).budget_for(body, headers) == expected
    if not defaults.active:
        assert (expected is not None) is rehearsed_when_off


def test_a_bad_knob_is_a_400_on_either_path() -> None:
    for defaults in (OFF, replace(OFF, mode="parallel", budget=4)):
        with pytest.raises(InvalidRequest):
            _service(defaults).budget_for(BODY, {"X-Rehearsal-Depth": "abc"})


@pytest.mark.parametrize("engines", [1, 2])
def test_a_rehearsal_is_always_keyed_a_pass_through_when_the_key_can_matter(engines: int) -> None:
    """The affinity key files a rehearsal's memory, so every rehearsed call has one; a
    pass-through has one only when it can change where the call lands (``EnginePool.keyed``)."""
    pool = make_pool(count=engines)
    chat = ChatService(pool, None, rehearsal=_service(OFF), feedback=None)  # type: ignore[arg-type]
    body = {**BODY, "model": "m"}
    key = affinity_key(None, None, body["messages"])
    relayed = chat.prepare(orjson.dumps(body), session_id=None, tenant="t")
    rehearsed = chat.prepare(
        orjson.dumps({**body, "rehearsal": {"mode": "parallel", "budget": 2}}),
        session_id=None,
        tenant="t",
    )
    assert (relayed.budget, rehearsed.budget is not None) == (None, True)
    assert rehearsed.affinity == key
    assert relayed.affinity == (key if engines > 1 else b"")
