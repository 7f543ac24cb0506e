"""The compounding plot: what more imagined trajectories, and deeper ones, buy and cost.

Reads the JSON of ``python -m benchmarks.decisions --compounding --json PATH`` and draws, per
fidelity (one column each), the real tool errors each configuration removed against off (top)
and its paired losses — tasks off solved and it did not (bottom) — against its engine calls per
turn: K = 1, 2, 4, 8 joined at depth 1 and at depth 2, ``auto`` a star; one colour per skill.
It also prints the figures as a Markdown table (for docs/benchmarks.md). Needs matplotlib (the
``plot`` extra).

    python -m benchmarks.decision_plot RUN.json [--out docs/compounding.png]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

_SHAPE = re.compile(r"K=(?P<k>\w+)(?: d=(?P<d>\d+))?")


def shape(run: str) -> tuple[str, int]:
    """(K, depth) of a cell's run name: K=4 at depth 1 when the name says neither."""
    found = _SHAPE.search(run)
    if found is None:
        return "4", 1
    return found["k"], int(found["d"] or 1)


def points(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One point per rehearsed cell: errors removed against the same twin's off, losses, calls."""
    off = {(c["fidelity"], c["skill"]): c for c in cells if c["run"] == "off"}
    found = []
    for c in cells:
        base = off.get((c["fidelity"], c["skill"]))
        if c["run"] == "off" or base is None or c["engine_calls_per_turn"] is None:
            continue
        k, depth = shape(c["run"])
        found.append({
            "fidelity": c["fidelity"], "skill": c["skill"], "k": k, "depth": depth,
            "removed": base["tool_errors"] - c["tool_errors"], "off_errors": base["tool_errors"],
            "worse": c["worse"], "better": c["better"], "calls": c["engine_calls_per_turn"],
        })  # fmt: skip
    return sorted(found, key=lambda p: (-p["fidelity"], p["skill"], p["depth"], _order(p["k"])))


def _order(k: str) -> int:
    return 99 if k == "auto" else int(k)


def table(found: list[dict[str, Any]]) -> str:
    """The points as Markdown: one row per fidelity × skill × shape."""
    lines = [
        "| fidelity | skill | K | depth | errors removed (of off's) | worse / better "
        "| calls/turn |",
        "|---:|---:|---|---:|---:|---:|---:|",
    ]
    for p in found:
        lines.append(
            f"| {p['fidelity']:.1f} | {p['skill']:.1f} | {p['k']} | {p['depth']} | "
            f"{p['removed']:.1f} ({p['off_errors']:.1f}) | {p['worse']} / {p['better']} | "
            f"{p['calls']:.2f} |"
        )
    return "\n".join(lines)


def plot(found: list[dict[str, Any]], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    fidelities = sorted({p["fidelity"] for p in found}, reverse=True)
    skills = sorted({p["skill"] for p in found})
    colours = dict(zip(skills, ("tab:blue", "tab:orange", "tab:green", "tab:red"), strict=False))
    figure, axes = plt.subplots(
        2, len(fidelities), figsize=(3.6 * len(fidelities), 6.4), sharex=True, sharey="row",
        constrained_layout=True, squeeze=False,
    )  # fmt: skip
    for column, fidelity in enumerate(fidelities):
        top, bottom = axes[0][column], axes[1][column]
        for skill in skills:
            mine = [p for p in found if p["fidelity"] == fidelity and p["skill"] == skill]
            for depth, style in ((1, "-"), (2, ":")):
                line = [p for p in mine if p["depth"] == depth and p["k"] != "auto"]
                label = f"skill {skill:.1f}, depth {depth}"
                for axis, key in ((top, "removed"), (bottom, "worse")):
                    axis.plot([p["calls"] for p in line], [p[key] for p in line], style,
                              marker="o", color=colours[skill], label=label)  # fmt: skip
                for p in line:
                    top.annotate(f"K={p['k']}", (p["calls"], p["removed"]), fontsize=6,
                                 textcoords="offset points", xytext=(3, 3))  # fmt: skip
            for p in (p for p in mine if p["k"] == "auto"):
                for axis, key in ((top, "removed"), (bottom, "worse")):
                    axis.plot([p["calls"]], [p[key]], "*", markersize=12, color=colours[skill],
                              label=f"skill {skill:.1f}, auto")  # fmt: skip
        top.set_title(f"fidelity {fidelity:.1f}", fontsize=9)
        bottom.set_xlabel("engine calls per turn")
    axes[0][0].set_ylabel("real tool errors removed vs off")
    axes[1][0].set_ylabel("paired losses (off solved, it did not)")
    axes[0][0].legend(fontsize=6)
    figure.suptitle(title, fontsize=9)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="the decisions benchmark's --json output")
    parser.add_argument("--out", default="docs/compounding.png", help="the PNG to write")
    args = parser.parse_args(argv)
    document = json.loads(Path(args.json).read_text())
    found = points(document["cells"])
    grid = document.get("grid", {})
    seeds = len(grid.get("seeds", ())) or "?"
    title = (f"decisions benchmark, anchored parallel on the twin (SIMULATION), {seeds} seeds, "
             f"{grid.get('tasks_per_world', '?')} tasks per world + tempting ones")  # fmt: skip
    print(table(found))
    print(f"\nwrote {plot(found, Path(args.out), title)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
