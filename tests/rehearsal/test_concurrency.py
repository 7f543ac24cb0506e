"""Branches overlap in time, and a cancelled rehearsal leaves no task behind."""

from __future__ import annotations

import asyncio
import random
import time

from rehearsal_gateway.rehearsal.budget import Budget
from rehearsal_gateway.rehearsal.messages import (
    AssistantTurn,
    GenerationRequest,
    GenerationResponse,
    ToolCall,
)
from rehearsal_gateway.rehearsal.planner import Planner
from rehearsal_gateway.rehearsal.testing import imagined
from tests.rehearsal.conftest import make_request

DELAY_S = 0.05


class SleepyEngine:
    """Every call takes 50 ms; each acting choice is a distinct action."""

    def __init__(self, busy_after: int = 0) -> None:
        self.started = 0
        self.busy_after = busy_after
        self.busy = asyncio.Event()

    async def generate(self, request: GenerationRequest) -> GenerationResponse:
        self.started += 1
        if self.started == self.busy_after:
            self.busy.set()
        await asyncio.sleep(DELAY_S)
        if request.role == "rehearse":
            return imagined({"status": "pending"})
        turns = tuple(
            AssistantTurn(tool_calls=(ToolCall(f"c{i}", "get_order", f'{{"order_id": "#{i}"}}'),))
            for i in range(request.n)
        )
        return GenerationResponse(turns)


async def timed(k: int) -> float:
    budget = Budget(budget=k, depth=1, commit="select", early_exit=False)
    started = time.perf_counter()
    await Planner(SleepyEngine()).run(make_request(), budget, rng=random.Random(0))
    return time.perf_counter() - started


async def test_parallel_k4_costs_about_as_much_wall_time_as_k1() -> None:
    """Parallel K=4 at depth 1 takes under 1.5x the wall time of K=1 (measured side by side)."""
    one = min([await timed(1) for _ in range(3)])
    four = min([await timed(4) for _ in range(3)])
    assert four < 1.5 * one, (four, one)


async def test_cancelling_a_rehearsal_leaves_no_task_running() -> None:
    """A client going away cancels every branch; nothing outlives the rehearsal task."""
    engine = SleepyEngine(busy_after=3)  # the n=4 call, then branches in flight
    budget = Budget(budget=4, depth=3)
    before = asyncio.all_tasks()
    task = asyncio.create_task(
        Planner(engine).run(make_request(), budget, rng=random.Random(0)), name="rehearsal"
    )
    await engine.busy.wait()
    task.cancel()
    await asyncio.wait([task])
    assert task.cancelled()
    assert asyncio.all_tasks() == before
