"""The learned budget (``budget: "auto"``): how many trajectories pay, per tenant and tool.

A fixed K spends the same on every turn, wherever rehearsal pays off and wherever it does not.
Under ``auto`` the gateway reads, per tenant and tool, what the real results of its committed
calls already showed, and gives the anchor's tool (``rehearsal.planner``, the anchored rule) the
K that paid there, within ``AutoSettings.max_k``. Imagination pays where the calls committed
after imagining fail less often than calls committed unimagined; counts per tool (and the
tenant's pooled ``*``), kept by the store like trust's and halved past the same window:

    n   real results of calls committed as the anchor (kept, rehearsed or not)
    u   of those, committed without having been imagined
    f   of ``u``, failed for real (the failure rate K = 0 lets through: ``f / u``)
    m   of the imagined kept anchors (``n - u``), failed for real (what imagination missed)
    r   real results of calls committed *instead of* an anchor of this tool because its
        imagination vetoed it (counted against the anchor's tool)
    rs  of those, succeeded

An anchor replaced because a deterministic check vetoed it counts nowhere: no imagination was
needed to catch it. Of the ``i = n - u + r`` imagined turns, ``catch = rs / i`` bounds what
imagination can have caught (a veto is only worth its replacement's success), and the **gain**
``f / u - (m + r - rs) / i`` is how much less often an imagined turn failed than an unimagined
one. At fidelity 0 a veto is noise: it replaces good anchors as often as bad ones, and the gain
is near 0 however often unimagined anchors fail. ``budget_for`` turns them into K:

- ``destructive`` — always imagined, with ``max_k`` samples (the risk policy's vote);
- trust ``off`` or ``ignore_vetoes`` — imagination's verdict is not acted on, so trajectories
  cannot change the commit: K = 0 (the anchor is not imagined) except on a probe, drawn per turn
  at ``probe_rate``, which imagines it once so that trust can be re-earned;
- too few results (fewer than ``min_samples`` of the tool and of its class's pool), or fewer
  than ``min_each`` imagined: ``learning_k``;
- ``catch`` under ``quiet`` (``read_quiet`` for a ``read_only`` tool: a read's real result is its
  own evidence, so reads give way sooner): K = 0 — imagination almost never caught anything;
- fewer than ``min_each`` unimagined results: K = 0, a held-out turn that measures ``f / u``;
- gain under the threshold: K = 0, with the probe (imagined once, at ``probe_rate``), which keeps
  ``m``, ``r`` and ``rs`` current; otherwise ``max_k``. Nothing in between: K costs almost
  nothing beyond imagining the anchor (alternatives are sampled in one call, and only when the
  anchor is vetoed), while each trajectory more catches more
  (docs/decisions/0021-learned-budget.md).

A tool with too few counts of its own borrows those of the tenant's tools of its risk class
(row ``*<class>``, e.g. ``*read_only``), never the tenant's pooled ones: reads are most of a
tenant's turns and imagination rarely pays on them, so the pool would quiet a write it has not
seen (``*`` is kept for the trust route). An anchor
that a deterministic check vetoes (schema, a repeated real failure) keeps ``max_k`` whatever its
tool learned: its alternatives need no imagination to be judged, and they are the cheapest
catches rehearsal makes. Pure: ``rehearsal.context`` applies the K, the server keeps the counts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .risk import Risk
from .trust import POOLED, Policy

AUTO = "auto"
AUTO_CELLS = ("n", "f", "r", "rs", "u", "m")
# Commit paths that put another call in the anchor's place (``rehearsal.decision``).
REPLACING_PATHS = frozenset({"replaced", "valid_fallback", "repaired"})


@dataclass(frozen=True, slots=True)
class AutoSettings:
    """The learned budget's thresholds (documented defaults in docs/rehearsal-knobs.md)."""

    max_k: int = 4
    learning_k: int = 2
    min_samples: int = 8
    min_each: int = 3
    quiet: float = 0.1
    read_quiet: float = 0.2
    probe_rate: float = 0.1


@dataclass(frozen=True, slots=True)
class AutoCounts:
    """Real results of one tool's anchors (or the pooled ``*``), module docstring."""

    n: int = 0
    f: int = 0
    r: int = 0
    rs: int = 0
    u: int = 0
    m: int = 0

    @property
    def samples(self) -> int:
        return self.n + self.r

    @property
    def imagined(self) -> int:
        """Turns whose anchor was imagined: kept after imagining, or replaced by its veto."""
        return max(self.n - self.u, 0) + self.r

    @property
    def catch(self) -> float | None:
        """Share of imagined turns whose veto was followed by a real success (the most
        imagination can have caught); None without imagined turns."""
        return self.rs / self.imagined if self.imagined else None

    @property
    def gain(self) -> float | None:
        """Failure rate of unimagined anchors less that of imagined turns; None without both."""
        if not (self.u and self.imagined):
            return None
        return self.f / self.u - (self.m + self.r - self.rs) / self.imagined

    @property
    def replaced_ok(self) -> float | None:
        """Share of replacements that succeeded for real; None without any."""
        return self.rs / self.r if self.r else None

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> AutoCounts:
        """Read counts from stored fields; anything that is not a count reads as 0."""
        values = {}
        for name in AUTO_CELLS:
            try:
                values[name] = max(int(raw.get(name, 0)), 0)
            except (TypeError, ValueError):
                values[name] = 0
        return cls(**values)


NO_AUTO_COUNTS = AutoCounts()


def class_pool(risk: str) -> str:
    """The row pooling the results of a tenant's tools of class ``risk``."""
    return f"{POOLED}{risk}"


def auto_cells(replaced: bool, real_error: bool, imagined: bool) -> tuple[str, ...]:
    """The counts one real result adds to: ``replaced`` — the call was committed instead of an
    anchor imagination vetoed (counted against the anchor's tool); else ``imagined`` — the kept
    anchor was imagined."""
    if replaced:
        return ("r",) if real_error else ("r", "rs")
    if imagined:
        return ("n", "m") if real_error else ("n",)
    return ("n", "u", "f") if real_error else ("n", "u")


def budget_for(
    tool: str,
    risk: Risk,
    policy: Policy,
    table: Mapping[str, AutoCounts],
    settings: AutoSettings,
) -> tuple[int, str]:
    """The K ``tool``'s anchors get under ``auto``, and why (module docstring)."""
    if risk == "destructive":
        return settings.max_k, "destructive: always imagined"
    if policy in ("off", "ignore_vetoes"):
        return 0, f"trust {policy}: imagination cannot change the commit"
    counts, whose = table.get(tool, NO_AUTO_COUNTS), ""
    if counts.samples < settings.min_samples:
        counts, whose = table.get(class_pool(risk), NO_AUTO_COUNTS), f"{tool} borrows its class's "
    if counts.samples < settings.min_samples or counts.imagined < settings.min_each:
        return settings.learning_k, "too few real results yet"
    whose += f"{counts.samples}" if whose else f"{counts.samples} results of {tool}"
    quiet = settings.read_quiet if risk == "read_only" else settings.quiet
    catch = counts.catch or 0.0
    if catch < quiet:
        return 0, f"{whose}: catch {catch:.2f} < {quiet:g}"
    if counts.u < settings.min_each:
        return 0, f"{whose}: {counts.u} unimagined, held out"
    gain = counts.gain or 0.0
    k = 0 if gain < quiet else settings.max_k
    return k, f"{whose}: gain {gain:.2f} " + ("<" if k == 0 else ">=") + f" {quiet:g}"


def budgets(
    tools: Iterable[str],
    risks: Mapping[str, Risk],
    trust: Mapping[str, Policy],
    table: Mapping[str, AutoCounts],
    settings: AutoSettings,
) -> dict[str, int]:
    """``budget_for`` of each tool (class ``unknown`` and trust ``trusted`` where not given)."""
    return {
        tool: budget_for(
            tool, risks.get(tool, "unknown"), trust.get(tool, "trusted"), table, settings
        )[0]
        for tool in tools
    }


def auto_row(
    tool: str,
    risk: Risk,
    policy: Policy,
    table: Mapping[str, AutoCounts],
    settings: AutoSettings,
) -> dict[str, Any]:
    """One row of ``GET /v1/rehearsals/budget``."""
    counts = table.get(tool, NO_AUTO_COUNTS)
    k, why = budget_for(tool, risk, policy, table, settings)
    rates = {"catch": counts.catch, "gain": counts.gain, "replaced_ok": counts.replaced_ok}
    return {
        "tool": tool,
        "samples": counts.samples,
        "counts": {name: getattr(counts, name) for name in AUTO_CELLS},
        **{name: None if v is None else round(v, 4) for name, v in rates.items()},
        "budget": k,
        "why": why,
    }
