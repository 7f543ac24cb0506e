"""One rehearsal in flight: the engine and store calls it makes, and the trajectories it walks.

``RehearsalContext`` is the planner's per-request workspace. It owns the bookkeeping that must be
exact — engine calls and tokens by role, faults, time by phase — and the two moves every mode is
made of: *act* (an acting call with the request's tools) and *imagine* (one rehearsal-role call
per tool call). ``walk`` chains them into a trajectory: imagine the first turn's calls, then,
up to ``depth`` steps, act on the imagined observations and imagine again, stopping at a final
answer, at an observation that is not ``ok`` (veto, tool error, unparsed), or at the depth.

Walks write into a mutable ``WalkState`` as they go, so that when a deadline cancels them the
planner still sees every observation that had arrived. Randomness comes from the injected
``random.Random``: each walk gets its own child generator, drawn in a fixed order, so seeds do not
depend on how concurrent calls interleave.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, cast

from .budget import Budget
from .checks import CHECK_CODE, ToolChecker
from .errors import GeneratorError
from .hindsight import REPEAT_CODE, real_failures
from .memory import MemoryEntry
from .messages import (
    NO_USAGE,
    AssistantTurn,
    GenerationRequest,
    GenerationResponse,
    Message,
    Role,
    ToolCall,
    Usage,
    canonical_arguments,
)
from .parsing import parse_execution_result
from .ports import Generator, MemoryStore
from .prompts import (
    GroundingObservation,
    ToolsText,
    rehearsal_messages,
    rehearsal_user_prompt,
)
from .request import PlannerSettings, RehearsalRequest
from .risk import Risk, judging_trust, turn_risk
from .trace import Ending, ImaginedObservation, Step, Trajectory
from .trust import Policy


@dataclass(slots=True)
class WalkState:
    """A trajectory being walked; ``freeze`` turns it into an immutable ``Trajectory``."""

    index: int
    samples: tuple[int, ...]
    steps: list[Step]
    ended: Ending | None = None
    arrived: dict[int, ImaginedObservation] = field(default_factory=dict)

    def begin(self, turn: AssistantTurn) -> None:
        """Start the next step with the turn that was just acted."""
        self.steps.append(Step(turn))
        self.arrived = {}

    def record(self, position: int, observation: ImaginedObservation) -> None:
        """Add one observation to the current step, keeping tool-call order."""
        self.arrived[position] = observation
        ordered = tuple(self.arrived[i] for i in sorted(self.arrived))
        self.steps[-1] = Step(self.steps[-1].turn, ordered)

    def freeze(self, unfinished: Ending = "deadline") -> Trajectory:
        return Trajectory(self.index, self.samples, tuple(self.steps), self.ended or unfinished)


class RehearsalContext:
    """Engine calls, store calls and bookkeeping for one rehearsal (see the module docstring)."""

    def __init__(
        self,
        request: RehearsalRequest,
        budget: Budget,
        *,
        generator: Generator,
        store: MemoryStore | None,
        settings: PlannerSettings,
        rng: random.Random,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.request, self.budget, self.settings = request, budget, settings
        self.generator, self.store, self.rng, self.clock = generator, store, rng, clock
        self.calls: Counter[str] = Counter()
        self.tokens: dict[str, Usage] = {}
        self.faults: list[str] = []
        self.phases: dict[str, float] = {"act": 0.0, "rehearse": 0.0, "commit": 0.0}
        self.candidates: list[AssistantTurn] = []
        self.walks: list[WalkState] = []
        self.prior: list[MemoryEntry] = []  # avoided actions remembered from earlier turns
        self.note: str | None = None  # the last memory note sent to an acting call
        self.probes: list[ImaginedObservation] = []  # imagined repeats of real failures (trust)
        self._grounding: dict[tuple[str, str], list[GroundingObservation]] = {}
        self.checker = ToolChecker(request.tools, reject_undeclared=settings.reject_undeclared)
        # Calls whose real result in this conversation was an error and still stands (hindsight).
        self.failed_for_real = real_failures(request.messages)
        # What the commit rules judge imagination by (a destructive tool's learning: trusted).
        self.trust = judging_trust(request.trust, request.risk)
        self._tools_text: ToolsText | None = None  # written at the first imagined call
        self.learned: dict[str, Any] | None = None  # under ``auto``: the K spent, and why

    def policy(self, tool: str) -> Policy:
        """The trust policy ``tool``'s imagination is under (``trusted`` when none is known)."""
        return self.request.trust.get(tool, "trusted")

    def risk_of(self, turn: AssistantTurn) -> Risk | None:
        """The turn's risk class (its riskiest call's); None for an answer."""
        return turn_risk(turn, self.request.risk)

    def check_step(self, state: WalkState) -> bool:
        """Check the current step's calls; a failing call is vetoed by the check (False).

        Two deterministic checks, the schema first: a call the request's schema refuses
        (``SCHEMA_INVALID``), then, on the first step only, a call that already failed for real
        in this conversation (``REAL_FAILURE_REPEATED``, ``rehearsal.hindsight``): later steps
        follow imagined results, after which the real failure no longer stands.
        """
        turn = state.steps[-1].turn
        first = len(state.steps) == 1
        for position, call in enumerate(turn.tool_calls):
            verdict = self.checker.check_call(call)
            if verdict.invalid:
                code, message = CHECK_CODE, verdict.message
            elif first and call.signature in self.failed_for_real:
                code = REPEAT_CODE
                message = (
                    f"this call already failed for real: {self.failed_for_real[call.signature]}"
                )
            else:
                continue
            veto = {"error_tool_call": {"code": code, "message": message}}
            observation = ImaginedObservation(
                call, "veto", veto, code, None, message, source="check"
            )
            state.record(position, observation)
            state.ended = "veto"
            return False
        return True

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = self.clock()
        try:
            yield
        finally:
            self.phases[name] += (self.clock() - started) * 1000.0

    def fault(self, kind: str, detail: str) -> None:
        self.faults.append(f"{kind}: {detail}")

    def seed(self, rng: random.Random | None = None) -> int:
        return (rng or self.rng).getrandbits(31)

    async def call(self, request: GenerationRequest) -> GenerationResponse:
        """One engine call, counted (even when it fails) and its tokens added to its role."""
        self.calls[request.role] += 1
        response = await self.generator.generate(request)
        if not response.choices:
            raise GeneratorError("engine returned no choices", role=request.role)
        self.tokens[request.role] = self.tokens.get(request.role, NO_USAGE) + response.usage
        return response

    def acting_request(
        self, messages: list[Message], *, n: int, seed: int, role: Role = "act"
    ) -> GenerationRequest:
        commit = role == "commit"
        return GenerationRequest(
            role=role,
            messages=tuple(messages),
            tools=self.request.tools,
            n=n,
            temperature=self.settings.commit_temperature if commit else self.budget.temperature,
            top_p=self.budget.top_p,
            max_tokens=self.request.max_tokens,
            seed=seed,
            extra=self.request.extra,
        )

    async def act(
        self, messages: list[Message], *, n: int, seed: int, role: Role = "act"
    ) -> tuple[AssistantTurn, ...]:
        response = await self.call(self.acting_request(messages, n=n, seed=seed, role=role))
        return response.choices

    async def plain(self) -> AssistantTurn:
        """The unrehearsed acting call a pass-through would make, with the client's sampling."""
        request = self.request
        response = await self.call(
            GenerationRequest(
                role="act",
                messages=request.messages,
                tools=request.tools,
                temperature=request.temperature,
                top_p=request.top_p,
                max_tokens=request.max_tokens,
                seed=request.seed,
                extra=request.extra,
            )
        )
        return response.choices[0]

    def new_walk(self, samples: tuple[int, ...], turn: AssistantTurn) -> WalkState:
        """A trajectory for ``turn``; over at once for an answer or a call the check vetoes."""
        state = WalkState(len(self.walks), samples, [Step(turn)])
        first = not self.walks
        if turn.is_answer:
            state.ended = "answer"
        elif self.check_step(state):
            state.ended = self._skip(turn, self._adopt(turn) if first else None)
        if first and self.learned is None and self.budget.auto:
            self._adopt(None)  # an answer, or a call a check vetoed: the cap's alternatives
        self.walks.append(state)
        return state

    def _adopt(self, turn: AssistantTurn | None) -> int | None:
        """Under ``auto``, the K the anchor's tools learned becomes the budget (``rehearsal.auto``;
        0, not imagined, is 1 on a probe); ``turn`` None: no imagination needed, ``max_k``."""
        if not self.budget.auto:
            return None
        auto = self.settings.auto
        k, why, probe = auto.max_k, "no imagination needed to judge the anchor", False
        if turn is not None:
            default = (auto.learning_k, "no figures for this tool")
            k, why = max(self.request.auto.get(c.name, default) for c in turn.tool_calls)
            k, probe = (1, True) if k == 0 and self.rng.random() < auto.probe_rate else (k, False)
        k = min(k, self.budget.budget)
        self.learned = {"budget": k, "why": why, "probe": probe}
        self.budget = replace(self.budget, budget=max(k, 1))
        return k

    def learned_off(self, turn: AssistantTurn) -> bool:
        """Under ``auto``, whether a tool of ``turn`` learned K = 0 (not to be imagined)."""
        learned = self.request.auto
        return self.budget.auto and any(learned.get(c.name, (1, ""))[0] == 0
                                        for c in turn.tool_calls)  # fmt: skip

    def _skip(self, turn: AssistantTurn, learned: int | None = None) -> Ending | None:
        """Why ``turn`` is not imagined, if it is not: ``read`` or ``skipped`` (by trust).

        Destructive: always; reads only: not unless ``imagine_reads``. Under ``auto``, the anchor
        when its ``learned`` K is above 0, another turn not when a tool of it learned 0. Else
        trust: never under ``off``, under ``ignore_vetoes`` within the probe rate (one draw).
        """
        risk = self.risk_of(turn)
        if risk == "destructive":
            return None
        if risk == "read_only" and not self.request.imagine_reads:
            return "read"
        if learned is not None:
            return "skipped" if learned == 0 else None
        if self.learned_off(turn):
            return "skipped"
        policies = {self.policy(call.name) for call in turn.tool_calls}
        if "off" in policies:
            return "skipped"
        if "ignore_vetoes" in policies and self.rng.random() >= self.settings.probe_rate:
            return "skipped"
        return None

    async def prefetch_grounding(self, calls: Iterable[ToolCall]) -> None:
        """Read the grounding of ``calls`` at once, before their imaginations start.

        Imaginations that then start together reach the generator in the same turn of the event
        loop, where an adapter may send them to the engine as one call (the server's batches).
        """
        first: dict[tuple[str, str], ToolCall] = {}
        for call in calls:
            first.setdefault((call.name, canonical_arguments(call.arguments)), call)
        await asyncio.gather(*(self.grounding_for(call) for call in first.values()))

    async def grounding_for(self, call: ToolCall) -> list[GroundingObservation]:
        """Real results of this tool for the few-shot section; a store failure means none."""
        tenant = self.request.tenant
        if self.store is None or tenant is None or self.settings.grounding_limit <= 0:
            return []
        key = (call.name, canonical_arguments(call.arguments))
        if key not in self._grounding:
            limit = self.settings.grounding_limit
            try:
                raw = await self.store.grounding(tenant, key[0], key[1], limit)
            except Exception as exc:  # any backend failure: rehearse without grounding
                self.fault("store_error", f"grounding ({type(exc).__name__})")
                raw = []
            found = [GroundingObservation.from_dict(item) for item in raw]
            self._grounding[key] = [g for g in found if g is not None][:limit]
        return self._grounding[key]

    async def imagine(
        self, history: list[Message], turn: AssistantTurn, call: ToolCall, seed: int
    ) -> ImaginedObservation:
        """One rehearsal-role call: the imagined result of ``call``. Raises GeneratorError."""
        examples = await self.grounding_for(call)
        if self._tools_text is None:
            self._tools_text = ToolsText(self.request.tools)
        prompt = rehearsal_user_prompt(
            tools=self._tools_text,
            grounding=examples,
            history=history,
            acting_turn=turn,
            call=call,
        )
        request = GenerationRequest(
            role="rehearse",
            messages=rehearsal_messages(self.settings.system_instruction, prompt),
            n=1,
            temperature=self.budget.temperature,
            top_p=self.budget.top_p,
            max_tokens=self.settings.rehearse_max_tokens,
            seed=seed,
            extra=self.settings.rehearse_extra,
        )
        started = self.clock()
        response = await self.call(request)
        choice = response.choices[0]
        parsed = parse_execution_result(
            choice.content,
            truncated=choice.finish_reason == "length",
            call_name=call.name,
            call_arguments=call.parsed_arguments,
        )
        elapsed = (self.clock() - started) * 1000.0
        return ImaginedObservation(
            call, parsed.verdict, parsed.result, parsed.code, choice.content, parsed.detail,
            len(examples), elapsed, parse=parsed.parse,
        )  # fmt: skip

    async def _imagine_step(
        self, state: WalkState, history: list[Message], rng: random.Random
    ) -> bool:
        """Imagine every call of the current step concurrently; False when an engine call failed."""
        turn = state.steps[-1].turn
        seeds = [self.seed(rng) for _ in turn.tool_calls]
        failed = False

        async def one(position: int, call: ToolCall) -> None:
            nonlocal failed
            try:
                state.record(position, await self.imagine(history, turn, call, seeds[position]))
            except GeneratorError as exc:
                self.fault("engine_error", f"rehearse {call.name}: {exc}")
                failed = True

        async with asyncio.TaskGroup() as group:
            for position, call in enumerate(turn.tool_calls):
                group.create_task(one(position, call))
        return not failed

    async def walk(self, state: WalkState, rng: random.Random, *, depth: int | None = None) -> None:
        """Walk one trajectory to its end (module docstring); engine failures end it, not raise.

        ``depth`` caps the steps below the budget's (a reflected action is verified one deep).
        """
        history = list(self.request.messages)
        for depth_now in range(1, (depth or self.budget.depth) + 1):
            if depth_now > 1:
                try:
                    turn = (await self.act(history, n=1, seed=self.seed(rng)))[0]
                except GeneratorError as exc:
                    self.fault("engine_error", f"act at depth {depth_now}: {exc}")
                    state.ended = "engine_error"
                    return
                state.begin(turn)
                if turn.is_answer:
                    state.ended = "answer"
                    return
                if not self.check_step(state):
                    return
                skip = self._skip(turn)
                if skip is not None:
                    state.ended = skip
                    return
            if not await self._imagine_step(state, history, rng):
                state.ended = "engine_error"
                return
            step = state.steps[-1]
            if step.worst is not None:
                state.ended = cast(Ending, step.worst.verdict)  # never "ok": worst excludes it
                return
            if step.unread:  # nothing to continue from: an unread result is no observation
                state.ended = "unparsed"
                return
            history.append(step.turn.to_message())
            history += [o.as_tool_message() for o in step.observations]
        state.ended = "depth"
