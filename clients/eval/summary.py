"""Per-cell figures from episodes: success with its interval, paired results against off, cost.

- **success**: tasks (× seeds) the suite's checker passed, with a 95% Wilson score interval
  (it stays inside [0, 1] and is honest at small n, unlike the normal approximation);
- **paired against off**: on the same (task, seed), *wins* are passes where off failed, *losses*
  the reverse; ``p`` is the exact two-sided sign test on those discordant pairs (McNemar's exact
  test), so a difference carried by three tasks is not read as a finding;
- **fidelity**: first *outcome agreement* — did imagination predict error vs success of the call
  that was then really made — then the gateway's *structural* similarity of imagined to real;
- **pass^k** (τ²-Bench's reliability figure): per task, the chance that k of its n runs (seeds)
  drawn without replacement all pass, ``C(c, k) / C(n, k)`` for c passes, averaged over tasks;
  pass^1 is the success rate;
- **cost per turn** (one turn = one request to the gateway): engine calls, tokens (prompt,
  cached, completion, as ``usage`` bills them: acting + rehearsal + commit) and latency p50/p90.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .episode import TOKEN_KINDS, Cell, Episode

Z95 = 1.959963984540054


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval for a binomial proportion (``(0, 1)`` when n is 0)."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # At 0 or n the bound is exactly 0 or 1; the arithmetic leaves a rounding error there.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return (low, high)


def sign_test(wins: int, losses: int) -> float | None:
    """Exact two-sided p of ``wins`` against ``losses`` under no difference (None if no pairs)."""
    n = wins + losses
    if n == 0:
        return None
    tail = sum(math.comb(n, k) for k in range(min(wins, losses) + 1)) / float(2**n)
    return min(1.0, 2 * tail)


def pass_hat_k(episodes: Sequence[Episode]) -> dict[str, float]:
    """pass^k for k = 1 … the fewest runs any task had (τ²'s formula, arXiv 2406.12045)."""
    runs: dict[str, list[bool]] = {}
    for episode in episodes:
        runs.setdefault(episode.task, []).append(episode.success)
    if not runs:
        return {}
    most = min(len(results) for results in runs.values())
    return {
        str(k): round(
            statistics.fmean(math.comb(sum(r), k) / math.comb(len(r), k) for r in runs.values()),
            4,
        )
        for k in range(1, most + 1)
    }


def percentile(values: Sequence[float], q: int) -> float | None:
    """The ``q``-th percentile, linear between closest ranks (None for no values)."""
    if not values:
        return None
    if len(values) == 1:
        return float(values[0])
    return float(statistics.quantiles(values, n=100, method="inclusive")[q - 1])


@dataclass
class CellSummary:
    """One row of the tables."""

    cell: str
    mode: str
    budget: int
    episodes: int = 0
    successes: int = 0
    success_rate: float = 0.0
    ci_low: float = 0.0
    ci_high: float = 1.0
    paired: int = 0
    wins: int = 0
    losses: int = 0
    sign_test_p: float | None = None
    request_errors: int = 0
    force_quit: int = 0
    calls: int = 0
    tool_errors: int = 0
    vetoes: dict[str, int] = field(default_factory=dict)
    outcome_agreement: float | None = None
    outcome_checked: int = 0
    structural_fidelity: float | None = None
    structural_checked: int = 0
    turns: int = 0
    engine_calls_per_turn: float = 0.0
    tokens_per_turn: dict[str, float] = field(default_factory=dict)
    latency_p50_ms: float | None = None
    latency_p90_ms: float | None = None
    degraded: dict[str, int] = field(default_factory=dict)
    pass_hat_k: dict[str, float] = field(default_factory=dict)

    @property
    def veto_total(self) -> int:
        return sum(self.vetoes.values())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def csv_row(self) -> dict[str, Any]:
        row = {k: v for k, v in asdict(self).items() if not isinstance(v, dict)}
        row["vetoes"] = self.veto_total
        row["vetoes_by_kind"] = ";".join(f"{k}:{v}" for k, v in sorted(self.vetoes.items()))
        for kind in TOKEN_KINDS:
            row[f"{kind}_tokens_per_turn"] = self.tokens_per_turn.get(kind, 0.0)
        row["degraded"] = ";".join(f"{k}:{v}" for k, v in sorted(self.degraded.items()))
        for k, value in self.pass_hat_k.items():
            row[f"pass^{k}"] = value
        return row


def summarize_cell(cell: Cell, episodes: list[Episode], baseline: list[Episode]) -> CellSummary:
    """The row for ``cell`` from its episodes, paired with ``baseline`` (off) on (task, seed)."""
    row = CellSummary(cell=cell.name, mode=cell.mode, budget=cell.budget)
    row.episodes = len(episodes)
    row.successes = sum(e.success for e in episodes)
    row.success_rate = row.successes / row.episodes if row.episodes else 0.0
    row.ci_low, row.ci_high = wilson(row.successes, row.episodes)
    row.pass_hat_k = pass_hat_k(episodes)
    if cell.mode != "off" and baseline:
        off = {(e.seed, e.task): e.success for e in baseline}
        pairs = [(e.success, off[(e.seed, e.task)]) for e in episodes if (e.seed, e.task) in off]
        row.paired = len(pairs)
        row.wins = sum(mine and not theirs for mine, theirs in pairs)
        row.losses = sum(theirs and not mine for mine, theirs in pairs)
        row.sign_test_p = sign_test(row.wins, row.losses)
    vetoes: Counter[str] = Counter()
    degraded: Counter[str] = Counter()
    tokens: Counter[str] = Counter()
    latencies: list[float] = []
    structural: list[float] = []
    agree = 0
    for e in episodes:
        row.request_errors += e.request_error is not None
        row.force_quit += e.force_quit
        row.calls += e.calls
        row.tool_errors += e.tool_errors
        row.turns += e.requests
        row.engine_calls_per_turn += e.engine_calls
        vetoes.update(e.vetoes)
        degraded.update(e.degraded)
        tokens.update(e.tokens)
        latencies.extend(e.latency_ms)
        structural.extend(e.structural)
        agree += e.outcome_agree
        row.outcome_checked += e.outcome_checked
    turns = max(row.turns, 1)
    row.engine_calls_per_turn = round(row.engine_calls_per_turn / turns, 3)
    row.tokens_per_turn = {kind: round(tokens[kind] / turns, 1) for kind in TOKEN_KINDS}
    row.vetoes, row.degraded = dict(vetoes), dict(degraded)
    if row.outcome_checked:
        row.outcome_agreement = round(agree / row.outcome_checked, 4)
    if structural:
        row.structural_fidelity = round(statistics.fmean(structural), 4)
        row.structural_checked = len(structural)
    p50, p90 = percentile(latencies, 50), percentile(latencies, 90)
    row.latency_p50_ms = None if p50 is None else round(p50, 1)
    row.latency_p90_ms = None if p90 is None else round(p90, 1)
    return row


def summarize(
    cells: Sequence[Cell], episodes: dict[tuple[str, int, str], Episode],
    seeds: Sequence[int], tasks: Sequence[str],
) -> list[CellSummary]:  # fmt: skip
    """One row per cell over exactly the requested seeds × tasks (a resumed log may hold more)."""
    wanted = {(seed, task) for seed in seeds for task in tasks}
    by_cell: dict[str, list[Episode]] = {cell.name: [] for cell in cells}
    for episode in episodes.values():
        if episode.cell in by_cell and (episode.seed, episode.task) in wanted:
            by_cell[episode.cell].append(episode)
    baseline = by_cell.get("off", [])
    return [summarize_cell(cell, by_cell[cell.name], baseline) for cell in cells]


def to_csv(rows: Sequence[CellSummary]) -> str:
    buffer = io.StringIO()
    records = [row.csv_row() for row in rows]
    # A partial run can leave cells with fewer runs per task, so fewer pass^k columns.
    fieldnames = list(dict.fromkeys(key for record in records for key in record)) or ["cell"]
    writer = csv.DictWriter(buffer, fieldnames=fieldnames, restval="")
    writer.writeheader()
    writer.writerows(records)
    return buffer.getvalue()
