"""How a run's figures are shown: two rich tables on the terminal and a PNG.

The outcome table is what the suite's checker said (success, its interval, paired wins/losses
against off, pass^k when tasks ran more than once, real tool errors, vetoes by kind, fidelity);
the cost table is what each turn cost (engine calls, tokens, latency). The plot needs matplotlib
(``pip install 'rehearsal-gateway[plot]'``), imported only when a plot is drawn.
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


def _pass_hat_k(row: CellSummary) -> str:
    if len(row.pass_hat_k) < 2:
        return "-"
    return " ".join(f"{float(v):.2f}" for v in row.pass_hat_k.values())


def can_plot() -> bool:
    """Whether matplotlib is installed (the ``plot`` extra)."""
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def tables(rows: Sequence[CellSummary], title: str) -> tuple[Any, Any]:
    """The outcome table and the cost table."""
    from rich.table import Table

    outcomes = Table(title=f"Outcomes — {title}")
    trials = any(len(row.pass_hat_k) > 1 for row in rows)
    for column in ("cell", "success", "95% CI", "vs off +win −loss",
                   *(("pass^1…k",) if trials else ()), "tool errors",
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
            *((_pass_hat_k(row),) if trials else ()),
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
    """Three panels: success against budget per mode, success against engine calls per turn
    (what a point of success costs), and uncached tokens per turn against budget."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    figure, (success_ax, calls_ax, cost_ax) = plt.subplots(
        1, 3, figsize=(15, 4), constrained_layout=True
    )
    off = next((row for row in rows if row.mode == "off"), None)
    for mode in sorted({row.mode for row in rows if row.mode != "off"}):
        mine = sorted((row for row in rows if row.mode == mode), key=lambda row: row.budget)
        budgets = [row.budget for row in mine]
        rates = [row.success_rate for row in mine]
        errors = [[max(0.0, r.success_rate - r.ci_low) for r in mine],
                  [max(0.0, r.ci_high - r.success_rate) for r in mine]]  # fmt: skip
        success_ax.errorbar(budgets, rates, yerr=errors, marker="o", capsize=4, label=mode)
        calls = [row.engine_calls_per_turn for row in mine]
        calls_ax.errorbar(calls, rates, yerr=errors, marker="o", capsize=4, label=mode)
        for row in mine:
            calls_ax.annotate(f"K={row.budget}", (row.engine_calls_per_turn, row.success_rate),
                              textcoords="offset points", xytext=(4, 4), fontsize=7)  # fmt: skip
        cost_ax.plot(budgets, [_uncached(row) for row in mine], marker="o", label=mode)
    if off is not None:
        success_ax.axhline(off.success_rate, linestyle="--", color="grey", label="off")
        success_ax.axhspan(off.ci_low, off.ci_high, color="grey", alpha=0.15)
        off_errors = [[off.success_rate - off.ci_low], [off.ci_high - off.success_rate]]
        calls_ax.errorbar([off.engine_calls_per_turn], [off.success_rate], yerr=off_errors,
                          marker="s", color="grey", capsize=4, label="off")  # fmt: skip
        cost_ax.axhline(_uncached(off), linestyle="--", color="grey", label="off")
    success_ax.set(xlabel="budget K", ylabel="success rate (95% CI)", ylim=(0, 1))
    calls_ax.set(xlabel="engine calls per turn", ylabel="success rate (95% CI)", ylim=(0, 1))
    cost_ax.set(xlabel="budget K", ylabel="uncached prompt + completion tokens per turn")
    for axis in (success_ax, calls_ax, cost_ax):
        axis.legend()
    for axis in (success_ax, cost_ax):
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    figure.suptitle(title, fontsize=9)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def _uncached(row: CellSummary) -> float:
    return sum(row.tokens_per_turn.values()) - 2 * row.tokens_per_turn.get("cached", 0)
