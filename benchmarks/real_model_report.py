"""The real-model benchmark's records and report: what a run is made of (``Config``, ``Episode``,
``TurnFigures``), one row per configuration (outcomes, costs per turn, parse shares, pairs against
off) and the table, parse shares and samples it prints (``benchmarks/real_model.py`` runs the
episodes and imports this module, never the other way).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from benchmarks.decision_facts import Outcome
from rehearsal_gateway.clients.client import Rehearsal
from rehearsal_gateway.rehearsal.parsing import PARSE_CLASSES

# Far beyond any turn here: at ~3 tokens/s a K = 4 turn takes minutes, and a deadline would turn
# outcomes into deadline hits.
DEADLINE_MS = 900_000


@dataclass(frozen=True)
class Config:
    """One tenant's run: off, or a rehearsed mode at a budget."""

    mode: str
    budget: int = 0

    @property
    def name(self) -> str:
        return "off" if self.mode == "off" else f"{self.mode} K={self.budget}"

    @property
    def key(self) -> str:
        return f"real-{self.mode}-{self.budget}"

    def rehearsal(self) -> Rehearsal:
        if self.mode == "off":
            return Rehearsal(mode="off")
        return Rehearsal(
            mode=self.mode,  # type: ignore[arg-type]
            budget=self.budget,
            deadline_ms=DEADLINE_MS,
            trace=True,
        )


CONFIGS = (Config("off"), Config("parallel", 2), Config("parallel", 4), Config("sequential", 2))


@dataclass
class TurnFigures:
    """What one response shows: its cost and, when rehearsed, what imagination wrote."""

    wall_s: float
    engine_calls: int
    prompt: int
    cached: int
    completion: int
    parse: Counter[str] = field(default_factory=Counter)
    agreements: list[bool] = field(default_factory=list)
    low_trust: bool = False
    samples: dict[str, str] = field(default_factory=dict)  # parse class -> one raw answer


@dataclass
class Episode(Outcome):
    """One task of one configuration: the agent's outcome and each turn's figures."""

    turns: list[TurnFigures] = field(default_factory=list)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def summarise(config: Config, episodes: list[Episode], off: list[Episode]) -> dict[str, Any]:
    """One configuration's row: outcomes, costs per turn, parse shares, pairs against off."""
    turns = [t for e in episodes for t in e.turns]
    parse: Counter[str] = Counter()
    for t in turns:
        parse.update(t.parse)
    imagined = sum(parse.values())
    agreements = [a for t in turns for a in t.agreements]
    by_pair = {e.pair: e for e in off}
    worse = better = errors_worse = errors_better = 0
    for e in episodes:
        base = by_pair.get(e.pair)
        if base is None or config.mode == "off":
            continue
        worse += base.success and not e.success
        better += e.success and not base.success
        errors_worse += e.tool_errors > base.tool_errors
        errors_better += e.tool_errors < base.tool_errors
    low = next((i + 1 for i, t in enumerate(turns) if t.low_trust), None)
    samples: dict[str, str] = {}
    for t in turns:
        for name, text in t.samples.items():
            samples.setdefault(name, text)
    return {
        "config": config.name,
        "episodes": len(episodes),
        "success": sum(e.success for e in episodes),
        "tool_errors": sum(e.tool_errors for e in episodes),
        "real_calls": sum(e.real_calls for e in episodes),
        "failed_requests": sum(e.failed is not None for e in episodes),
        "failures": [e.failed for e in episodes if e.failed],
        "turns": len(turns),
        "outcome_agreement": [sum(agreements), len(agreements)],
        "parse": {name: parse[name] for name in PARSE_CLASSES if parse[name]},
        "imagined": imagined,
        "engine_calls_per_turn": _mean([t.engine_calls for t in turns]),
        "prompt_per_turn": _mean([t.prompt for t in turns]),
        "cached_per_turn": _mean([t.cached for t in turns]),
        "completion_per_turn": _mean([t.completion for t in turns]),
        "wall_s_per_turn": _mean([t.wall_s for t in turns]),
        "worse_than_off": worse,
        "better_than_off": better,
        "more_tool_errors_than_off": errors_worse,
        "fewer_tool_errors_than_off": errors_better,
        "first_low_trust_turn": low,
        "samples": samples,
    }


def print_report(rows: list[dict[str, Any]]) -> None:
    """The rows as a table, then each configuration's parse shares and one sample per class."""
    head = (
        f"{'configuration':<15}{'success':>9}{'tool err':>9}{'agree':>8}{'calls/t':>8}"
        f"{'prompt/t':>9}{'cached/t':>9}{'compl/t':>8}{'wall s/t':>9}{'worse':>6}{'better':>7}"
        f"{'err +/-':>8}{'low trust':>10}{'5xx':>5}"
    )
    print("\n" + head + "\n" + "-" * len(head))
    for r in rows:
        agree, measured = r["outcome_agreement"]
        print(
            f"{r['config']:<15}{r['success']:>4}/{r['episodes']:<4}{r['tool_errors']:>9}"
            f"{(f'{agree}/{measured}' if measured else 'n/a'):>8}"
            f"{r['engine_calls_per_turn']:>8.2f}{r['prompt_per_turn']:>9.0f}"
            f"{r['cached_per_turn']:>9.0f}{r['completion_per_turn']:>8.0f}"
            f"{r['wall_s_per_turn']:>9.1f}{r['worse_than_off']:>6}{r['better_than_off']:>7}"
            f"{r['more_tool_errors_than_off']:>4}/{r['fewer_tool_errors_than_off']:<3}"
            f"{(r['first_low_trust_turn'] or '-')!s:>10}{r['failed_requests']:>5}"
        )
    print("\nimagined answers by parse class (share of all imagined answers of the configuration)")
    for r in rows:
        if not r["imagined"]:
            continue
        shares = ", ".join(
            f"{name} {count / r['imagined']:.0%}" for name, count in r["parse"].items()
        )
        print(f"  {r['config']:<15} {r['imagined']:>4} answers: {shares}")
    print("\none imagined answer of each class, as the model wrote it (cut at 240 characters)")
    seen: set[str] = set()
    for r in rows:
        for name, text in r["samples"].items():
            if name not in seen:
                seen.add(name)
                print(f"  [{name}] {json.dumps(text[:240], ensure_ascii=False)}")
    for r in rows:
        for failure in r["failures"]:
            print(f"  FAILED ({r['config']}): {failure}")
