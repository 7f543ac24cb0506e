"""Budget resolution: precedence, strict types, caps, and errors that name the parameter."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from rehearsal_gateway.rehearsal.budget import Budget, BudgetCaps, check_budget, resolve_budget
from rehearsal_gateway.rehearsal.errors import BudgetError, RehearsalError

DEFAULTS = Budget()
CAPS = BudgetCaps()


def resolve(body: Any = None, headers: dict[str, str] | None = None) -> Budget:
    return resolve_budget(body, headers, defaults=DEFAULTS, caps=CAPS)


def test_defaults_when_nothing_is_given() -> None:
    """No body and no headers give the defaults unchanged."""
    assert resolve() == DEFAULTS


def test_body_beats_headers_and_headers_beat_defaults() -> None:
    """A body field wins over its header; a header wins over the default."""
    got = resolve(
        {"budget": 2, "depth": None, "trace": True},
        {"x-rehearsal-budget": "6", "X-Rehearsal-Depth": " 3 ", "X-Rehearsal-Mode": "Sequential"},
    )
    assert (got.budget, got.depth, got.mode, got.trace) == (2, 3, "sequential", True)


def test_every_body_knob_is_accepted() -> None:
    """Each documented knob can be set from the body."""
    body = {
        "mode": "sequential",
        "budget": 3,
        "depth": 2,
        "commit": "select",
        "deadline_ms": 500,
        "temperature": 1,
        "top_p": 0.5,
        "early_exit": False,
        "trace": True,
        "repair": False,
        "risk": {"cancel_order": "destructive", "get_order": "read_only"},
        "confirm": True,
    }
    got = resolve(body)
    pairs = (("cancel_order", "destructive"), ("get_order", "read_only"))
    assert got.to_dict() == {**body, "temperature": 1.0, "risk": pairs, "auto": False}


@pytest.mark.parametrize(
    "defaults",
    [DEFAULTS, Budget(mode="off"), Budget(budget=0), Budget(mode="sequential", depth=3)],
    ids=["parallel", "off", "budget-0", "sequential"],
)
def test_a_request_without_knobs_gets_what_an_empty_rehearsal_object_gets(
    defaults: Budget,
) -> None:
    """The shortcut for knob-less requests resolves as the whole merge does, headers aside."""
    whole = resolve_budget({}, None, defaults=defaults, caps=CAPS)
    assert resolve_budget(None, None, defaults=defaults, caps=CAPS) == whole
    unrelated = {"content-type": "application/json", "x-session-id": "s"}
    assert resolve_budget(None, unrelated, defaults=defaults, caps=CAPS) == whole
    knob = {"x-rehearsal-budget": "2"}  # a knob header, in any case, is no shortcut
    assert resolve_budget(None, knob, defaults=defaults, caps=CAPS).budget == 2


@pytest.mark.parametrize(
    "budget",
    [
        pytest.param(DEFAULTS, id="defaults"),
        pytest.param(Budget("sequential", 2, 3, "select", 9, 1.5, 0.5, False, True), id="all-set"),
    ],
)
def test_to_dict_is_every_field_in_order(budget: Budget) -> None:
    """The spelled-out ``to_dict`` has each dataclass field, in order, with its value."""
    assert list(budget.to_dict().items()) == list(dataclasses.asdict(budget).items())


def test_budget_zero_turns_rehearsal_off() -> None:
    """``budget: 0`` means off whatever the mode says."""
    got = resolve({"mode": "parallel", "budget": 0})
    assert got.mode == "off"
    assert not got.active


@pytest.mark.parametrize(
    ("body", "headers", "default_mode", "mode"),
    [
        pytest.param({"budget": 2}, None, "off", "parallel", id="body-over-off"),
        pytest.param(None, {"X-Rehearsal-Budget": "3"}, "off", "parallel", id="header-over-off"),
        pytest.param({"budget": 2}, None, "sequential", "sequential", id="server-default-mode"),
        pytest.param({"budget": 2, "mode": "off"}, None, "off", "off", id="explicit-off-wins"),
        pytest.param({"budget": 0}, None, "off", "off", id="zero-stays-off"),
        pytest.param({"depth": 2}, None, "off", "off", id="other-knobs-do-not-turn-it-on"),
    ],
)
def test_a_budget_alone_turns_rehearsal_on(
    body: Any, headers: dict[str, str] | None, default_mode: str, mode: str
) -> None:
    """A budget > 0 without a mode rehearses: the server's mode, or parallel when that is off."""
    defaults = Budget(mode=default_mode)  # type: ignore[arg-type]
    got = resolve_budget(body, headers, defaults=defaults, caps=CAPS)
    assert got.mode == mode


@pytest.mark.parametrize(
    ("body", "headers", "param"),
    [
        pytest.param([], None, "rehearsal", id="body-not-object"),
        pytest.param({"budgett": 3}, None, "rehearsal.budgett", id="unknown-field"),
        pytest.param({"budget": "3"}, None, "rehearsal.budget", id="string-in-body"),
        pytest.param({"budget": True}, None, "rehearsal.budget", id="bool-is-not-int"),
        pytest.param({"budget": 9}, None, "rehearsal.budget", id="over-cap"),
        pytest.param({"budget": -1}, None, "rehearsal.budget", id="negative"),
        pytest.param({"depth": 0}, None, "rehearsal.depth", id="depth-zero"),
        pytest.param({"depth": 5}, None, "rehearsal.depth", id="depth-over-cap"),
        pytest.param({"deadline_ms": 0}, None, "rehearsal.deadline_ms", id="deadline-zero"),
        pytest.param({"deadline_ms": 10**6}, None, "rehearsal.deadline_ms", id="deadline-cap"),
        pytest.param({"temperature": 2.5}, None, "rehearsal.temperature", id="temperature"),
        pytest.param({"temperature": "hot"}, None, "rehearsal.temperature", id="temp-type"),
        pytest.param({"temperature": float("nan")}, None, "rehearsal.temperature", id="nan"),
        pytest.param({"top_p": 0}, None, "rehearsal.top_p", id="top-p-zero"),
        pytest.param({"mode": "fast"}, None, "rehearsal.mode", id="mode"),
        pytest.param({"mode": 1}, None, "rehearsal.mode", id="mode-type"),
        pytest.param({"commit": "vote"}, None, "rehearsal.commit", id="commit"),
        pytest.param({"early_exit": "yes"}, None, "rehearsal.early_exit", id="bool-type"),
        pytest.param(None, {"X-Rehearsal-Budget": "four"}, "X-Rehearsal-Budget", id="header-int"),
        pytest.param(None, {"X-Rehearsal-Depth": "9"}, "X-Rehearsal-Depth", id="header-cap"),
        pytest.param(None, {"X-Rehearsal-Commit": "x"}, "X-Rehearsal-Commit", id="header-commit"),
    ],
)
def test_invalid_knobs_name_their_parameter(
    body: Any, headers: dict[str, str] | None, param: str
) -> None:
    """Every invalid knob raises BudgetError whose ``param`` is the client's own name for it."""
    with pytest.raises(BudgetError) as caught:
        resolve(body, headers)
    assert caught.value.param == param
    assert isinstance(caught.value, RehearsalError)
    assert str(caught.value).startswith(f"{param}: ")


def test_defaults_beyond_caps_are_reported_as_defaults() -> None:
    """A server default outside its caps is named ``default.<field>`` (misconfiguration)."""
    with pytest.raises(BudgetError) as caught:
        check_budget(Budget(budget=20), CAPS, {})
    assert caught.value.param == "default.budget"


@pytest.mark.parametrize(
    ("knobs", "calls_per_turn", "expected"),
    [
        pytest.param({"mode": "off"}, 1, 1, id="off"),
        # select may reflect (1) and verify the reflected action (c) when every candidate is bad
        pytest.param({"budget": 4, "depth": 1, "commit": "select"}, 1, 5 + 2, id="parallel-d1"),
        pytest.param(
            {"budget": 4, "depth": 3, "commit": "reflect"}, 1, 1 + 4 * 5 + 2, id="parallel-reflect"
        ),
        # anchored: the anchor is its own call, then one call samples the alternatives
        pytest.param({"budget": 4, "depth": 3}, 1, 2 + 4 * 5, id="parallel-anchored"),
        pytest.param({"budget": 2, "depth": 2}, 2, 2 + 2 * 5, id="parallel-two-calls"),
        pytest.param({"budget": 1}, 1, 1 + 1, id="parallel-anchored-k1"),
        pytest.param({"mode": "sequential", "budget": 3, "depth": 2}, 1, 3 * 4, id="seq"),
        pytest.param(
            {"mode": "sequential", "budget": 3, "depth": 2, "commit": "reflect"},
            1,
            3 * 4 + 2,
            id="seq-reflect",
        ),
    ],
)
def test_max_engine_calls_formula(
    knobs: dict[str, Any], calls_per_turn: int, expected: int
) -> None:
    """The documented upper bound on engine calls per budget."""
    assert Budget(**knobs).max_engine_calls(calls_per_turn) == expected
