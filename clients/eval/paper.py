"""The ``paper`` suite: the benchmarks of EnvACE's headline table, scored as the paper scores them.

EnvACE reports one figure per policy and test-time mode: the average of BFCL multi-turn and
τ²-Bench — 36.7 without test-time scaling, 40.9 with parallel rehearsal, 38.5 with sequential,
and for the untrained base policy +0.1 and −1.8 against its own no-scaling figure. This suite
runs BFCL v4's ``multi_turn_base`` and τ²-Bench's airline, retail and telecom ``base`` tasks in
one grid (each through its own suite, ``bfcl.py`` and ``tau.py``) and computes, per cell:

- **BFCL-MT**: the share of BFCL tasks (× seeds) BFCL's checker passed;
- **τ²**: the unweighted mean of the three domains' pass^1 (τ²'s leaderboard figure);
- **overall**: the unweighted mean of BFCL-MT and τ², with a 95% normal interval from the
  components' binomial variances (Agresti–Coull adjusted, so that few tasks at 0% or 100% do not
  read as certainty), and paired wins/losses against off over every (task, seed).

The paper's own figures are printed beside them as reference rows, labelled as quoted: they were
not measured here. ``--limit N`` takes the first N tasks of each benchmark.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .bfcl import BfclSuite
from .episode import Cell, Episode
from .results import RunDir
from .run import GridRun
from .summary import Z95, sign_test
from .tau import DOMAINS, TauSuite

BFCL = "bfcl-multi-turn"
# The paper's figures (quoted, never measured here): overall, and the gain over no scaling.
QUOTED = (
    {"row": "EnvACE-Qwen3-8B off", "mode": "off", "overall": 36.7},
    {"row": "EnvACE-Qwen3-8B parallel", "mode": "parallel", "overall": 40.9, "delta": 4.2},
    {"row": "EnvACE-Qwen3-8B sequential", "mode": "sequential", "overall": 38.5, "delta": 2.4},
    {"row": "Qwen3-8B base parallel", "mode": "parallel", "delta": 0.1},
    {"row": "Qwen3-8B base sequential", "mode": "sequential", "delta": -1.8},
)  # fmt: skip


class PaperSuite:
    """BFCL multi-turn base and the three τ² domains, as one grid."""

    name = "paper"

    def __init__(self, workdir: Path, *, user: Any, limit: int | None = None) -> None:
        self.components: dict[str, Any] = {BFCL: BfclSuite(workdir / "bfcl", "base")}
        for domain in DOMAINS:
            self.components[f"tau2-{domain}"] = TauSuite(domain, user=user)
        self.limit = limit
        self.step_limit = max(suite.step_limit for suite in self.components.values())
        self.owner = {
            task: name for name, suite in self.components.items() for task in suite.task_ids()
        }

    def task_ids(self, patterns: Sequence[str] = ()) -> list[str]:
        """Each benchmark's tasks in its order, the first ``limit`` of each."""
        return [
            task
            for suite in self.components.values()
            for task in suite.task_ids(patterns)[: self.limit]
        ]

    def start(self, task_id: str) -> Any:
        return self.components[self.owner[task_id]].start(task_id)

    async def play(self, client: Any, task: Any, episode: Episode, cell: Cell, sampling: Any, *,
                   session: str) -> Episode:  # fmt: skip
        suite = self.components[self.owner[task.id]]
        played: Episode = await suite.play(client, task, episode, cell, sampling, session=session)
        return played

    def manifest(self) -> dict[str, Any]:
        return {
            "suite": self.name,
            "overall": "mean(BFCL-MT, mean of the τ² domains' pass^1)",
            "components": {name: suite.manifest() for name, suite in self.components.items()},
        }


@dataclass
class PaperRow:
    """One cell's figures the paper's way (rates in percent)."""

    cell: str
    mode: str
    budget: int
    components: dict[str, float | None] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    tau2: float | None = None
    overall: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    delta: float | None = None
    wins: int = 0
    losses: int = 0
    sign_test_p: float | None = None


def paper_rows(
    suite: PaperSuite, cells: Sequence[Cell], episodes: dict[tuple[str, int, str], Episode],
    seeds: Sequence[int], tasks: Sequence[str],
) -> list[PaperRow]:  # fmt: skip
    """The paper's figures per cell, over exactly the requested seeds × tasks."""
    wanted = {(seed, task) for seed in seeds for task in tasks}
    mine = {cell.name: [e for e in episodes.values() if e.cell == cell.name
                        and (e.seed, e.task) in wanted] for cell in cells}  # fmt: skip
    off = {(e.seed, e.task): e.success for e in mine.get("off", [])}
    rows = []
    for cell in cells:
        row = PaperRow(cell.name, cell.mode, cell.budget)
        variances: dict[str, float] = {}
        for name in suite.components:
            done = [e for e in mine[cell.name] if suite.owner[e.task] == name]
            row.counts[name] = len(done)
            if done:
                passed = sum(e.success for e in done)
                row.components[name] = 100 * passed / len(done)
                # Agresti–Coull: the binomial variance of (x + 2) / (n + 4), so that a benchmark
                # at 0% or 100% of a few tasks still widens the interval.
                adjusted = (passed + 2) / (len(done) + 4)
                variances[name] = adjusted * (1 - adjusted) / (len(done) + 4)
            else:
                row.components[name] = None
        domains = [n for n in suite.components if n != BFCL and row.components[n] is not None]
        bfcl = row.components[BFCL]
        if domains:
            row.tau2 = sum(row.components[n] or 0.0 for n in domains) / len(domains)
        if bfcl is not None and row.tau2 is not None:
            row.overall = (bfcl + row.tau2) / 2
            variance = variances[BFCL] / 4 + sum(variances[n] for n in domains) / (
                4 * len(domains) ** 2
            )
            half = 100 * Z95 * math.sqrt(variance)
            row.ci_low, row.ci_high = max(0.0, row.overall - half), min(100.0, row.overall + half)
        if cell.mode != "off" and off:
            pairs = [(e.success, off[(e.seed, e.task)]) for e in mine[cell.name]
                     if (e.seed, e.task) in off]  # fmt: skip
            row.wins = sum(m and not o for m, o in pairs)
            row.losses = sum(o and not m for m, o in pairs)
            row.sign_test_p = sign_test(row.wins, row.losses)
        rows.append(row)
    base = next((r.overall for r in rows if r.mode == "off"), None)
    for row in rows:
        if row.mode != "off" and base is not None and row.overall is not None:
            row.delta = row.overall - base
    return rows


def _pct(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.1f}" if signed else f"{value:.1f}"


def paper_table(suite: PaperSuite, rows: Sequence[PaperRow], title: str) -> Any:
    """The measured rows, then the paper's quoted rows, one table."""
    from rich.table import Table

    table = Table(
        title=f"The paper's table — {title}",
        caption="quoted rows: the paper's own figures, printed for reference, not measured here",
    )
    names = list(suite.components)
    for column in ("row", *(n.removeprefix("tau2-") for n in names), "τ²", "overall (95% CI)",
                   "Δ vs off", "vs off +win −loss"):  # fmt: skip
        table.add_column(column, justify="right")
    for row in rows:
        interval = "" if row.ci_low is None else f" ({row.ci_low:.1f}–{row.ci_high:.1f})"
        paired = "-" if row.mode == "off" else (
            f"+{row.wins} −{row.losses}"
            + ("" if row.sign_test_p is None else f" (p {row.sign_test_p:.2f})")
        )  # fmt: skip
        table.add_row(
            f"measured: {row.cell}",
            *(_pct(row.components[n]) for n in names),
            _pct(row.tau2),
            _pct(row.overall) + interval,
            _pct(row.delta, signed=True),
            paired,
        )
    for quoted in QUOTED:
        table.add_row(
            f"[dim]quoted: {quoted['row']}[/dim]",
            *("-" for _ in names),
            "-",
            _pct(quoted.get("overall")),  # type: ignore[arg-type]
            _pct(quoted.get("delta"), signed=True),  # type: ignore[arg-type]
            "-",
        )
    return table


def paper_document(rows: Sequence[PaperRow]) -> str:
    document = {
        "overall": "mean(BFCL-MT, mean of the τ² domains' pass^1), in percent",
        "measured": [asdict(row) for row in rows],
        "quoted_from_the_paper": list(QUOTED),
    }
    return json.dumps(document, indent=2) + "\n"


class PaperRun(GridRun):
    """The grid run of the paper suite: its tables, then the paper's table and ``paper.json``."""

    def report(self, console: Any, episodes: dict[tuple[str, int, str], Episode],
               run_dir: RunDir) -> None:  # fmt: skip
        assert isinstance(self.suite, PaperSuite)
        rows = paper_rows(self.suite, self.cells, episodes, self.seeds, self.tasks)
        console.print(paper_table(self.suite, rows, self.title))
        run_dir.write("paper.json", paper_document(rows))
