"""The grid run: every (cell, seed, task) not yet in the log, ``concurrency`` at a time.

Jobs are ordered task by task, each task's seeds and cells together, so a run cut short still
leaves complete pairs against off. Each finished episode is appended to the log before the next
job takes its slot. A refused request (4xx) fails its task; anything that means the gateway cannot
serve (unreachable, 5xx, timeout, a rejected key) stops the run, keeping what finished.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..client import AsyncRehearsalClient
from .episode import Cell, Episode, Sampling, TaskRun
from .results import RunDir


class Suite(Protocol):
    """What the grid needs from a suite (``BfclSuite``, ``WorldsSuite``, ``TauSuite``, …)."""

    name: str
    step_limit: int

    def task_ids(self, patterns: Sequence[str] = ()) -> list[str]: ...

    def start(self, task_id: str) -> TaskRun: ...

    async def play(
        self, client: AsyncRehearsalClient, task: Any, episode: Episode, cell: Cell,
        sampling: Sampling, *, session: str,
    ) -> Episode:  # fmt: skip
        """Work ``task`` through the gateway to its verdict (the suite's own loop)."""
        ...

    def manifest(self) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class Job:
    cell: Cell
    seed: int
    task: str

    @property
    def key(self) -> tuple[str, int, str]:
        return (self.cell.name, self.seed, self.task)


def pending_jobs(
    cells: Sequence[Cell], seeds: Sequence[int], tasks: Sequence[str],
    done: dict[tuple[str, int, str], Episode],
) -> list[Job]:  # fmt: skip
    jobs = [Job(cell, seed, task) for task in tasks for seed in seeds for cell in cells]
    return [job for job in jobs if job.key not in done]


class Grid:
    """Runs jobs against the gateway, one client (API key) per cell."""

    def __init__(
        self,
        suite: Suite,
        clients: dict[str, AsyncRehearsalClient],
        sampling: Sampling,
        run_dir: RunDir,
        *,
        concurrency: int,
    ) -> None:
        self.suite = suite
        self.clients = clients
        self.sampling = sampling
        self.run_dir = run_dir
        self.concurrency = concurrency
        self.run_id = uuid.uuid4().hex[:8]

    async def one(self, job: Job) -> Episode:
        task = self.suite.start(job.task)
        attempt = uuid.uuid4().hex[:12]
        episode = Episode(
            task=job.task, cell=job.cell.name, mode=job.cell.mode, budget=job.cell.budget,
            seed=job.seed, attempt=attempt,
        )  # fmt: skip
        # A fresh session per attempt: a redone episode must not see a killed attempt's memory.
        session = f"eval-{self.run_id}-{job.cell.name}-{job.seed}-{job.task}-{attempt}"
        try:
            await self.suite.play(
                self.clients[job.cell.name], task, episode, job.cell, self.sampling,
                session=session,
            )  # fmt: skip
        finally:
            task.release()
        self.run_dir.append(episode)
        return episode

    async def run(self, jobs: Sequence[Job], progress: Any, bars: dict[str, Any]) -> None:
        """Run every job; the first error that stops the run is raised, the rest cancelled."""
        queue: asyncio.Queue[Job] = asyncio.Queue()
        for job in jobs:
            queue.put_nowait(job)

        async def worker() -> None:
            while not queue.empty():
                job = queue.get_nowait()
                await self.one(job)
                progress.advance(bars[job.cell.name])
                progress.advance(bars["all"])

        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(min(self.concurrency, len(jobs)) or 1):
                    group.create_task(worker())
        except ExceptionGroup as failed:
            raise failed.exceptions[0] from None
