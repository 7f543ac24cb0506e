"""Trust learned from real results, end to end: twin + gateway + the real Redis server.

A client's real results decide what the gateway believes of imagination. Here the twin imagines
faithfully (fidelity 1) while the client reports failures for one tool: the gateway must notice
that imagination does not predict that tool's outcomes, say so, and stop rehearsing it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.server.conftest import metric_value
from tests.server.rehearsal_support import (
    Stack,
    assistant_turn,
    chat,
    opening,
    rehearsal_of,
    running_stack,
    trust_route,
)

KEYS = ("trust-key-a", "trust-key-b")
ENV = {
    "RGW_API_KEYS": ",".join(KEYS),
    "RGW_TRUST_MIN_SAMPLES": "3",
    "RGW_TRUST_PINS": "cancel_order=off",
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One gateway (trust after 3 results, cancel_order pinned off) in front of a faithful twin."""
    logs = tmp_path_factory.mktemp("trust")
    twin_args = ("--skill", "1.0", "--fidelity", "1.0", "--seed", "2")
    with running_stack(logs, twin_args=twin_args, env=ENV) as s:
        yield s


def _turn_with_results(stack: Stack, key: str, seed: int, real: Any) -> dict[str, Any]:
    """Commit one call of a task's first turn, answer it with ``real``, return the next summary."""
    client, world = stack.sdk(api_key=key), stack.world
    messages = opening(world, world.tasks[0])
    first = chat(client, world, messages, mode="parallel", budget=2, seed=seed)
    summary = rehearsal_of(first)
    assert summary["commit_path"] in ("anchor", "trust_off")
    messages += [assistant_turn(first)] + [
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps(real)}
        for call in first.choices[0].message.tool_calls or []
    ]
    return rehearsal_of(chat(client, world, messages, mode="parallel", budget=2, seed=seed + 100))


def test_disagreeing_results_take_a_tools_rehearsal_away(stack: Stack) -> None:
    """Imagined success, real failure: twice for real, once more as the hindsight probe of the
    vetoed repeat (its real outcome is the conversation's error); the tool goes off and costs
    one call."""
    before = metric_value(
        stack.gateway.url,
        "rehearsal_gateway_outcome_predictions_total",
        imagined="ok",
        real="error",
    )
    tool = None
    for seed in range(2):
        learned = _turn_with_results(stack, KEYS[0], seed, {"error": "backend says no"})["feedback"]
        assert [f["outcome_agreement"] for f in learned] == [False]
        assert learned[0]["real_outcome"] == "error"
        tool = learned[0]["tool"]
    after = metric_value(
        stack.gateway.url,
        "rehearsal_gateway_outcome_predictions_total",
        imagined="ok",
        real="error",
    )
    assert after == before + 2  # committed calls only: the probe is no commit
    table = {row["tool"]: row for row in trust_route(stack, KEYS[0])["data"]}
    assert table[tool]["counts"] == {"ee": 0, "eo": 0, "oe": 3, "oo": 0, "we": 0, "wo": 0}
    assert (table[tool]["outcome_agreement"], table[tool]["policy"]) == (0.0, "off")
    assert table["*"]["samples"] == 3
    # The next request on that tool is not rehearsed: one engine call, and the summary says why.
    world = stack.world
    completion = chat(stack.sdk(api_key=KEYS[0]), world, opening(world, world.tasks[0]),
                      mode="parallel", budget=4, seed=50)  # fmt: skip
    summary = rehearsal_of(completion)
    assert summary["trust"][tool] == "off"
    assert (summary["commit_path"], summary["engine_calls"]) == ("trust_off", 1)
    assert summary["committed_rehearsed"] is False


def test_trust_is_per_tenant(stack: Stack) -> None:
    """Another API key's table is its own: empty until its own results arrive."""
    assert trust_route(stack, KEYS[1])["data"] == []
    world = stack.world
    completion = chat(
        stack.sdk(api_key=KEYS[1]), world, opening(world, world.tasks[0]), mode="parallel", budget=2
    )
    assert set(rehearsal_of(completion)["trust"].values()) == {"learning"}


def test_settings_and_pins_are_shown(stack: Stack) -> None:
    """The table carries the thresholds in force and the operator's pins."""
    settings = trust_route(stack, KEYS[1])["settings"]
    assert (settings["min_samples"], settings["pins"]) == (3, {"cancel_order": "off"})


def test_the_trust_table_needs_a_key(stack: Stack) -> None:
    """Without an API key the table is a 401 envelope, never another tenant's data."""
    response = httpx.get(stack.gateway.url + "/v1/rehearsals/trust", timeout=10)
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"
