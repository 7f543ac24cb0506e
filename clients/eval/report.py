"""How a run's figures are shown: two rich tables on the terminal and, with ``--plot``, a PNG.

The outcome table is what the suite's checker said (success, its interval, paired wins/losses
against off, real tool errors, vetoes by kind, fidelity); the cost table is what each turn cost
(engine calls, tokens, latency). The plot needs matplotlib (``pip install
'rehearsal-gateway[plot]'``), imported only when a plot is asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import vetoes
from .summary import CellSummary


def _number(value: float | None, fmt: str = "{:.3f}") -> str:
    return "-" if value is None else fmt.format(value)


def _vetoes(row: CellSummary) -> str:
    return vetoes.render(row.vetoes)


def _fidelity(row: CellSummary) -> str:
    if not row.outcome_checked:
        return "-"
    outcome = _number(row.outcome_agreement, "{:.2f}")
    return f"{outcome}/{_number(row.structural_fidelity)} (n {row.outcome_checked})"


def _paired(row: CellSummary) -> str:
    if row.mode == "off" or row.paired == 0:
        return "-"
    return f"+{row.wins} −{row.losses} (p {_number(row.sign_test_p, '{:.2f}')})"


def tables(rows: Sequence[CellSummary], title: str) -> tuple[Any, Any]:
    """The outcome table and the cost table."""
    from rich.table import Table

    outcomes = Table(title=f"Outcomes — {title}")
    for column in ("cell", "success", "95% CI", "vs off +win −loss", "tool errors",
                   "vetoes", "fidelity outcome/struct", "refused"):  # fmt: skip
        outcomes.add_column(column, justify="right")
    cost = Table(title="Cost per turn (one turn = one request to the gateway)")
    for column in ("cell", "turns", "engine calls", "prompt tok", "cached tok",
                   "completion tok", "p50 ms", "p90 ms", "degraded"):  # fmt: skip
        cost.add_column(column, justify="right")
    for row in rows:
        outcomes.add_row(
            row.cell,
            f"{row.successes}/{row.episodes} {row.success_rate:.0%}",
            f"{row.ci_low:.0%}–{row.ci_high:.0%}",
            _paired(row),
            f"{row.tool_errors}/{row.calls}",
            _vetoes(row),
            _fidelity(row),
            str(row.request_errors),
        )
        tokens = row.tokens_per_turn
        cost.add_row(
            row.cell,
            str(row.turns),
            f"{row.engine_calls_per_turn:.2f}",
            f"{tokens.get('prompt', 0):.0f}",
            f"{tokens.get('cached', 0):.0f}",
            f"{tokens.get('completion', 0):.0f}",
            _number(row.latency_p50_ms, "{:.0f}"),
            _number(row.latency_p90_ms, "{:.0f}"),
            ", ".join(f"{k} {v}" for k, v in sorted(row.degraded.items())) or "-",
        )
    return outcomes, cost


def plot(rows: Sequence[CellSummary], path: Path, title: str) -> Path:
    """Success (with its interval) and tokens per turn against budget, one line per mode."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    figure, (success_ax, cost_ax) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    off = next((row for row in rows if row.mode == "off"), None)
    for mode in sorted({row.mode for row in rows if row.mode != "off"}):
        mine = sorted((row for row in rows if row.mode == mode), key=lambda row: row.budget)
        budgets = [row.budget for row in mine]
        rates = [row.success_rate for row in mine]
        low = [max(0.0, row.success_rate - row.ci_low) for row in mine]
        high = [max(0.0, row.ci_high - row.success_rate) for row in mine]
        success_ax.errorbar(budgets, rates, yerr=[low, high], marker="o", capsize=4, label=mode)
        tokens = [sum(row.tokens_per_turn.values()) - row.tokens_per_turn.get("cached", 0)
                  for row in mine]  # fmt: skip
        cost_ax.plot(budgets, tokens, marker="o", label=mode)
    if off is not None:
        success_ax.axhline(off.success_rate, linestyle="--", color="grey", label="off")
        success_ax.axhspan(off.ci_low, off.ci_high, color="grey", alpha=0.15)
        off_tokens = sum(off.tokens_per_turn.values()) - off.tokens_per_turn.get("cached", 0)
        cost_ax.axhline(off_tokens, linestyle="--", color="grey", label="off")
    success_ax.set(xlabel="budget K", ylabel="success rate (95% CI)", ylim=(0, 1))
    cost_ax.set(xlabel="budget K", ylabel="uncached prompt + completion tokens per turn")
    success_ax.legend()
    cost_ax.legend()
    figure.suptitle(title, fontsize=9)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
