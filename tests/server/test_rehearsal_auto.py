"""The learned budget end to end: twin + gateway + the real Redis server.

Under ``budget: "auto"`` a tool starts at ``learning_k``; the real results the client sends back
are counted per tool (``budget:{tenant}``), and a tool whose anchors never needed imagination
drops to K = 0 — one engine call — as the summary, the trust route and the metrics say.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.server.conftest import TWIN_MODEL, metric_value
from tests.server.rehearsal_support import (
    Stack,
    assistant_turn,
    chat,
    opening,
    rehearsal_of,
    running_stack,
    trust_route,
)

KEYS = ("auto-key-a", "auto-key-b", "auto-key-cost")
ENV = {
    "RGW_API_KEYS": ",".join(KEYS),
    "RGW_AUTO_MIN_SAMPLES": "2",
    "RGW_AUTO_MIN_EACH": "2",
    "RGW_AUTO_PROBE_RATE": "0",
    "RGW_LIMIT_MAX_COST": "4",  # auto's bound (auto_max_k 4) at depth 1, and no more
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One gateway (budgets learned after 2 results, no probes) in front of a faithful twin."""
    logs = tmp_path_factory.mktemp("auto")
    twin_args = ("--skill", "1.0", "--fidelity", "1.0", "--seed", "2")
    with running_stack(logs, twin_args=twin_args, env=ENV) as s:
        yield s


def test_fair_use_charges_auto_its_bound_not_the_budget_cap(stack: Stack) -> None:
    """The cost cap weighs ``auto`` at the most it can spend (``auto_max_k``, 4), not at
    ``RGW_MAX_BUDGET`` (8): depth 1 fits a cap of 4, depth 2 is a 400 naming the product."""
    client, world = stack.sdk(api_key=KEYS[2]), stack.world
    messages = opening(world, world.tasks[0])
    assert rehearsal_of(chat(client, world, messages, budget="auto", depth=1))["auto"]
    with pytest.raises(openai.BadRequestError) as refused:
        chat(client, world, messages, budget="auto", depth=2)
    assert refused.value.body["param"] == "rehearsal.budget"
    assert "budget x depth = 8" in refused.value.body["message"]


def _first(stack: Stack, key: str, seed: int) -> tuple[list[dict[str, Any]], Any]:
    client, world = stack.sdk(api_key=key), stack.world
    messages = opening(world, world.tasks[0])
    return messages, chat(client, world, messages, mode="parallel", budget="auto", seed=seed)


def _answered(stack: Stack, key: str, seed: int) -> dict[str, Any]:
    """A first turn under auto, each committed call answered with a real success; the summary
    of the request that carried the results."""
    messages, first = _first(stack, key, seed)
    messages += [assistant_turn(first)] + [
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"status": "ok"})}
        for call in first.choices[0].message.tool_calls or []
    ]
    client = stack.sdk(api_key=key)
    return rehearsal_of(chat(client, stack.world, messages, mode="parallel", budget="auto"))


def test_a_tool_that_never_needed_imagination_learns_k_zero(stack: Stack) -> None:
    """learning_k at first; after two real successes of imagined anchors no veto replaced, K = 0."""
    _, first = _first(stack, KEYS[0], 0)
    summary = rehearsal_of(first)
    assert summary["auto"] == {"budget": 2, "why": "too few real results yet", "probe": False}
    tool = first.choices[0].message.tool_calls[0].function.name
    for seed in range(2):
        _answered(stack, KEYS[0], seed)
    before = metric_value(stack.gateway.url, "rehearsal_gateway_auto_budgets_total", budget="0")
    _, later = _first(stack, KEYS[0], 7)
    summary = rehearsal_of(later)
    assert (summary["auto"]["budget"], summary["engine_calls"]) == (0, 1)
    assert summary["auto"]["why"].startswith(f"2 results of {tool}: catch 0.00")
    after = metric_value(stack.gateway.url, "rehearsal_gateway_auto_budgets_total", budget="0")
    assert after == before + 1
    table = trust_route(stack, KEYS[0])["budget"]
    row = next(r for r in table["data"] if r["tool"] == tool)
    assert (row["counts"]["n"], row["counts"]["f"], row["budget"]) == (2, 0, 0)
    assert table["settings"]["min_samples"] == 2
    # Another tenant learned nothing.
    _, other = _first(stack, KEYS[1], 7)
    assert rehearsal_of(other)["auto"]["budget"] == 2


@pytest.mark.parametrize(
    ("knobs", "param"),
    [({"budget": "lots"}, "rehearsal.budget"),
     ({"budget": "auto", "commit": "select"}, "rehearsal.budget")],
)  # fmt: skip
def test_bad_auto_knobs_are_a_clear_400(stack: Stack, knobs: dict[str, Any], param: str) -> None:
    world = stack.world
    response = httpx.post(
        stack.gateway.url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {KEYS[1]}"},
        json={
            "model": TWIN_MODEL,
            "messages": opening(world, world.tasks[0]),
            "tools": world.tool_schemas(),
            "rehearsal": {"mode": "parallel", **knobs},
        },
        timeout=10,
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param
