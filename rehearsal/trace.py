"""What a rehearsal produced: imagined observations, trajectories and the result with its trace.

Vocabulary, from the smallest piece up:

- an ``ImaginedObservation`` is one tool call's result as the rehearsal role predicted it;
- a ``Step`` is one acting turn and the observations imagined for each of its tool calls;
- a ``Trajectory`` is the steps that followed one candidate action, and how they ``ended``:
  ``answer`` | ``veto`` | ``error`` | ``unparsed`` | ``depth`` | ``deadline`` | ``engine_error``
  | ``skipped`` (trust switched imagination off for the tool) | ``read`` (a ``read_only`` call,
  not imagined by the operator's choice, ``imagine_reads``);
- the ``RehearsalResult`` holds the committed turn plus everything needed to explain it.

A trajectory's ``outcome`` and ``score`` are pure functions of its steps, so the memory note,
the commit rule and the trace can never disagree about them. ``outcome`` judges the *first*
action (what would be committed): the first step's worst observation if any went wrong
(``veto:<CODE>``, ``unparsed``, ``error``), else ``answer`` when the trajectory reached a final
answer, ``open`` when a deadline or an engine error cut it short, ``unrehearsed`` when the first
step was skipped (by trust, or as a read), ``ok`` otherwise. ``score`` is
1 for an answer and 0 for a bad first step; else the share of rehearsed steps that were clean
(an answer counts as clean), or 0.5 when nothing was rehearsed yet.

An observation's ``source`` is ``imagined`` (the rehearsal role's prediction) or ``check`` (a
deterministic check vetoed the call before any imagination: the schema, code ``SCHEMA_INVALID``,
or a repeat of a real failure, code ``REAL_FAILURE_REPEATED``); the two sources of veto are
counted apart everywhere, and check vetoes once more by code (``checked_veto_codes``).

Every object here converts to plain JSON with ``to_dict``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from .budget import Budget
from .messages import JSON, NO_USAGE, AssistantTurn, Message, ToolCall, Usage
from .parsing import PARSE_CLASSES, ParseClass, Verdict
from .risk import UNKNOWN, ToolRisk

Ending = Literal[
    "answer", "veto", "error", "unparsed", "depth", "deadline", "engine_error", "skipped", "read"
]
Source = Literal["imagined", "check"]
_SEVERITY: dict[str, int] = {"veto": 0, "error": 1}


@dataclass(frozen=True, slots=True)
class ImaginedObservation:
    """One tool call's result as imagined by the rehearsal role."""

    call: ToolCall
    verdict: Verdict
    result: JSON = None
    code: str | None = None
    raw: str | None = None
    detail: str = ""
    examples: int = 0  # how many grounding observations the prompt carried
    elapsed_ms: float = 0.0
    source: Source = "imagined"
    parse: ParseClass = "ok"  # how the answer met the format (rehearsal.parsing)

    @property
    def outcome(self) -> str:
        return f"veto:{self.code}" if self.verdict == "veto" else self.verdict

    def as_tool_content(self) -> str:
        """The observation as a tool message's content, for the next imagined step."""
        return json.dumps(self.result, ensure_ascii=False)

    def as_tool_message(self) -> Message:
        """The observation as the tool message that follows its call in an imagined history.

        No ``name`` field: OpenAI's tool message has none; the history flattener finds the name
        from ``tool_call_id``.
        """
        return {"role": "tool", "tool_call_id": self.call.id, "content": self.as_tool_content()}

    def to_dict(self) -> dict[str, Any]:
        return {
            "call": self.call.to_dict(),
            "outcome": self.outcome,
            "source": self.source,
            "parse": self.parse,
            "result": self.result,
            "raw": self.raw,
            "detail": self.detail,
            "examples": self.examples,
            "elapsed_ms": round(self.elapsed_ms, 3),
        }


@dataclass(frozen=True, slots=True)
class Step:
    """One acting turn inside a trajectory and what was imagined for its tool calls."""

    turn: AssistantTurn
    observations: tuple[ImaginedObservation, ...] = ()

    @property
    def worst(self) -> ImaginedObservation | None:
        """The most severe predicted failure (a veto, then a tool error); unparsed is none."""
        bad = [o for o in self.observations if o.verdict in _SEVERITY]
        return min(bad, key=lambda o: _SEVERITY[o.verdict]) if bad else None

    @property
    def unread(self) -> bool:
        """Whether an observation of this step missed the format, so the step proves nothing."""
        return any(o.verdict == "unparsed" for o in self.observations)

    @property
    def rehearsed(self) -> bool:
        return self.turn.is_answer or (bool(self.observations) and not self.unread)

    @property
    def clean(self) -> bool:
        return self.turn.is_answer or (self.rehearsed and self.worst is None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "turn": self.turn.to_dict(),
            "observations": [o.to_dict() for o in self.observations],
        }


@dataclass(frozen=True, slots=True)
class Trajectory:
    """The imagined continuation of one candidate action. ``samples`` index the candidates."""

    index: int
    samples: tuple[int, ...]
    steps: tuple[Step, ...]
    ended: Ending

    @property
    def first_turn(self) -> AssistantTurn:
        return self.steps[0].turn

    @property
    def signature(self) -> str:
        return self.first_turn.signature

    @property
    def outcome(self) -> str:
        first = self.steps[0]
        if first.turn.is_answer:
            return "answer"
        worst = first.worst
        if worst is not None:
            return worst.outcome
        if first.unread:
            return "unparsed"
        if self.ended in ("deadline", "engine_error"):
            return "open"
        if self.ended in ("skipped", "read") and not first.observations:
            return "unrehearsed"
        return "answer" if self.ended == "answer" else "ok"

    @property
    def score(self) -> float:
        first = self.steps[0]
        if first.turn.is_answer:
            return 1.0
        if first.worst is not None:
            return 0.0
        rehearsed = [s for s in self.steps if s.rehearsed]
        if not rehearsed:
            return 0.5
        return sum(s.clean for s in rehearsed) / len(rehearsed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "samples": list(self.samples),
            "signature": self.signature,
            "outcome": self.outcome,
            "score": round(self.score, 4),
            "ended": self.ended,
            "steps": [s.to_dict() for s in self.steps],
        }


@dataclass(frozen=True, slots=True)
class Timings:
    """Wall time by phase in milliseconds (phases of a sequential rehearsal are summed)."""

    act: float = 0.0
    rehearse: float = 0.0
    commit: float = 0.0
    total: float = 0.0

    def to_dict(self) -> dict[str, float]:
        phases = {"act": self.act, "rehearse": self.rehearse, "commit": self.commit}
        return {k: round(v, 3) for k, v in {**phases, "total": self.total}.items()}


@dataclass(frozen=True, slots=True)
class RehearsalResult:
    """The committed turn and the trace that explains it."""

    turn: AssistantTurn
    budget: Budget
    candidates: tuple[AssistantTurn, ...] = ()
    trajectories: tuple[Trajectory, ...] = ()
    chosen_trajectory: int | None = None
    chosen_index: int | None = None
    why: str = ""
    early_exit: str | None = None
    commit_path: str = "off"
    # Committed whatever imagination said of it (the anchor, its vetoes not acted on); else an
    # imagined failure of the committed call was weighed against other candidates first.
    commit_unconditional: bool = False
    commit_check: str = "ok"  # the committed turn: ok | schema_invalid | unchecked
    commit_check_detail: str = ""
    # Under ``confirm``: the destructive call held back while the turn asks the user.
    held: AssistantTurn | None = None
    # The anchor's repeats of a real failure, imagined once for trust (never for the decision).
    probes: tuple[ImaginedObservation, ...] = ()
    trust: dict[str, str] = field(default_factory=dict)  # tool -> trust policy it was under
    risk: dict[str, ToolRisk] = field(default_factory=dict)  # offered tool -> its risk class
    # Under ``budget: "auto"``: the K the anchor's tool learned, why, and whether it was a probe.
    auto: dict[str, Any] | None = None
    degraded: str | None = None
    faults: tuple[str, ...] = ()
    memory_note: str | None = None
    calls: dict[str, int] = field(default_factory=dict)
    tokens: dict[str, Usage] = field(default_factory=dict)
    timings: Timings = Timings()

    @property
    def usage(self) -> Usage:
        """All tokens spent by every role, which is what the client is billed."""
        return sum(self.tokens.values(), NO_USAGE)

    @property
    def engine_calls(self) -> int:
        return sum(self.calls.values())

    @property
    def distinct_actions(self) -> int:
        return len({c.signature for c in self.candidates})

    def _count_vetoes(self, source: str) -> int:
        return sum(
            o.verdict == "veto" and o.source == source
            for t in self.trajectories
            for s in t.steps
            for o in s.observations
        )

    def parse_classes(self) -> dict[str, int]:
        """How many imagined answers fell in each parse class (only classes that occurred)."""
        counts = dict.fromkeys(PARSE_CLASSES, 0)
        for t in self.trajectories:
            for s in t.steps:
                for o in s.observations:
                    if o.source == "imagined":
                        counts[o.parse] += 1
        return {name: n for name, n in counts.items() if n}

    @property
    def vetoes(self) -> int:
        """Vetoes the rehearsal role imagined."""
        return self._count_vetoes("imagined")

    @property
    def checked_vetoes(self) -> int:
        """Vetoes a deterministic check decided, with no imagination spent."""
        return self._count_vetoes("check")

    def checked_veto_codes(self) -> dict[str, int]:
        """``checked_vetoes`` by code (only codes that occurred); the counts sum to it."""
        counts: dict[str, int] = {}
        for t in self.trajectories:
            for s in t.steps:
                for o in s.observations:
                    if o.verdict == "veto" and o.source == "check":
                        counts[str(o.code)] = counts.get(str(o.code), 0) + 1
        return counts

    def committed_risk(self) -> list[str]:
        """The risk class of each committed tool call, in order (``rehearsal.risk``)."""
        return [self.risk.get(call.name, UNKNOWN).risk for call in self.turn.tool_calls]

    @property
    def committed_rehearsed(self) -> bool | None:
        """Whether the committed action was imagined in this rehearsal (None for an answer)."""
        if self.turn.is_answer:
            return None
        return any(
            t.signature == self.turn.signature
            and any(o.source == "imagined" for o in t.steps[0].observations)
            for t in self.trajectories
        )

    def summary(self) -> dict[str, Any]:
        """The response's ``rehearsal`` object (DESIGN §4) without the id the server mints."""
        return {
            "mode": self.budget.mode,
            "budget": self.budget.budget,
            "depth": self.budget.depth,
            "commit": self.budget.commit,
            "trajectories": len(self.trajectories),
            "distinct_actions": self.distinct_actions,
            "vetoes": self.vetoes,
            "checked_vetoes": self.checked_vetoes,
            "checked_veto_codes": self.checked_veto_codes(),
            "parse_classes": self.parse_classes(),
            "early_exit": self.early_exit is not None,
            "chosen_index": self.chosen_index,
            "commit_path": self.commit_path,
            "commit_check": self.commit_check,
            "committed_rehearsed": self.committed_rehearsed,
            "committed_risk": self.committed_risk(),
            "held_for_confirmation": None
            if self.held is None
            else [call.to_dict() for call in self.held.tool_calls],
            "trust": dict(self.trust),
            "auto": self.auto,
            "engine_calls": self.engine_calls,
            "degraded": self.degraded,
            "latency_ms": self.timings.to_dict(),
            "tokens": {role: usage.to_dict() for role, usage in self.tokens.items()},
        }

    def to_dict(self) -> dict[str, Any]:
        """The full trace: the summary plus every candidate, trajectory and the reasons."""
        return {**self.summary(), **self.details()}

    def details(self) -> dict[str, Any]:
        """What the full trace adds to the summary (``engine_calls`` by role replaces the total).

        Apart so that a caller holding the summary already builds the trace without a second one.
        """
        return {
            "budget_knobs": self.budget.to_dict(),
            "turn": self.turn.to_dict(),
            "why": self.why,
            "commit_unconditional": self.commit_unconditional,
            "commit_check_detail": self.commit_check_detail,
            "risk": {tool: found.to_dict() for tool, found in self.risk.items()},
            "hindsight_probes": [o.to_dict() for o in self.probes],
            "early_exit_reason": self.early_exit,
            "chosen_trajectory": self.chosen_trajectory,
            "faults": list(self.faults),
            "engine_calls": dict(self.calls),
            "memory_note": self.memory_note,
            "candidates": [c.to_dict() for c in self.candidates],
            "trace": [t.to_dict() for t in self.trajectories],
        }
