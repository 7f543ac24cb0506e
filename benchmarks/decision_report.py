"""The decisions benchmark's figures: one row per cell, the trust section, and the JSON document.

Every rehearsed configuration is compared with rehearsal off on the same twin, paired by
(seed, world, task): *worse* counts the pairs off solved and it did not, *better* the reverse.
Means are over seeds; a count that needs a field the gateway does not report is ``n/a``.
"""

from __future__ import annotations

from collections import Counter
from statistics import fmean
from typing import Any

from benchmarks.decision_facts import Config, Episode


def _na(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _count(flags: list[bool | None]) -> int | None:
    """How many are true; None when any is unknown (the gateway did not report enough)."""
    return None if None in flags else sum(bool(f) for f in flags)


def _count_ints(values: list[int | None]) -> int | None:
    """The sum, or None when any value is unknown."""
    return None if None in values else sum(v for v in values if v is not None)


def cell(config: Config, episodes: list[Episode], off: list[Episode], seeds: int) -> dict[str, Any]:
    """One configuration's figures (means over seeds) and its pairing against off."""
    turns = [t for e in episodes for t in e.turns]
    rehearsed = [t for t in turns if t.rehearsed] if config.commit else []
    never = _count([t.never_rehearsed for t in rehearsed]) if config.commit else None
    with_valid = _count([t.invalid_with_valid for t in rehearsed]) if config.commit else None
    calls = [t.engine_calls for t in rehearsed]
    avoidable = _count_ints([e.calls.repeats_avoidable for e in episodes])
    avoidable = avoidable if config.commit else None
    by_pair = {e.pair: e.success for e in off}
    worse = sum(by_pair.get(e.pair, False) and not e.success for e in episodes)
    better = sum(e.success and not by_pair.get(e.pair, True) for e in episodes)
    return {
        "fidelity": config.twin.fidelity,
        "skill": config.twin.skill,
        "run": config.name,
        "tasks": len(episodes) // seeds,
        "success": sum(e.success for e in episodes) / seeds,
        "tool_errors": sum(e.tool_errors for e in episodes) / seeds,
        # committed writes (and destructive calls) that failed for real; destructive calls not
        # in the task's plan; repeats of a standing real failure; turns committed by a repair
        "writes_failed": sum(e.calls.writes_failed for e in episodes) / seeds,
        "wrong_destructive": sum(e.calls.wrong_destructive for e in episodes) / seeds,
        "repeats": sum(e.calls.repeats for e in episodes) / seeds,
        # of those, committed while another schema-valid candidate (no repeat) existed
        "repeats_avoidable": None if avoidable is None else avoidable / seeds,
        "repaired": sum(t.commit_path == "repaired" for t in turns) / seeds,
        # ``confirm``: questions the user answered yes (the held call was the task's) and no
        "confirmed": sum(e.confirmed for e in episodes) / seeds,
        "declined": sum(e.declined for e in episodes) / seeds,
        "real_calls": sum(e.real_calls for e in episodes) / seeds,
        "never_rehearsed": None if never is None else never / seeds,
        "schema_invalid": sum(t.schema_invalid for t in turns) / seeds,
        "schema_invalid_with_valid_rehearsed": None if with_valid is None else with_valid / seeds,
        "worse": worse if config.commit else None,
        "better": better if config.commit else None,
        "pairs": len(episodes),
        "engine_calls_per_turn": fmean(c for c in calls if c is not None)
        if calls and None not in calls
        else None,
        "degraded_turns": dict(Counter(t.degraded for t in turns if t.degraded is not None)),
        "failed_requests": sum(e.failed is not None for e in episodes),
        "connection_retries": sum(e.retries for e in episodes),
        # every rehearsed commit by commit_path and the committed tool's trust policy
        "commit_paths": dict(
            Counter(f"{t.commit_path} (trust {t.committed_trust})" for t in rehearsed)
        ),
        # how the gateway says it decided the never-rehearsed commits: commit_path, and the
        # committed tool's trust policy
        "never_rehearsed_paths": dict(
            Counter(
                f"{t.commit_path} (trust {t.committed_trust})"
                for t in rehearsed
                if t.never_rehearsed
            )
        ),
    }


def _row(c: dict[str, Any]) -> str:
    invalid = f"{c['schema_invalid']:.1f}"
    repeats = f"{c['repeats']:.1f}"
    if c["run"] != "off":
        repeats += f" ({_na(c['repeats_avoidable'])})"
    if c["run"] != "off":
        invalid += f" ({_na(c['schema_invalid_with_valid_rehearsed'])})"
    paired = "—" if c["worse"] is None else f"{c['worse']} / {c['better']}"
    return (
        f"| {c['fidelity']:.1f} | {c['skill']:.1f} | {c['run']} | "
        f"{c['success']:.1f}/{c['tasks']} | {c['tool_errors']:.1f} | "
        f"{c['writes_failed']:.1f} | {c['wrong_destructive']:.1f} | {repeats} | "
        f"{'—' if c['run'] == 'off' else _na(c['never_rehearsed'])} | {invalid} | "
        f"{'—' if c['run'] == 'off' else _na(c['repaired'])} | {paired} | "
        f"{'—' if c['run'] == 'off' else _na(c['engine_calls_per_turn'], 2)} |"
    )


def trust_row(config: Config, episodes: list[Episode]) -> dict[str, Any]:
    """When low trust was first reported, and engine calls per turn before and after it."""
    turns = [t for e in episodes for t in e.turns]

    def mean(values: list[int | None]) -> float | None:
        return None if not values or None in values else fmean(v for v in values if v is not None)

    seen_trust = any(t.low_trust is not None for t in turns)
    first_low: dict[str, int] | None = None
    real = 0
    for index, turn in enumerate(turns):
        if turn.low_trust:
            first_low = {"turn": index + 1, "real_results_before": real}
            break
        real += turn.calls
    split = len(turns) if first_low is None else first_low["turn"] - 1
    return {
        "skill": config.twin.skill,
        "run": config.name,
        "turns": len(turns),
        "engine_calls_before_low_trust": mean([t.engine_calls for t in turns[:split]]),
        "engine_calls_after_low_trust": mean([t.engine_calls for t in turns[split:]]),
        "trust_reported": seen_trust,
        "first_low_trust": first_low,
    }


def _trust_line(r: dict[str, Any]) -> str:
    if not r["trust_reported"]:
        low = "n/a"
    elif r["first_low_trust"] is None:
        low = "never"
    else:
        low = (f"turn {r['first_low_trust']['turn']} of {r['turns']} "
               f"(after {r['first_low_trust']['real_results_before']} real results)")  # fmt: skip
    return (
        f"| {r['skill']:.1f} | {r['run']} | {low} | "
        f"{_na(r['engine_calls_before_low_trust'], 2)} | "
        f"{_na(r['engine_calls_after_low_trust'], 2)} |"
    )


def report(
    results: dict[Config, list[Episode]], *, grid_seeds: int, run_s: float
) -> dict[str, Any]:
    """Print the tables; the JSON document with every figure and every episode."""
    offs = {c.twin: eps for c, eps in results.items() if c.commit is None}
    cells = [cell(c, eps, offs[c.twin], grid_seeds) for c, eps in results.items()]
    print(
        "\n| fidelity | skill | run | success | tool errors | writes failed | wrong destructive "
        "| repeats (another candidate existed) | never rehearsed "
        "| schema-invalid (valid rehearsed existed) | repaired "
        "| worse / better | engine calls/turn |"
    )
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in cells:
        print(_row(c))
    asked = [c for c in cells if c["run"].endswith(" confirm")]
    if asked:
        print("\nconfirm: questions the user answered yes (held call in the task's plan) / no")
        print("\n| fidelity | skill | run | yes | no | success |\n|---:|---:|---|---:|---:|---:|")
        for c in asked:
            print(f"| {c['fidelity']:.1f} | {c['skill']:.1f} | {c['run']} | {c['confirmed']:.1f} "
                  f"| {c['declined']:.1f} | {c['success']:.1f}/{c['tasks']} |")  # fmt: skip
    trust = [trust_row(c, eps) for c, eps in results.items() if c.commit and c.twin.fidelity == 0]
    if trust:
        print("\nTrust at fidelity 0.0 (engine calls per rehearsed turn; first low-trust report)")
        print("\n| skill | run | low trust first reported | calls/turn before | calls/turn after |")
        print("|---:|---|---|---:|---:|")
        for r in trust:
            print(_trust_line(r))
    degraded = sum((Counter(c["degraded_turns"]) for c in cells), Counter[str]())
    failed = sum(c["failed_requests"] for c in cells)
    retries = sum(c["connection_retries"] for c in cells)
    reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(degraded.items())) or "none"
    print(f"\n{sum(c['pairs'] for c in cells)} episodes in {run_s:.0f} s; degraded turns: "
          f"{reasons}; failed requests: {failed}; connection retries: {retries}")  # fmt: skip
    faults = [f for eps in results.values() for e in eps for t in e.turns for f in t.faults]
    for fault in faults[:5]:
        print(f"  degraded: {fault}")
    episodes = [
        {"config": c.key, "seed": e.seed, "world": e.world, "task": e.task, "success": e.success,
         "tool_errors": e.tool_errors, "turns": len(e.turns), "failed": e.failed}
        for c, eps in results.items() for e in eps
    ]  # fmt: skip
    return {
        "cells": cells,
        "trust": trust,
        "degraded_turns": dict(degraded),
        "degraded_faults": faults,
        "failed_requests": failed,
        "episodes": episodes,
    }
