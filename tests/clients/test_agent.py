"""The example agent against a live gateway + twin: it executes committed calls for real, sends
the results back, and the gateway's fidelity feedback reaches the episode."""

from __future__ import annotations

from rehearsal_gateway.clients.agent import ExampleAgent, ToolLatency
from rehearsal_gateway.clients.client import AsyncRehearsalClient, Rehearsal
from tests.clients.conftest import API_KEY
from tests.server.conftest import TWIN_MODEL
from tests.server.rehearsal_support import Stack

NO_WAIT = ToolLatency(read_s=0.0, write_s=0.0)


async def _episode(stack: Stack, knobs: Rehearsal, task: int, session: str):  # type: ignore[no-untyped-def]
    client = AsyncRehearsalClient(stack.gateway.url + "/v1", api_key=API_KEY)
    try:
        agent = ExampleAgent(
            client, stack.world, model=TWIN_MODEL, rehearsal=knobs, latency=NO_WAIT, seed=3
        )
        return await agent.run(stack.world.tasks[task], session_id=session)
    finally:
        await client.close()


async def test_rehearsed_episode_succeeds_with_fidelity(stack: Stack) -> None:
    """A parallel K=4 episode reaches the goal and records a fidelity per rehearsed real call."""
    episode = await _episode(stack, Rehearsal(mode="parallel", budget=4), 7, "agent-par")
    assert episode.success
    assert episode.real_calls >= len(stack.world.tasks[7].plan)
    assert episode.rehearsal_ids
    assert episode.fidelities
    assert all(0.0 <= f <= 1.0 for f in episode.fidelities)
    assert episode.tokens["rehearse"] > 0
    assert not episode.degraded


async def test_unrehearsed_episode_has_no_fidelity(stack: Stack) -> None:
    """With rehearsal off the agent still runs the task, but nothing was imagined to compare."""
    episode = await _episode(stack, Rehearsal(mode="off"), 7, "agent-off")
    assert episode.turns >= 1
    assert episode.real_calls >= 1
    assert not episode.rehearsal_ids
    assert not episode.fidelities
    assert episode.tokens["act"] > 0
    assert episode.tokens["rehearse"] == 0


async def test_episode_is_reproducible(stack: Stack) -> None:
    """The same seed and task give the same calls, errors and outcome (ids differ, seeds do not)."""
    knobs = Rehearsal(mode="parallel", budget=4, commit="select")
    first = await _episode(stack, knobs, 9, "agent-rep-1")
    second = await _episode(stack, knobs, 9, "agent-rep-2")
    shape = lambda e: (e.success, e.turns, e.real_calls, e.tool_errors, e.vetoes)  # noqa: E731
    assert shape(first) == shape(second)
