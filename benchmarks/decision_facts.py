"""What one committed turn shows about the gateway's decision, read from the response alone.

``TurnFacts.read`` takes a chat completion the gateway returned (with ``rehearsal.trace: true``)
and the ``SchemaCheck`` of the world whose tools were offered, and says:

- how many committed calls break the tool's JSON Schema, checked with the ``jsonschema`` library
  the way the world's tools enforce it (an object schema that lists ``properties`` refuses keys
  it does not list, docs/twin.md), and whether a schema-valid *rehearsed* candidate existed;
- whether the committed action was never rehearsed: the summary's ``committed_rehearsed`` when
  the gateway reports it (not counting early exits and the ``trust_off`` and ``auto_off``
  paths), else worked out from the trace (the committed calls are no trajectory's first
  action, and no early exit);
- the trust fields when present: ``engine_calls``, ``commit_path``, ``commit_check``,
  ``checked_vetoes`` and whether any tool's trust policy (``trust`` maps a tool to its policy,
  or to an object with a ``policy``) says imagination is not trusted.

A field the gateway does not report reads ``None``, which the tables print as ``n/a``.

``CallFacts.judge`` reads the calls an episode ran for real against the world's risk classes and
the task's plan: committed writes (and destructive calls) that failed for real, destructive calls
not part of the task's plan (a wrong cancellation, a wrong transfer), and repeats of a call that
had already failed for real with no call succeeding since (what hindsight forbids) and, of
those, the ones committed while the turn's trace held another schema-valid candidate that was no
such repeat (what hindsight promises never happens).

Beside them, what a run is made of (``Twin``, ``Config``, ``Episode``), shared by the runner
(``benchmarks/decisions.py``) and the report (``benchmarks/decision_report.py``) without either
importing the other.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator

from rehearsal_gateway.clients.client import Rehearsal
from rehearsal_gateway.rehearsal.decision import UNIMAGINED
from rehearsal_gateway.twin.worlds import Task, World
from rehearsal_gateway.twin.worlds.base import canonical_json

LOW_TRUST = ("ignore_vetoes", "off")


def enforced(schema: Any) -> Any:
    """``schema`` with ``additionalProperties: false`` wherever an object lists its properties
    and says nothing about extra keys: what the world's tools enforce."""
    if isinstance(schema, list):
        return [enforced(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: enforced(value) for key, value in schema.items()}
    if isinstance(schema.get("properties"), dict) and "additionalProperties" not in schema:
        out["additionalProperties"] = False
    return out


class SchemaCheck:
    """A world's tool schemas as ``jsonschema`` validators, built once."""

    def __init__(self, world: World) -> None:
        self.validators = {
            name: Draft202012Validator(enforced(tool.parameters))
            for name, tool in world.tools.items()
        }

    def valid(self, name: str, arguments: Any) -> bool:
        """Whether a call (``arguments`` as JSON text or parsed) conforms to its tool's schema."""
        validator = self.validators.get(name)
        if validator is None:
            return False
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments or "{}")
            except json.JSONDecodeError:
                return False
        return bool(validator.is_valid(arguments))


def _signature(calls: list[tuple[str, Any]]) -> str:
    parsed = []
    for name, arguments in calls:
        try:
            value = json.loads(arguments or "{}") if isinstance(arguments, str) else arguments
        except json.JSONDecodeError:
            value = arguments
        parsed.append(f"{name} {canonical_json(value)}")
    return "\n".join(parsed)


def _first_calls(trajectory: Mapping[str, Any]) -> list[tuple[str, Any]]:
    steps = trajectory.get("steps") or [{}]
    turn = steps[0].get("turn") or {}
    return [(c.get("name", ""), c.get("arguments")) for c in turn.get("tool_calls") or []]


def _policy(entry: Any) -> Any:
    """A tool's trust policy: the value itself, or its ``policy`` field."""
    return entry.get("policy") if isinstance(entry, dict) else entry


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class TurnFacts:
    """One committed turn, judged from the response."""

    calls: int  # committed tool calls
    schema_invalid: int  # of those, schema-invalid
    invalid_with_valid: bool | None  # an invalid commit while a valid rehearsed candidate existed
    never_rehearsed: bool | None  # a committed action that was never rehearsed
    rehearsed: bool  # the response carries a rehearsal summary
    degraded: str | None = None
    engine_calls: int | None = None
    commit_path: str | None = None
    commit_check: str | None = None
    checked_vetoes: int | None = None
    low_trust: bool | None = None
    rehearsal_id: str | None = None
    faults: tuple[str, ...] = ()  # from the stored trace, fetched for degraded turns only
    committed_trust: str | None = None  # the trust policy of the first committed call's tool
    # The schema-valid first actions of the trace's trajectories, as signatures (``ANSWER`` for
    # a final answer); None when the turn carries no trace. What else the gateway could have
    # committed, for ``CallFacts.judge``.
    options: frozenset[str] | None = None
    # The first trajectory's first tool (unrehearsed: the committed one), ``decision_oracle``.
    anchor: str | None = None
    imagined: int | None = None  # imagined observations in the trace

    @classmethod
    def read(cls, check: SchemaCheck, completion: Any) -> TurnFacts:
        message = completion.choices[0].message
        committed = [(c.function.name, c.function.arguments) for c in message.tool_calls or []]
        invalid = sum(not check.valid(name, args) for name, args in committed)
        raw = (completion.model_extra or {}).get("rehearsal")
        if not isinstance(raw, dict):
            return cls(calls=len(committed), schema_invalid=invalid, invalid_with_valid=None,
                       never_rehearsed=None, rehearsed=False,
                       anchor=committed[0][0] if committed else None)  # fmt: skip
        trace = raw.get("trace")
        trajectories = trace if isinstance(trace, list) else None
        with_valid: bool | None = None
        options = None if trajectories is None else _options(check, trajectories)
        if trajectories is not None:
            valid = any(
                (calls := _first_calls(t)) and all(check.valid(*c) for c in calls)
                for t in trajectories
            )
            with_valid = bool(invalid and valid)
        trust = raw.get("trust")
        low = committed_trust = None
        if isinstance(trust, dict):
            low = any(_policy(v) in LOW_TRUST for v in trust.values())
            if committed and committed[0][0] in trust:
                committed_trust = str(_policy(trust[committed[0][0]]))
        return cls(
            calls=len(committed),
            schema_invalid=invalid,
            invalid_with_valid=with_valid,
            never_rehearsed=_never_rehearsed(raw, committed, trajectories),
            rehearsed=True,
            degraded=raw.get("degraded"),
            engine_calls=_int(raw.get("engine_calls")),
            commit_path=raw.get("commit_path"),
            commit_check=raw.get("commit_check"),
            checked_vetoes=_int(raw.get("checked_vetoes")),
            low_trust=low,
            rehearsal_id=raw.get("id"),
            committed_trust=committed_trust,
            options=options,
            anchor=None if trajectories is None else turn_split(trajectories)[0],
            imagined=None if trajectories is None else turn_split(trajectories)[1],
        )


NO_TOOL = "-"  # the anchor tool of a turn that called none


def turn_split(trajectories: list[Any] | None) -> tuple[str, int]:
    """A traced turn's anchor tool and its imagined observations."""
    anchor, imagined = NO_TOOL, 0
    for index, trajectory in enumerate(trajectories or ()):
        steps = trajectory.get("steps") if isinstance(trajectory, dict) else None
        for number, step in enumerate(steps or ()):
            observations = step.get("observations") or ()
            imagined += sum(o.get("source") == "imagined" for o in observations)
            calls = (step.get("turn") or {}).get("tool_calls") or ()
            if index == number == 0 and calls:
                anchor = str(calls[0].get("name"))
    return anchor, imagined


ANSWER = "ANSWER"


def _options(check: SchemaCheck, trajectories: list[Any]) -> frozenset[str]:
    found: set[str] = set()
    for trajectory in trajectories:
        if not isinstance(trajectory, dict):
            continue
        calls = _first_calls(trajectory)
        if not calls:
            found.add(ANSWER)
        elif all(check.valid(*call) for call in calls):
            found.add(_signature(calls))
    return frozenset(found)


def _never_rehearsed(
    raw: Mapping[str, Any],
    committed: list[tuple[str, Any]],
    trajectories: list[Any] | None,
) -> bool | None:
    if not committed or raw.get("early_exit") or raw.get("commit_path") in UNIMAGINED:
        return False
    reported = raw.get("committed_rehearsed")
    if isinstance(reported, bool):
        return not reported
    if trajectories is None:
        return None
    tried = {_signature(_first_calls(t)) for t in trajectories if isinstance(t, dict)}
    return _signature(committed) not in tried


@dataclass(frozen=True)
class CallFacts:
    """What the calls an episode ran for real show about writes and destructive calls."""

    writes_failed: int = 0  # committed writes and destructive calls that failed for real
    wrong_destructive: int = 0  # committed destructive calls not in the task's plan
    repeats: int = 0  # calls identical to a standing real failure (hindsight's rule)
    # Of those, repeats committed while the turn's trace held another schema-valid candidate
    # that was no standing failure (a final answer counts): what hindsight promises never
    # happens. None when a repeat's turn carried no trace.
    repeats_avoidable: int | None = 0

    @classmethod
    def judge(
        cls,
        world: World,
        task: Task,
        calls: list[tuple[str, str, bool]],
        options: list[frozenset[str] | None] | None = None,
    ) -> CallFacts:
        """``options``, when given, holds per call the turn's candidates (``TurnFacts.options``)."""
        planned = {call.signature for call in task.plan}
        classes = world.risk_classes()
        writes_failed = wrong = repeats = 0
        avoidable: int | None = 0
        standing: set[str] = set()
        for index, (name, signature, failed) in enumerate(calls):
            risk = classes.get(name, "unknown")
            if signature in standing:
                repeats += 1
                offered = options[index] if options is not None else None
                if offered is None or avoidable is None:
                    avoidable = None
                else:
                    avoidable += any(o != signature and o not in standing for o in offered)
            writes_failed += failed and risk != "read_only"
            wrong += risk == "destructive" and signature not in planned
            if failed:
                standing.add(signature)
            else:
                standing = set()  # a call went through: the world may have changed (a read
                # too: a write refused "before it was looked up" succeeds after the read)
        return cls(writes_failed, wrong, repeats, avoidable)

    @staticmethod
    def options_per_call(turns: list[TurnFacts]) -> list[frozenset[str] | None]:
        """Each committed call's turn's candidates, in the order the agent ran the calls."""
        return [turn.options for turn in turns for _ in range(turn.calls)]


K = 4  # candidates per rehearsed turn
# Far beyond any turn here: a busy 2-core machine must not turn outcomes into deadline hits.
DEADLINE_MS = 120_000


@dataclass(frozen=True)
class Twin:
    fidelity: float
    skill: float

    @property
    def model(self) -> str:
        return f"twin-f{self.fidelity:.1f}-s{self.skill:.1f}"


@dataclass(frozen=True)
class Config:
    """One tenant's run: a twin, a mode and (rehearsed) a commit policy."""

    twin: Twin
    mode: str  # off | parallel | sequential
    commit: str | None = None
    # Tool risk classes the gateway is given (as operator patterns, per tenant): ``unknown``
    # (none: the gateway before classes), ``reads`` (the world's classes, reads imagined),
    # ``no-reads`` (the world's classes, reads not imagined) or ``confirm`` (as ``reads``, with
    # the ``confirm`` knob: the user, ``plan_user``, is asked about doubted destructive calls).
    classes: str = "unknown"
    budget: int | str = K  # trajectories per rehearsed turn, or "auto" (learned per tool)
    depth: int = 1

    @property
    def shape(self) -> str:
        """The budget and depth unless K=4 at depth 1 (those names and keys stay as they were)."""
        if self.budget == K and self.depth == 1:
            return ""
        return f" K={self.budget}" + ("" if self.depth == 1 else f" d={self.depth}")

    @property
    def name(self) -> str:
        if self.commit is None:
            return "off"
        return (
            f"{self.mode} {self.commit}"
            + ("" if self.classes == "unknown" else f" {self.classes}")
            + self.shape
        )

    @property
    def key(self) -> str:
        shape = self.shape.replace(" ", "-").replace("=", "")
        return (
            f"decisions-{self.twin.model}-{self.mode}-{self.commit or 'none'}-{self.classes}"
            + shape
        )

    def rehearsal(self) -> Rehearsal:
        if self.commit is None:
            return Rehearsal(mode="off")
        return Rehearsal(
            mode=self.mode,  # type: ignore[arg-type]
            budget=self.budget,  # type: ignore[arg-type]  # "auto" as the gateway reads it
            depth=self.depth,
            commit=self.commit,  # type: ignore[arg-type]
            deadline_ms=DEADLINE_MS,
            trace=True,
            confirm=True if self.classes == "confirm" else None,
        )


YES = "Yes, please go ahead."
NO = "No, do not do that. Please do only what I asked."


def plan_user(task: Task, held: tuple[str, ...]) -> str:
    """The user asked to confirm held calls: yes when every one is part of what they asked for
    (the task's plan), no otherwise; a user knows which cancellation they wanted."""
    planned = {call.signature for call in task.plan}
    return YES if all(signature in planned for signature in held) else NO


@dataclass
class Outcome:
    """One task of one configuration as the agent ended it; both benchmarks' episodes extend it."""

    seed: int
    world: str
    task: str
    success: bool = False
    tool_errors: int = 0
    real_calls: int = 0
    failed: str | None = None  # a request the gateway did not answer

    @property
    def pair(self) -> tuple[int, str, str]:
        """The task across configurations: what a configuration is paired against off by."""
        return (self.seed, self.world, self.task)


@dataclass
class Episode(Outcome):
    """One task of one configuration: the agent's outcome and what its turns showed."""

    retries: int = 0  # requests sent again after a failed connection
    turns: list[TurnFacts] = field(default_factory=list)
    calls: CallFacts = CallFacts()
    confirmed: int = 0  # questions (``confirm``) the user answered yes
    declined: int = 0  # and no
    errors_by_tool: dict[str, int] = field(default_factory=dict)  # real errors per tool
