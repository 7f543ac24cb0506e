"""The learned budget: the counts, the K each tool earns, and the planner spending it."""

from __future__ import annotations

import random
from typing import Any

import pytest

from rehearsal_gateway.rehearsal.auto import (
    AutoCounts,
    AutoSettings,
    auto_cells,
    auto_row,
    budget_for,
    budgets,
)
from rehearsal_gateway.rehearsal.budget import Budget, BudgetCaps, resolve_budget
from rehearsal_gateway.rehearsal.errors import BudgetError
from rehearsal_gateway.rehearsal.planner import Planner
from rehearsal_gateway.rehearsal.request import PlannerSettings
from rehearsal_gateway.rehearsal.risk import ToolRisk
from rehearsal_gateway.rehearsal.testing import (
    ScriptedGenerator,
    about,
    acting,
    answer_turn,
    imagined,
    tool_turn,
)
from tests.rehearsal.conftest import make_request

SETTINGS = AutoSettings()
CAPS = BudgetCaps()
GET = tool_turn("get_order", {"order_id": "#W1001"})
OTHER = tool_turn("get_order", {"order_id": "#W1002"})
CANCEL = tool_turn("cancel_order", {"order_id": "#W1001", "reason": "no longer needed"})
INVALID = tool_turn("get_order", {"order_id": 7})  # the schema wants a string


def k_of(tool: str = "t", risk: Any = "unknown", policy: Any = "trusted", **table: Any) -> int:
    return budget_for(tool, risk, policy, table, SETTINGS)[0]


# -- counts and the rule --------------------------------------------------------------------


def test_counts_read_from_the_store_and_their_rates() -> None:
    """Stored fields read as counts (junk as 0); catch, gain and replacement success follow."""
    counts = AutoCounts.from_mapping({"n": "6", "f": 2, "u": 4, "r": 2, "rs": "x", "other": 9})
    assert counts == AutoCounts(n=6, f=2, r=2, rs=0, u=4)
    assert (counts.samples, counts.imagined, counts.catch, counts.replaced_ok) == (8, 4, 0.0, 0.0)
    assert counts.gain == 0.5 - 0.5
    assert AutoCounts.from_mapping({"n": None, "f": -3}) == AutoCounts()
    assert (AutoCounts().catch, AutoCounts().gain, AutoCounts().replaced_ok) == (None, None, None)
    assert AutoCounts(n=4, u=4, f=1).gain is None  # nothing imagined yet


@pytest.mark.parametrize(
    ("replaced", "error", "imagined", "cells"),
    [(False, False, False, ("n", "u")), (False, True, False, ("n", "u", "f")),
     (False, False, True, ("n",)), (False, True, True, ("n", "m")),
     (True, False, True, ("r", "rs")), (True, True, True, ("r",))],
)  # fmt: skip
def test_a_real_result_lands_in_its_cells(
    replaced: bool, error: bool, imagined: bool, cells: tuple
) -> None:
    """Unimagined and imagined kept anchors, and replacements, are counted apart."""
    assert auto_cells(replaced, error, imagined) == cells


def test_destructive_tools_get_the_most_and_doubted_imagination_gets_nothing() -> None:
    """Risk first: destructive is always imagined; trust off/ignore_vetoes spends no K."""
    quiet = {"t": AutoCounts(n=50)}
    assert k_of(risk="destructive", policy="off", **quiet) == SETTINGS.max_k
    assert k_of(policy="off") == 0
    assert k_of(policy="ignore_vetoes") == 0


def test_too_few_results_learn_and_a_tool_borrows_its_class_never_the_tenant() -> None:
    """Under min_samples of the tool and its class's pool (or under min_each imagined):
    learning_k, whatever the tenant's pool says; else the class's pool."""
    assert k_of() == SETTINGS.learning_k
    assert k_of(t=AutoCounts(n=3, f=3), **{"*": AutoCounts(n=40)}) == SETTINGS.learning_k
    assert k_of(t=AutoCounts(n=20, u=18)) == SETTINGS.learning_k  # 2 imagined
    table = {"*": AutoCounts(n=40), "*write": AutoCounts(n=8, u=4, f=4, r=4, rs=4)}
    k, why = budget_for("t", "write", "trusted", table, SETTINGS)
    assert (k, why) == (SETTINGS.max_k, "t borrows its class's 12: gain 1.00 >= 0.1")
    k, why = budget_for("t", "read_only", "trusted", {"*read_only": AutoCounts(n=40)}, SETTINGS)
    assert (k, why) == (0, "t borrows its class's 40: catch 0.00 < 0.2")


def test_what_imagination_caught_decides_whether_it_pays() -> None:
    """Rare successful vetoes: 0; too few unimagined results: 0, held out to measure them;
    then max_k where imagined turns fail less often than unimagined ones (nothing in between:
    K beyond the anchor is nearly free), 0 where they fail as often (vetoes that are noise)."""
    assert k_of(t=AutoCounts(n=16, f=1, r=1, rs=1)) == 0  # catch 1/17
    k, why = budget_for("t", "unknown", "trusted", {"t": AutoCounts(n=16, r=4, rs=4)}, SETTINGS)
    assert (k, why) == (0, "20 results of t: 0 unimagined, held out")
    assert k_of(t=AutoCounts(n=16, u=4, f=2, r=4, rs=4)) == SETTINGS.max_k  # 0.5 against 0
    noise = AutoCounts(n=16, u=8, f=4, m=4, r=4, rs=2)  # 0.5 against 0.5
    assert k_of(t=noise) == 0
    assert budget_for("t", "unknown", "trusted", {"t": noise}, SETTINGS)[1].endswith(
        "gain 0.00 < 0.1"
    )


def test_reads_give_way_sooner() -> None:
    """A read's quiet threshold is read_quiet."""
    between = AutoCounts(n=20, u=10, f=5, m=5, r=5, rs=5)  # gain 0.5 - 5/15
    k, why = budget_for("t", "read_only", "trusted", {"t": between}, SETTINGS)
    assert (k, why) == (0, "25 results of t: gain 0.17 < 0.2")
    assert k_of(t=between) == SETTINGS.max_k


def test_the_table_and_the_route_row() -> None:
    """``budgets`` per tool (missing class and trust: unknown, trusted); one route row."""
    table = {"a": AutoCounts(n=20), "b": AutoCounts(n=10, u=5, f=5, r=5, rs=5)}
    risks = {"b": "read_only"}
    assert budgets(["a", "b", "c"], risks, {"c": "off"}, table, SETTINGS) == {
        "a": 0, "b": SETTINGS.max_k, "c": 0,
    }  # fmt: skip
    row = auto_row("b", "read_only", "trusted", table, SETTINGS)
    assert row == {
        "tool": "b", "samples": 15, "counts": {"n": 10, "f": 5, "r": 5, "rs": 5, "u": 5, "m": 0},
        "catch": 0.5, "gain": 1.0, "replaced_ok": 1.0, "budget": 4,
        "why": "15 results of b: gain 1.00 >= 0.2",
    }  # fmt: skip
    assert auto_row("z", "unknown", "trusted", {}, SETTINGS)["gain"] is None
    assert (
        auto_row("r", "unknown", "trusted", {"r": AutoCounts(n=8, r=2, rs=1)}, SETTINGS)[
            "replaced_ok"
        ]
        == 0.5
    )


# -- the request knob -----------------------------------------------------------------------


PLAIN = Budget()


def resolve(body: Any = None, headers: Any = None, defaults: Budget = PLAIN) -> Budget:
    return resolve_budget(body, headers, defaults=defaults, caps=CAPS)


def test_auto_from_the_body_a_header_or_the_default() -> None:
    """``"auto"`` in any case sets ``auto`` with its bound (the least of the budget cap and
    ``auto_max_k``); a number clears it."""
    got = resolve({"budget": "auto"})
    assert (got.auto, got.budget, got.active) == (True, CAPS.auto_max_k, True)
    small = BudgetCaps(max_budget=2)
    assert resolve_budget({"budget": "auto"}, None, defaults=PLAIN, caps=small).budget == 2
    assert resolve(None, {"X-Rehearsal-Budget": " AUTO "}).auto is True
    default = Budget(mode="off", auto=True)
    assert resolve({"budget": "auto"}, defaults=Budget(mode="off")).mode == "parallel"
    assert resolve(None, {"X-Rehearsal-Depth": "2"}, defaults=default).budget == CAPS.auto_bound
    assert resolve({"budget": 3}, defaults=default) == Budget(mode="parallel", budget=3)
    assert resolve({"budget": 2}, defaults=Budget(mode="parallel", auto=True)).auto is False


@pytest.mark.parametrize(
    ("body", "headers", "param", "message"),
    [
        ({"budget": "automatic"}, None, "rehearsal.budget", 'expected an integer or "auto"'),
        ({"budget": 1.5}, None, "rehearsal.budget", 'expected an integer or "auto"'),
        (None, {"X-Rehearsal-Budget": "lots"}, "X-Rehearsal-Budget", 'an integer or "auto"'),
        ({"budget": "auto", "commit": "select"}, None, "rehearsal.budget", "anchored"),
        ({"auto": True}, None, "rehearsal.auto", "unknown rehearsal parameter"),
        ({"depth": "x"}, None, "rehearsal.depth", "expected an integer, got"),
    ],
)
def test_bad_auto_values_are_clear_errors(
    body: Any, headers: Any, param: str, message: str
) -> None:
    with pytest.raises(BudgetError) as caught:
        resolve(body, headers)
    assert caught.value.param == param
    assert message in caught.value.message


def test_a_default_auto_names_the_clients_commit_rule() -> None:
    with pytest.raises(BudgetError) as caught:
        resolve({"commit": "reflect"}, defaults=Budget(auto=True, budget=8))
    assert caught.value.param == "rehearsal.commit"


# -- the planner spending it ----------------------------------------------------------------


async def run(engine: ScriptedGenerator, auto: Any, *, probe_rate: float = 0.0, **more: Any):
    request = make_request(seed=5, auto=auto, **more)
    settings = PlannerSettings(auto=AutoSettings(probe_rate=probe_rate))
    budget = Budget(budget=CAPS.max_budget, auto=True)
    return await Planner(engine, settings=settings).run(request, budget, rng=random.Random(1))


async def test_a_tool_that_learned_zero_is_committed_unimagined() -> None:
    """K = 0: one engine call, the anchor kept; the summary says what was learned."""
    engine = ScriptedGenerator().enqueue(acting(GET), role="act")
    result = await run(engine, {"get_order": (0, "quiet")})
    assert (result.turn, result.engine_calls, result.budget.budget) == (GET, 1, 1)
    assert (result.commit_path, result.committed_rehearsed) == ("auto_off", False)
    assert result.summary()["auto"] == {"budget": 0, "why": "quiet", "probe": False}


async def test_a_fallback_to_a_tool_that_learned_zero_says_auto_off() -> None:
    """A check-vetoed anchor keeps the cap's alternatives; the valid one, of a tool that learned
    K = 0, is committed unimagined: path ``auto_off``, not trust's."""
    engine = ScriptedGenerator().enqueue(acting(INVALID), acting(OTHER), role="act")
    result = await run(engine, {"get_order": (0, "quiet")})
    assert (result.turn, result.commit_path, result.committed_rehearsed) == (
        OTHER, "auto_off", False,
    )  # fmt: skip
    assert result.why.startswith("valid_fallback, not imagined: the learned budget switched")
    assert engine.by_role("rehearse") == []


async def test_a_probe_imagines_a_quiet_tool_once() -> None:
    engine = ScriptedGenerator().enqueue(acting(GET), role="act")
    engine.enqueue(imagined({"status": "pending"}))
    result = await run(engine, {"get_order": (0, "quiet")}, probe_rate=1.0)
    assert (result.engine_calls, result.auto) == (2, {"budget": 1, "why": "quiet", "probe": True})


async def test_a_busy_tool_spends_its_learned_k_on_alternatives() -> None:
    """K = 2: a vetoed anchor gets one alternative (n = 1), which replaces it."""
    engine = ScriptedGenerator()
    engine.enqueue(acting(OTHER), acting(GET), role="act")
    engine.enqueue(imagined({"error": "order not found"}), match=lambda r: "#W1002" in str(r))
    engine.enqueue(imagined({"status": "pending"}), match=about("get_order"))
    result = await run(engine, {"get_order": (2, "busy")})  # an operator's max_k of 2
    assert engine.by_role("act")[1].n == 1
    assert (result.turn, result.commit_path, result.budget.budget) == (GET, "replaced", 2)


async def test_an_unlearned_tool_gets_learning_k_within_the_cap() -> None:
    engine = ScriptedGenerator().enqueue(acting(GET), role="act")
    engine.enqueue(imagined({"status": "pending"}))
    result = await run(engine, {})
    assert result.auto == {
        "budget": SETTINGS.learning_k, "why": "no figures for this tool", "probe": False,
    }  # fmt: skip


async def test_a_checked_anchor_keeps_the_cap_and_quiet_alternatives_go_unimagined() -> None:
    """A schema-vetoed anchor needs no imagination: max_k alternatives, and a quiet tool's
    alternative is committed without being imagined (the least bad valid one)."""
    engine = ScriptedGenerator().enqueue(acting(INVALID), acting(GET), role="act")
    result = await run(engine, {"get_order": (0, "quiet")})
    assert engine.by_role("act")[1].n == SETTINGS.max_k - 1
    assert (result.turn, result.engine_calls, engine.by_role("rehearse")) == (GET, 2, [])
    assert result.auto is not None
    assert result.auto["budget"] == SETTINGS.max_k


async def test_an_answer_needs_no_k_and_destructive_is_imagined() -> None:
    engine = ScriptedGenerator().enqueue(acting(answer_turn("done")), role="act")
    result = await run(engine, {})
    assert result.engine_calls == 1
    engine = ScriptedGenerator().enqueue(acting(CANCEL), acting(CANCEL), role="act")
    engine.enqueue(imagined({"status": "cancelled"}))
    risk = {"cancel_order": ToolRisk("destructive", "request")}
    result = await run(engine, {"cancel_order": (0, "quiet")}, risk=risk)
    assert len(engine.by_role("rehearse")) == 1
