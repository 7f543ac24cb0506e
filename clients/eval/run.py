"""One eval run from the checked arguments to the printed tables and the files in ``--out``.

It opens the run directory (refusing one that holds another experiment), says how much of the
grid is already done, runs the rest with a progress bar per cell, and — also after a partial
run, so that what finished is visible — prints the tables and writes summary.json, summary.csv
and plot.png (when matplotlib is installed; `--plot` insists on it). A run stopped by the gateway
exits 1 and says how to continue.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..client import AsyncRehearsalClient, GatewayError
from . import UsageError, report
from .episode import Cell, Episode, Sampling
from .grid import Grid, Suite, pending_jobs
from .results import RunDir, RunMismatch
from .summary import summarize, to_csv

TIMEOUT_S = 600.0  # one request: a rehearsal on a slow engine can take minutes, never forever


@dataclass
class GridRun:
    """The grid of one invocation and where it goes."""

    suite: Suite
    cells: list[Cell]
    seeds: list[int]
    tasks: list[str]
    out: Path
    base: str
    api_keys: dict[str, str | None]
    manifest: dict[str, Any]
    simulation: bool

    @property
    def title(self) -> str:
        what = f"{self.suite.name}, {len(self.tasks)} tasks × {len(self.seeds)} seed(s)"
        return f"{what} — SIMULATION (engine twin)" if self.simulation else what

    def run(self, console: Any, *, concurrency: int, plot: bool) -> int:
        run_dir = RunDir(self.out)
        try:
            done = run_dir.open(self.manifest)
        except RunMismatch as exc:
            raise UsageError(str(exc)) from None
        jobs = pending_jobs(self.cells, self.seeds, self.tasks, done)
        total = len(self.cells) * len(self.seeds) * len(self.tasks)
        if total - len(jobs):
            console.print(f"resuming {self.out}: {total - len(jobs)} of {total} episodes done")
        sampling = Sampling(
            model=str(self.manifest["sampling"]["model"]),
            temperature=float(self.manifest["sampling"]["temperature"]),
            top_p=float(self.manifest["sampling"]["top_p"]),
            commit=self.manifest["sampling"]["commit"],
            depth=self.manifest["sampling"]["depth"],
        )
        failure: str | None = None
        try:
            asyncio.run(self._run_jobs(jobs, run_dir, sampling, concurrency, console))
        except GatewayError as exc:
            failure = f"{type(exc).__name__}: {exc.message}"
        except asyncio.CancelledError:
            failure = "interrupted (SIGTERM)"
        episodes = run_dir.open(self.manifest)  # what finished before and in this run
        rows = summarize(self.cells, episodes, self.seeds, self.tasks)
        outcomes, cost = report.tables(rows, self.title)
        console.print(outcomes)
        console.print(cost)
        if self.simulation:
            console.print("[bold yellow]These figures come from the engine twin: a simulation."
                          "[/bold yellow]")  # fmt: skip
        document = {
            "manifest": self.manifest,
            "simulation": self.simulation,
            "complete": failure is None,
            "seeds": self.seeds,
            "tasks": self.tasks,
            "cells": [row.to_dict() for row in rows],
        }
        run_dir.write("summary.json", json.dumps(document, indent=2) + "\n")
        run_dir.write("summary.csv", to_csv(rows))
        self.report(console, episodes, run_dir)
        if plot or report.can_plot():
            plot_path = report.plot(rows, self.out / "plot.png", self.title)
            console.print(f"plot: {plot_path}")
        if failure is not None:
            console.print(
                f"[red]the run stopped:[/red] {failure}. Finished episodes are kept in "
                f"{self.out}: run the same command with --out {self.out} to continue."
            )
            return 1
        return 1 if report_refusals(console, episodes.values()) else 0

    def report(self, console: Any, episodes: dict[tuple[str, int, str], Episode],
               run_dir: RunDir) -> None:  # fmt: skip
        """A suite's own figures beside the tables (none here; the paper suite's table)."""

    async def _run_jobs(
        self, jobs: Sequence[Any], run_dir: RunDir, sampling: Sampling, concurrency: int,
        console: Any,
    ) -> None:  # fmt: skip
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        clients = {
            cell.name: AsyncRehearsalClient(self.base + "/v1", self.api_keys[cell.name], TIMEOUT_S)
            for cell in self.cells
        }
        # SIGTERM cancels the run: an exception raised from a signal handler at an arbitrary
        # point could leave the progress display's lock held and hang the exit.
        loop = asyncio.get_running_loop()
        main = asyncio.current_task()
        assert main is not None
        loop.add_signal_handler(signal.SIGTERM, main.cancel)
        columns = (BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        per_cell = len(self.seeds) * len(self.tasks)
        try:
            with Progress("{task.description}", *columns, console=console) as progress:
                bars = {"all": progress.add_task(f"{'all':>14}", total=per_cell * len(self.cells))}
                progress.advance(bars["all"], per_cell * len(self.cells) - len(jobs))
                for cell in self.cells:
                    left = sum(job.cell == cell for job in jobs)
                    bars[cell.name] = progress.add_task(f"{cell.name:>14}", total=per_cell)
                    progress.advance(bars[cell.name], per_cell - left)
                grid = Grid(self.suite, clients, sampling, run_dir, concurrency=concurrency)
                await grid.run(jobs, progress, bars)
        finally:
            loop.remove_signal_handler(signal.SIGTERM)
            for client in clients.values():
                await client.close()


def report_refusals(console: Any, episodes: Iterable[Any]) -> bool:
    """Print, per cell, how many episodes the gateway refused and the first reason; any?"""
    refused: dict[str, list[str]] = {}
    for episode in episodes:
        if episode.request_error is not None:
            refused.setdefault(episode.cell, []).append(episode.request_error)
    for cell, reasons in sorted(refused.items()):
        console.print(
            f"[red]refused:[/red] {cell}: the gateway refused {len(reasons)} episode(s): "
            f"{reasons[0]}",
            highlight=False,
            soft_wrap=True,
        )
    return bool(refused)
