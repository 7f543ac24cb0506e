"""Where a learned budget's engine calls go, and the fewest any per-tool K rule could spend.

Each rehearsed turn's calls split into the acting call (one per turn, whatever K), imagination
(the imagined observations in its trace: what ``budget: "auto"`` exists to save) and the rest
(alternatives sampled once the anchor was vetoed, repairs). ``decision_facts.turn_split`` reads
that from a turn's trace; ``tally`` sums it per anchor tool (the first trajectory's first call;
``-`` for a turn that called no tool), beside the real errors of each tool's committed calls.

``oracle`` is a bound on this benchmark's twins: per twin, choosing for every tool one of the
runs off (K = 0: one call a turn, off's errors), K = 1, 2, 4 or 8 (depth 1), the fewest calls
per turn that remove at least as many real errors (of off's) as K = 4 does, found exactly by a
knapsack over the errors removed inside a search on the rate (least ``calls - rate *
turns``). It is additive per tool: it ignores that one tool's K changes the turns that follow,
so it says whether a target is within reach on these twins, not what a rule would get.

``turn_oracle`` is the bound for a rule that knew, turn by turn, where K = 4's spending changed
the commit: it keeps K = 4's calls on the turns whose committed call is not the anchor (any path
but those in ``KEPT_PATHS``) and spends only the acting call on the rest. It counts no turn's
effect on later ones (memory, trust), so it says how far better prediction alone could go.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from benchmarks.decision_facts import NO_TOOL, Config
from rehearsal_gateway.rehearsal.decision import UNIMAGINED

OPTIONS = (0, 1, 2, 4, 8)
# Commit paths under which the committed call is the anchor: the turn's spending changed nothing.
KEPT_PATHS = frozenset({"anchor", "anchor_vetoed", "read", "early_exit"}) | UNIMAGINED


def tally(episodes: Iterable[Any]) -> dict[str, dict[str, int]]:
    """Per anchor tool: turns, engine calls, imagined observations; per tool, real errors.
    A turn without a reported call count counts as one call (rehearsal off)."""
    rows: dict[str, Counter[str]] = {}
    for episode in episodes:
        for turn in episode.turns:
            row = rows.setdefault(turn.anchor or NO_TOOL, Counter())
            row["turns"] += 1
            row["calls"] += turn.engine_calls if turn.engine_calls is not None else 1
            row["imagined"] += turn.imagined or 0
        for tool, errors in episode.errors_by_tool.items():
            rows.setdefault(tool, Counter())["errors"] += errors
    return {tool: dict(row) for tool, row in rows.items()}


def split(rows: Mapping[str, Mapping[str, int]]) -> dict[str, float]:
    """Calls per turn: total, beyond the acting call, and of those imagination."""
    turns = sum(r.get("turns", 0) for r in rows.values()) or 1
    calls = sum(r.get("calls", 0) for r in rows.values())
    imagined = sum(r.get("imagined", 0) for r in rows.values())
    return {
        "per_turn": calls / turns,
        "extra": (calls - turns) / turns,
        "imagination": imagined / turns,
    }


def settings_max(by_option: Mapping[int, Mapping[str, Mapping[str, int]]]) -> float:
    """An upper bound on any choice's calls per turn: the most of any option's tool."""
    return max(
        (r.get("calls", 0) / r["turns"] for rows in by_option.values() for r in rows.values()
         if r.get("turns")),
        default=1.0,
    )  # fmt: skip


def oracle(by_option: Mapping[int, Mapping[str, Mapping[str, int]]]) -> dict[str, Any] | None:
    """The fewest calls per turn of a per-tool choice among ``OPTIONS`` (``by_option``: each
    option's ``tally``; 0 is off) removing at least K = 4's errors; None without them all."""
    if any(k not in by_option for k in OPTIONS):
        return None
    off = by_option[0]
    tools = sorted({t for rows in by_option.values() for t in rows})

    def cost(k: int, tool: str) -> tuple[int, int, int]:
        row = by_option[k].get(tool, {})
        removed = off.get(tool, {}).get("errors", 0) - row.get("errors", 0)
        turns = row.get("turns", 0)
        return removed, (turns if k == 0 else row.get("calls", 0)), turns

    goal = sum(cost(4, t)[0] for t in tools)

    def cheapest(rate: float) -> tuple[float, int, int]:
        """Least ``calls - rate * turns`` of a choice removing ``goal``: (value, calls, turns)."""
        best: dict[int, tuple[float, int, int]] = {0: (0.0, 0, 0)}  # removed -> best
        for tool in tools:
            step: dict[int, tuple[float, int, int]] = {}
            for removed, (_, calls, turns) in best.items():
                for k in OPTIONS:
                    r, c, n = cost(k, tool)
                    found = (c + calls - rate * (n + turns), c + calls, n + turns)
                    if removed + r not in step or found < step[removed + r]:
                        step[removed + r] = found
            best = step
        return min(v for removed, v in best.items() if removed >= goal)

    low, high = 0.0, float(max(settings_max(by_option), 1))
    for _ in range(40):  # the least calls per turn: the rate where the best value reaches 0
        middle = (low + high) / 2
        low, high = (low, middle) if cheapest(middle)[0] <= 0 else (middle, high)
    _, calls, turns = cheapest(high)
    k4 = split(by_option[4])
    return {
        "removed": goal,
        "per_turn": calls / max(turns, 1),
        "extra": (calls - turns) / max(turns, 1),
        "of_k4": calls / max(turns, 1) / k4["per_turn"],
        "extra_of_k4": ((calls - turns) / max(turns, 1)) / k4["extra"] if k4["extra"] else None,
    }


def turn_oracle(episodes: Iterable[Any]) -> dict[str, float]:
    """Calls per turn (all, beyond the acting call) of a rule spending K = 4's calls only on
    the turns of ``episodes`` (K = 4's) whose commit changed, and the share of those turns."""
    turns = changed = calls = 0
    for episode in episodes:
        for turn in episode.turns:
            turns += 1
            spent = turn.engine_calls if turn.engine_calls is not None else 1
            moved = turn.commit_path is not None and turn.commit_path not in KEPT_PATHS
            changed += moved
            calls += spent if moved else 1
    n = turns or 1
    return {"per_turn": calls / n, "extra": (calls - turns) / n, "changed": changed / n}


def spending(results: dict[Config, list[Any]]) -> list[dict[str, Any]]:
    """Per twin: calls per turn of K = 4 and auto (all, beyond the acting call, imagination)
    and the per-tool oracle's; printed, and returned for the JSON."""
    rows = []
    for twin in sorted({c.twin for c in results}, key=lambda t: (-t.fidelity, t.skill)):
        mine = {c: eps for c, eps in results.items() if c.twin == twin and c.depth == 1}
        by_option = {0 if c.commit is None else c.budget: tally(eps) for c, eps in mine.items()}
        options = {k: v for k, v in by_option.items() if k in OPTIONS}
        found = {"fidelity": twin.fidelity, "skill": twin.skill, "oracle": oracle(options),
                 "tallies": {str(k): rows for k, rows in by_option.items()}}  # fmt: skip
        for name in (4, "auto"):
            if name in by_option:
                found[f"K={name}"] = split(by_option[name])
        k4 = [eps for c, eps in mine.items() if c.commit and c.budget == 4]  # as by_option: last
        found["turn_oracle"] = turn_oracle(k4[-1]) if k4 else None
        rows.append(found)
    print(
        "\nCalls per turn (beyond the acting call; of those imagined observations) and the "
        "per-tool oracle removing K = 4's errors; the per-turn bound (turn_oracle): K = 4's "
        "calls on turns whose commit changed, the acting call elsewhere"
    )
    print(
        "\n| fidelity | skill | K = 4 | auto | oracle | oracle / K = 4 (beyond acting) "
        "| per-turn bound / K = 4 (beyond acting; turns changed) |"
    )
    print("|---:|---:|---|---|---|---:|---:|")

    def show(s: dict[str, float] | None) -> str:
        return (
            "n/a"
            if s is None
            else f"{s['per_turn']:.2f} ({s['extra']:.2f}; "
            + (f"{s['imagination']:.2f})" if "imagination" in s else f"{s['removed']} removed)")
        )

    for r in rows:
        o = r["oracle"]
        ratio = "n/a" if o is None else f"{o['of_k4']:.0%} ({_pct(o['extra_of_k4'])})"
        print(f"| {r['fidelity']:.1f} | {r['skill']:.1f} | {show(r.get('K=4'))} "
              f"| {show(r.get('K=auto'))} | {show(o)} | {ratio} "
              f"| {_bound(r.get('turn_oracle'), r.get('K=4'))} |")  # fmt: skip
    return rows


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _bound(bound: dict[str, float] | None, k4: dict[str, float] | None) -> str:
    if bound is None or k4 is None:
        return "n/a"
    extra = bound["extra"] / k4["extra"] if k4["extra"] else None
    return f"{bound['per_turn'] / k4['per_turn']:.0%} ({_pct(extra)}; {bound['changed']:.0%})"
