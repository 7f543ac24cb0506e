"""Trust in imagination, learned from real results: when may rehearsal's vetoes steer a commit?

Each time a client sends back the real result of a call whose outcome had been imagined, the
gateway records one pair — imagined outcome (error or success) × real outcome — per tenant and
tool, and for the tenant as a whole (tool ``*``), in one of six counts:

    ee  imagined an error, and it really failed      (a veto that was right)
    eo  imagined an error, but it really succeeded   (a false veto)
    oe  imagined success, but it really failed       (a miss)
    oo  imagined success, and it really succeeded
    we  as ee, and wo as eo, for a veto the commit rule *weighed* (below)

**Weighed vetoes.** A vetoed call reaches the real tools in two ways. Either it was committed
whatever its imagination said — the anchor, kept because its tool's vetoes were not acted on
(``learning``, ``ignore_vetoes`` or its probe; the planner's ``commit_unconditional``) — and its
pair lands in ``ee``/``eo``. Or a rule committed it after weighing it against the other
candidates, because none rehearsed clean (``anchor_vetoed``, a fallback, ``select``'s least bad):
``we``/``wo``. The second kind is a selected sample. The vetoes a rule acts on are never executed,
and the ones it cannot act on are those of turns where imagination found nothing clean — most
often because it was wrong about the whole turn, or because the policy proposed the same action
every time, which is then usually right. Counted with the rest, vetoes look falser the more they
are trusted: at fidelity 0.8 and skill 0.8 the decisions benchmark's anchored tenant counted 1
right veto against 5 false ones (seeds 0–2) and flipped to ``ignore_vetoes`` right after each
false one it was sent, while the same twin's vetoes were right 12 times in 18 when none was
acted on (every tool pinned ``learning``, seeds 3–5).

From them: **outcome agreement** ``(ee + we + oo) / n`` (the honest fidelity figure, over every
pair), **veto precision** ``ee / (ee + eo)`` (how often an imagined failure is real, over the
unselected vetoes), the **miss rate** ``oe / (oe + oo)`` (how often an imagined success fails
for real) and the **false-veto rate** ``(eo + wo) / (eo + wo + oo)``.

Acting on a veto swaps a call imagination said fails for one it said works. That pays when a
vetoed call fails clearly more often than a call imagined clean, so what decides is precision
against the miss rate — not precision alone, whose meaning depends on how often the agent's
calls fail at all: the **veto lift** (their difference) must reach ``lift_threshold`` and
precision must be ``risk_ratio`` times the miss rate. A difference alone does not separate
faithful imagination from useless imagination (a useless one can show a lift as large as a
faithful one's), and a fixed precision floor ignores good vetoes where calls rarely fail; the
ratio separates them on the decisions benchmark (docs/decisions/0014-anchored-commit-and-trust.md).

``policy_for`` turns the counts into what the planner does with that tool's imagination:

- ``trusted`` — imagined vetoes may replace the un-rehearsed action (the anchor);
- ``learning`` — too few pairs yet (fewer than ``min_samples`` for the tool *and* for the tenant
  as a whole); imagination runs and is recorded, but its vetoes are not acted on, so the commit is
  what rehearsal off would have made unless a deterministic check vetoed it;
- ``ignore_vetoes`` — enough pairs, but imagination's vetoes are not worth acting on: with at
  least ``min_vetoes`` unselected vetoes, their lift is under ``lift_threshold`` or their
  precision under ``risk_ratio`` × the miss rate; with fewer, the weighed ones included show no
  lift either (they can confirm a lift, never refute one) and agreement is under
  ``trust_threshold``. As learning, but for a measured reason; imagination keeps running, so
  trust can be re-earned;
- ``off`` — agreement under ``off_threshold`` (with ``auto_off``): the tool is not rehearsed at
  all (its cost is saved); the counts expire with their key's TTL, after which it is learning
  again.

Agreement over a tool's own few pairs is noisy, so where it decides it is drawn towards the
tenant's: the tool's pairs count with ``min_samples`` more at the tenant's agreement. A tool
with too few pairs of its own borrows the tenant's pooled verdict, and one with too few vetoes
of its own the tenant's vetoes (the model's imagination is mostly good or bad as a whole).

What this cannot see: while a tool is ``trusted`` none of its vetoes is unselected (each is
acted on or weighed), so a lift once measured stands until the miss rate or the agreement, which
keep being measured, say otherwise. An operator's pin overrides everything. Counts are
halved when a tool's total passes ``window``, so recent evidence dominates (done by the store,
atomically).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

Policy = Literal["trusted", "learning", "ignore_vetoes", "off"]
POLICIES: tuple[str, ...] = get_args(Policy)
CELLS = ("ee", "eo", "oe", "oo", "we", "wo")
POOLED = "*"


@dataclass(frozen=True, slots=True)
class TrustSettings:
    """Thresholds (documented defaults in docs/rehearsal-knobs.md)."""

    enabled: bool = True
    min_samples: int = 8
    trust_threshold: float = 0.8
    lift_threshold: float = 0.1
    risk_ratio: float = 2.0
    min_vetoes: int = 4
    off_threshold: float = 0.5
    auto_off: bool = True
    window: int = 200
    pins: Mapping[str, Policy] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Counts:
    """Imagined × real outcome pairs for one tool (or the pooled ``*``)."""

    ee: int = 0
    eo: int = 0
    oe: int = 0
    oo: int = 0
    we: int = 0  # a weighed veto (module docstring), really failed
    wo: int = 0  # a weighed veto, really succeeded

    @property
    def samples(self) -> int:
        return self.ee + self.eo + self.oe + self.oo + self.we + self.wo

    @property
    def agreement(self) -> float | None:
        return (self.ee + self.we + self.oo) / self.samples if self.samples else None

    @property
    def veto_precision(self) -> float | None:
        vetoes = self.ee + self.eo
        return self.ee / vetoes if vetoes else None

    @property
    def miss_rate(self) -> float | None:
        imagined_ok = self.oe + self.oo
        return self.oe / imagined_ok if imagined_ok else None

    @property
    def veto_lift(self) -> float | None:
        """Veto precision minus miss rate (a missing miss rate reads 0); None without vetoes."""
        precision = self.veto_precision
        return None if precision is None else precision - (self.miss_rate or 0.0)

    @property
    def false_veto_rate(self) -> float | None:
        real_ok = self.eo + self.wo + self.oo
        return (self.eo + self.wo) / real_ok if real_ok else None

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> Counts:
        """Read counts from stored fields; anything that is not a count reads as 0."""
        values = {}
        for cell in CELLS:
            value = raw.get(cell, 0)
            try:
                values[cell] = max(int(value), 0)
            except (TypeError, ValueError):
                values[cell] = 0
        return cls(**values)


NO_COUNTS = Counts()  # a tool with no real results yet; one shared value (Counts is frozen)


def cell(imagined_error: bool, real_error: bool, *, weighed: bool = False) -> str:
    """The count one (imagined, real) pair adds to; ``weighed``: the commit rule weighed the
    imagined failure against other candidates before committing the call (module docstring)."""
    imagined = ("w" if weighed else "e") if imagined_error else "o"
    return imagined + ("e" if real_error else "o")


def _with_weighed(counts: Counts) -> Counts:
    """``counts`` with the weighed vetoes taken as unselected ones: a sample biased towards false
    vetoes (module docstring), so a lift it shows is there at least, and one it lacks may not be."""
    return Counts(ee=counts.ee + counts.we, eo=counts.eo + counts.wo, oe=counts.oe, oo=counts.oo)


def _lift(vetoes: Counts, settings: TrustSettings) -> tuple[bool, str]:
    """Whether ``vetoes`` lift: precision ``lift_threshold`` above and ``risk_ratio`` times the
    miss rate."""
    lift, precision = vetoes.veto_lift or 0.0, vetoes.veto_precision or 0.0
    miss = vetoes.miss_rate or 0.0
    telling = lift >= settings.lift_threshold and precision >= settings.risk_ratio * miss
    return telling, f"veto lift {lift:.2f}, precision {precision:.2f} vs miss rate {miss:.2f}"


def _verdict(counts: Counts, pooled: Counts, settings: TrustSettings) -> tuple[Policy, str]:
    """The policy of enough ``counts`` (a tool's own, or the tenant's ``pooled`` ones)."""
    agreement = counts.agreement or 0.0
    if settings.auto_off and agreement < settings.off_threshold:
        return "off", f"outcome agreement {agreement:.2f}"
    enough = settings.min_vetoes
    sources = [(counts, "")] + ([] if counts is pooled else [(pooled, " (the tenant's vetoes)")])
    for source, whose in sources:  # unselected vetoes decide, both ways
        if source.ee + source.eo >= enough:
            telling, why = _lift(source, settings)
            return ("trusted" if telling else "ignore_vetoes"), why + whose
    weighed = ""
    for source, whose in sources:  # weighed ones may only confirm a lift
        if (vetoes := _with_weighed(source)).ee + vetoes.eo >= enough:
            telling, why = _lift(vetoes, settings)
            if telling:
                return "trusted", f"{why}, weighed vetoes included{whose}"
            weighed = ", weighed vetoes show none"
            break
    # A tool's own agreement over a few pairs is noisy (at a true 0.94, 7 or fewer of 9 pairs
    # right happens one time in ten): it counts as ``min_samples`` pairs at the tenant's more.
    prior, weight = pooled.agreement or agreement, settings.min_samples
    drawn = (counts.ee + counts.we + counts.oo + weight * prior) / (counts.samples + weight)
    policy: Policy = "trusted" if drawn >= settings.trust_threshold else "ignore_vetoes"
    drawn_in = counts is not pooled and pooled.samples > 0
    shown = f"{agreement:.2f}" + (f" ({drawn:.2f} with the tenant's)" if drawn_in else "")
    return policy, f"outcome agreement {shown}, too few vetoes for a lift{weighed}"


def policy_for(
    tool: str, table: Mapping[str, Counts], settings: TrustSettings
) -> tuple[Policy, str]:
    """What the planner may do with ``tool``'s imagination, and why (for the summary).

    The counts that decide are the tool's own when it has ``min_samples`` of them, else the
    tenant's pooled ones; a tool with too few vetoes of its own to judge their lift borrows the
    pooled vetoes the same way (the model's imagination is mostly good or bad as a whole).
    """
    if not settings.enabled:
        return "trusted", "trust learning is disabled"
    pinned = settings.pins.get(tool)
    if pinned is not None:
        return pinned, "pinned by the operator"
    own, pooled = table.get(tool, NO_COUNTS), table.get(POOLED, NO_COUNTS)
    if own.samples >= settings.min_samples:
        policy, why = _verdict(own, pooled, settings)
        return policy, f"{own.samples} real results of {tool}: {why}"
    if pooled.samples >= settings.min_samples:
        policy, why = _verdict(pooled, pooled, settings)
        return policy, f"too few results of {tool}; the tenant's {pooled.samples} overall: {why}"
    return "learning", "too few real results yet"


def policies(
    tools: Iterable[str], table: Mapping[str, Counts], settings: TrustSettings
) -> dict[str, Policy]:
    """``policy_for`` of each tool."""
    return {tool: policy_for(tool, table, settings)[0] for tool in tools}


def trust_row(tool: str, table: Mapping[str, Counts], settings: TrustSettings) -> dict[str, Any]:
    """One row of ``GET /v1/rehearsals/trust``."""
    counts = table.get(tool, NO_COUNTS)
    policy, why = policy_for(tool, table, settings)
    return {
        "tool": tool,
        "samples": counts.samples,
        "counts": {c: getattr(counts, c) for c in CELLS},
        "outcome_agreement": _rounded(counts.agreement),
        "veto_precision": _rounded(counts.veto_precision),
        "miss_rate": _rounded(counts.miss_rate),
        "veto_lift": _rounded(counts.veto_lift),
        "false_veto_rate": _rounded(counts.false_veto_rate),
        "policy": policy,
        "why": why,
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
