"""Vetoes counted one way in every client view: by kind, the same in summary, trace and metrics.

A veto's *kind* is ``imagined`` when the rehearsal role predicted the failure, and the check's
code (``SCHEMA_INVALID``, ``REAL_FAILURE_REPEATED``) when a deterministic check decided it with
no imagination spent. The response's ``rehearsal`` summary, the stored trace and the
``rehearsal_gateway_vetoes_total`` family (labels ``code`` and ``source``) each give the same
counts through the functions here, and ``render`` writes them the one way ``chat``, ``trace``,
``top``, ``demo`` and ``eval`` print them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

IMAGINED = "imagined"


def kind(code: str, source: str) -> str:
    """The kind of one veto: ``imagined``, or the code of the check that decided it."""
    return IMAGINED if source == IMAGINED else code


def from_summary(summary: Any) -> dict[str, int]:
    """Kinds from a response's ``rehearsal`` object (a ``RehearsalSummary`` or its dict)."""
    fields: Mapping[str, Any] = summary if isinstance(summary, Mapping) else vars(summary)
    counts: Counter[str] = Counter()
    imagined = int(fields.get("vetoes") or 0)
    if imagined:
        counts[IMAGINED] = imagined
    for code, times in (fields.get("checked_veto_codes") or {}).items():
        if times:
            counts[str(code)] += int(times)
    return dict(counts)


def from_trace(trace: Mapping[str, Any]) -> dict[str, int]:
    """Kinds from a stored trace: every observation whose outcome is a veto."""
    counts: Counter[str] = Counter()
    for walk in trace.get("trace") or []:
        for step in walk.get("steps") or []:
            for seen in step.get("observations") or []:
                outcome = str(seen.get("outcome") or "")
                if outcome.startswith("veto:"):
                    counts[kind(outcome.removeprefix("veto:"), str(seen.get("source")))] += 1
    return dict(counts)


def from_samples(samples: Iterable[tuple[Mapping[str, str], float]]) -> dict[str, int]:
    """Kinds from the samples of ``rehearsal_gateway_vetoes_total`` (labels code, source)."""
    counts: Counter[str] = Counter()
    for labels, value in samples:
        if value:
            counts[kind(labels.get("code", ""), labels.get("source", ""))] += int(value)
    return dict(counts)


def render(counts: Mapping[str, int]) -> str:
    """``3 (SCHEMA_INVALID 2, imagined 1)``, most frequent first; ``0`` for none."""
    total = sum(counts.values())
    if not total:
        return "0"
    kinds = sorted(((k, v) for k, v in counts.items() if v), key=lambda kv: (-kv[1], kv[0]))
    return f"{total} ({', '.join(f'{k} {v}' for k, v in kinds)})"
