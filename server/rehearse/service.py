"""Rehearsed chat completions: the gateway's main job (DESIGN §4–§7).

``RehearsalService`` takes a validated chat call whose budget asks for rehearsal, runs the pure
core's planner against the engines (``EngineGenerator``) and the store, and turns the result into
an OpenAI answer: one committed turn with gateway-minted tool-call ids, a ``rehearsal`` summary,
``usage`` counting every token spent, and the ``X-Rehearsal-Id`` / ``X-Rehearsal-Ms`` headers. It
keeps what was imagined — the trace by rehearsal id, and per committed call the imagined
observation that the real result will later be compared with.

Streamed answers are run by ``RehearsalResponse`` (``server/http/rehearsal_response.py``) inside the
response; both paths share ``RehearsalRun`` below, so the committed turn and what is stored are the
same either way.
"""

from __future__ import annotations

import asyncio
import functools
import random
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from rehearsal_gateway.rehearsal.budget import Budget, BudgetCaps, names_a_knob, resolve_budget
from rehearsal_gateway.rehearsal.errors import BudgetError, GeneratorError
from rehearsal_gateway.rehearsal.messages import AssistantTurn
from rehearsal_gateway.rehearsal.planner import Planner
from rehearsal_gateway.rehearsal.request import PlannerSettings, RehearsalRequest
from rehearsal_gateway.rehearsal.risk import (
    UNKNOWN,
    RiskPolicy,
)
from rehearsal_gateway.rehearsal.trace import RehearsalResult
from rehearsal_gateway.rehearsal.trust import (
    Counts,
    Policy,
    TrustSettings,
    cell,
    policies,
    trust_row,
)

from ..chat_call import ChatCall, JsonAnswer
from ..engines.calls import EngineCalls
from ..errors import (
    EngineError,
    EngineFailed,
    NotFound,
    StoreUnavailable,
)
from ..store.backends import RehearsalStore
from ..store.fair_use import FairUse
from ..store.writer import StoreWriter
from ..telemetry.metrics import GatewayMetrics
from .batching import BatchRoute
from .committed import (
    completion_body,
    mint_completion_id,
    mint_rehearsal_id,
    with_minted_ids,
)
from .engine_port import EngineGenerator
from .feedback import imagined_error, pending_record
from .inputs import imagined_for, rehearsal_request, resolve_knobs, tool_name
from .learned import anchor_of, budget_rows, learned_budgets


@dataclass
class RehearsalRun:
    """One rehearsed request in flight: its ids, its planner run, and what it stores."""

    service: RehearsalService
    call: ChatCall
    budget: Budget
    feedback: list[dict[str, Any]]
    rehearsal_id: str = field(default_factory=mint_rehearsal_id)
    completion_id: str = field(default_factory=mint_completion_id)
    created: int = field(default_factory=lambda: int(time.time()))
    imagined_done: int = 0
    store_faults: list[str] = field(default_factory=list)
    ends_at: float | None = None  # set when the run starts: deadline + one commit

    @property
    def session(self) -> str:
        return self.call.session or self.call.affinity.hex()

    @property
    def model(self) -> str:
        return self.call.request.model or self.call.model or "unknown"

    @property
    def mode(self) -> str:
        return self.budget.mode

    @property
    def include_usage(self) -> bool:
        """Whether a streamed answer ends with a usage chunk (``stream_options``)."""
        options = self.call.body.get("stream_options")
        return isinstance(options, dict) and bool(options.get("include_usage"))

    def generator(self) -> EngineGenerator:
        return EngineGenerator(
            self.service.calls,
            model=self.call.model,
            affinity=self.call.affinity,
            on_call=self._on_call,
            rehearse_priority=self.service.rehearse_priority,
            ends_at=self.ends_at,
            batch_route=self.service.batch_route,
        )

    def _on_call(self, role: str, seconds: float) -> None:
        if role == "rehearse":
            self.imagined_done += 1
            self.service.metrics.observe_imagined(seconds)

    async def trust(self) -> dict[str, Policy]:
        """The trust policy of each offered tool for this tenant; a store failure: learning."""
        names = [name for tool in self.call.body["tools"] if (name := tool_name(tool))]
        settings = self.service.trust_settings
        try:
            raw = await self.service.store.trust_table(self.call.tenant) if settings.enabled else {}
        except StoreUnavailable as exc:
            self.service.metrics.store_error(exc.op)
            self.store_faults.append(exc.op)
            raw = {}
        table = {tool: Counts.from_mapping(row) for tool, row in raw.items()}
        return policies(names, table, settings)

    async def learned(self, request: RehearsalRequest) -> dict[str, tuple[int, str]]:
        """Under ``budget: "auto"``: each offered tool's learned K and why (rehearsal.auto); a
        store failure: none (each tool then gets ``learning_k``)."""
        try:
            raw = await self.service.store.budget_table(self.call.tenant)
        except StoreUnavailable as exc:
            self.service.metrics.store_error(exc.op)
            self.store_faults.append(exc.op)
            return {}
        return learned_budgets(raw, request, self.service.planner.auto)

    async def run(self) -> RehearsalResult:
        """The planner's run; an engine failure on every acting call is the engine's error."""
        bound = self.budget.deadline_ms / 1000.0 + self.service.commit_timeout
        self.ends_at = asyncio.get_running_loop().time() + bound
        planner = Planner(self.generator(), self.service.store, self.service.planner)
        seed = self.call.body.get("seed")
        rng = random.Random(seed if isinstance(seed, int) else secrets.randbits(64))
        risk = self.service.risk.for_tenant(self.call.tenant)
        request = rehearsal_request(self.call, self.session, await self.trust(), self.budget, risk)
        if self.budget.auto:
            request = replace(request, auto=await self.learned(request))
        try:
            return await planner.run(request, self.budget, rng=rng)
        except GeneratorError as exc:
            cause = exc.__cause__
            if isinstance(cause, EngineError):
                raise cause from None
            raise EngineFailed(f"no engine produced a usable answer ({exc})") from None

    async def settle(self, result: RehearsalResult, turn: AssistantTurn) -> dict[str, Any]:
        """Keep the trace and the pending observations; the response's ``rehearsal`` object."""
        tenant = self.call.tenant
        brief = result.summary()
        summary: dict[str, Any] = {"id": self.rehearsal_id, **brief}
        trace = {
            **brief,
            **result.details(),
            "id": self.rehearsal_id,
            "model": self.model,
            "created": self.created,
            "committed": turn.to_dict(),
            "feedback_in": self.feedback,
        }
        pending = {}
        anchor, replaced, imagined = anchor_of(result)
        for tool_call, risk in zip(turn.tool_calls, result.committed_risk(), strict=True):
            seen = imagined_for(result, tool_call.signature)
            pending[tool_call.id] = pending_record(
                tenant=tenant, session=self.session, rehearsal_id=self.rehearsal_id,
                tool=tool_call.name, arguments=tool_call.parsed_arguments,
                imagined=None if seen is None else seen.result,
                imagined_outcome=None if seen is None else seen.outcome,
                unconditional=result.commit_unconditional, risk=risk,
                anchor_tool=anchor if replaced else (anchor and tool_call.name), replaced=replaced,
                anchor_imagined=imagined,
                anchor_risk=result.risk.get(anchor, UNKNOWN).risk if anchor else "unknown",
            )  # fmt: skip
        # Beside the answer, not before it: only later requests read these (the next turn's
        # feedback, GET /v1/rehearsals/{id}), and they wait for the write (server/store/writer.py).
        service, store = self.service, self.service.store
        if service.fair_use is not None:  # this rehearsal's engine calls, against the key's limit
            calls = sum(result.calls.values())
            service.writer.submit(
                "charge", functools.partial(service.fair_use.charge, tenant, calls)
            )
        self._record_probes(result, turn)
        marks = [("trace", tenant, self.rehearsal_id)]
        marks += [("pending", tenant, call_id) for call_id in pending]
        task = service.writer.submit(
            "settle",
            functools.partial(store.save_settled, tenant, self.rehearsal_id, trace, pending),
            marks=marks,
        )
        for call_id in pending:  # this process's next turn may take it before it is written
            service.writer.hold(("pending", tenant, call_id), task, pending, call_id)
        await service.writer.keep_up(task)
        if summary["degraded"] is None and (
            self.store_faults or "store_error" in str(result.faults)
        ):
            summary["degraded"] = "store_unavailable"
        summary["feedback"] = self.feedback
        if self.budget.trace:
            summary["trace"] = trace["trace"]
            summary["candidates"] = trace["candidates"]
        self.service.metrics.observe_rehearsal(result, summary["degraded"])
        return summary

    def _record_probes(self, result: RehearsalResult, turn: AssistantTurn) -> None:
        """Trust's pairs for the repeats of a real failure imagined as probes (rehearsal.planner):
        the real outcome is the conversation's error, and the pair is an unselected sample, as
        the anchor's would have been had it been committed. A probed call that was committed
        after all is left to its real result."""
        committed = {call.signature for call in turn.tool_calls}
        for probe in result.probes:
            predicted = imagined_error(probe.outcome)
            if predicted is None or probe.call.signature in committed:
                continue
            record = functools.partial(
                self.service.store.record_trust, self.call.tenant, probe.call.name,
                cell(predicted, True),
            )  # fmt: skip
            self.service.writer.submit("feedback", record, marks=[("trust", self.call.tenant)])

    def headers(self, result: RehearsalResult) -> dict[str, str]:
        return {
            "x-rehearsal-id": self.rehearsal_id,
            "x-rehearsal-ms": f"{result.timings.total:.1f}",
        }


def _off_unless_asked(defaults: Budget, caps: BudgetCaps) -> bool:
    """Whether a request that names no knob passes through (the shipped defaults): such a
    request then needs no budget resolved on the pass-through path. Defaults
    over their caps are left to each request's resolution, which answers them with a 400."""
    try:
        return not resolve_budget(None, None, defaults=defaults, caps=caps).active
    except BudgetError:
        return False


class RehearsalService:
    """Runs rehearsals for the chat service; owns the knobs' defaults, caps and planner settings."""

    def __init__(
        self,
        calls: EngineCalls,
        store: RehearsalStore,
        metrics: GatewayMetrics,
        writer: StoreWriter,
        *,
        defaults: Budget,
        caps: BudgetCaps,
        planner: PlannerSettings,
        trust: TrustSettings | None = None,
        risk: RiskPolicy | None = None,
        rehearse_priority: int | None = None,
        batch: bool = False,
        commit_timeout: float = 60.0,
        fair_use: FairUse | None = None,
    ) -> None:
        self.calls = calls
        self.rehearse_priority = rehearse_priority
        self.batch_route = BatchRoute() if batch else None
        self.commit_timeout = commit_timeout
        self.fair_use = fair_use
        self.store = store
        self.metrics = metrics
        self.writer = writer
        self.defaults = defaults
        self.caps = caps
        self._off_unless_asked = _off_unless_asked(defaults, caps)
        self.planner = planner
        self.trust_settings = trust or TrustSettings()
        self.risk = risk or RiskPolicy()

    async def trust_table(self, tenant: str) -> dict[str, Any]:
        """``GET /v1/rehearsals/trust``: this tenant's counts, rates and policies, per tool."""
        await self.writer.settled(("trust", tenant))
        raw = await self.store.trust_table(tenant)
        table = {tool: Counts.from_mapping(row) for tool, row in raw.items()}
        settings = self.trust_settings
        rows = [trust_row(tool, table, settings) for tool in sorted(table)]
        return {
            "object": "list",
            "data": rows,
            "budget": await self._budget_rows(tenant, table),
            "settings": {
                "enabled": settings.enabled,
                "min_samples": settings.min_samples,
                "trust_threshold": settings.trust_threshold,
                "lift_threshold": settings.lift_threshold,
                "risk_ratio": settings.risk_ratio,
                "min_vetoes": settings.min_vetoes,
                "off_threshold": settings.off_threshold,
                "auto_off": settings.auto_off,
                "window": settings.window,
                "pins": dict(settings.pins),
            },
        }

    async def _budget_rows(self, tenant: str, trust: Mapping[str, Counts]) -> dict[str, Any]:
        """The trust route's ``budget`` section (``server/rehearse/learned.py``)."""
        raw = await self.store.budget_table(tenant)
        risk = self.risk.for_tenant(tenant)
        return budget_rows(raw, trust, self.trust_settings, risk, self.planner.auto)

    async def trace(self, tenant: str, rehearsal_id: str) -> dict[str, Any]:
        """A stored trace of ``tenant``; 404 when unknown, expired or another tenant's."""
        await self.writer.settled(("trace", tenant, rehearsal_id))
        trace = await self.store.load_trace(tenant, rehearsal_id)
        if trace is None:
            raise NotFound(f"no rehearsal {rehearsal_id!r} (unknown, expired, or not yours)")
        return trace

    async def admit(self, tenant: str, budget: Budget) -> None:
        """The key's fair use of rehearsal: its cost cap (400) and engine calls (429)."""
        if self.fair_use is not None:
            await self.fair_use.admit_rehearsal(tenant, budget.budget, budget.depth)

    def budget_for(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> Budget | None:
        """The call's budget when it is to be rehearsed (400 on a bad knob), else ``None``."""
        if self._off_unless_asked and "rehearsal" not in body and not names_a_knob(headers):
            return None
        return resolve_knobs(body, headers, defaults=self.defaults, caps=self.caps)

    async def answer(
        self, call: ChatCall, budget: Budget, feedback: list[dict[str, Any]]
    ) -> JsonAnswer | RehearsalRun:
        """Rehearse ``call``: a whole JSON answer, or a rehearsal to run inside the response."""
        await self.admit(call.tenant, budget)
        if self.risk.for_tenant(call.tenant).require_confirm and not budget.confirm:
            budget = replace(budget, confirm=True)  # the operator requires it for this key
        rehearsal = RehearsalRun(self, call, budget, feedback)
        if call.stream:
            return rehearsal
        result = await rehearsal.run()
        turn = with_minted_ids(result.turn)
        summary = await rehearsal.settle(result, turn)
        body = completion_body(
            completion_id=rehearsal.completion_id,
            created=rehearsal.created,
            model=rehearsal.model,
            turn=turn,
            usage=result.usage,
            rehearsal=summary,
        )
        return JsonAnswer(
            orjson.dumps(body),
            mode=budget.mode,
            headers=rehearsal.headers(result),
            outcome="degraded" if summary["degraded"] else None,
            rehearsal=summary,
        )
