"""The real-result feedback loop: what a client's tool results teach the gateway.

When the gateway commits a tool call it mints the call's id and keeps, under that id, what it had
imagined the call would return (``pending``). When a later request carries a ``tool`` message
answering such an id, ``Feedback.collect`` takes the pending record (atomically, so two replicas
never both count it) and records:

- **outcome agreement** — did imagination predict the real *outcome* (error vs success)? The
  primary fidelity figure; the pair (imagined, real) also feeds the tenant's trust counts for the
  tool (``rehearsal.trust``), which decide whether that tool's imagined vetoes are acted on — a
  veto in ``ee``/``eo`` when its call was committed whatever it said (the record's
  ``unconditional``), else in the weighed ``we``/``wo``;
- **structural fidelity** — ``rehearsal.fidelity`` between the imagined and the real result (only
  when the committed action had been rehearsed; secondary: a wrong world can still look similar);
- **real tool-call latency** — from our response to the arrival of the result (wall clock, so a
  replica other than the one that answered can measure it);
- **grounding** — the real result, which later rehearsals of the same tool by the same tenant
  receive as few-shot examples;
- **session memory** — the real outcome, marked as real (a real tool error is remembered as an
  action to avoid; imagined vetoes are never stored there);
- the **learned budget's** counts (``rehearsal.auto``) of the anchor's tool, when the record
  names one (the anchored rule): the real outcome, and whether the call replaced the anchor;
- the rehearsal's stored **trace**, extended with this feedback.

Tool messages answering ids we did not mint are none of our business: they pass through untouched.
Store failures are counted and skipped — feedback is never worth failing a request for — and
every write above runs beside the answer (``server/store/writer.py``), never before it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from rehearsal_gateway.rehearsal.auto import auto_cells, class_pool
from rehearsal_gateway.rehearsal.fidelity import fidelity, parse_observation
from rehearsal_gateway.rehearsal.hindsight import content_text, real_error
from rehearsal_gateway.rehearsal.memory import MemoryEntry
from rehearsal_gateway.rehearsal.messages import canonical_json
from rehearsal_gateway.rehearsal.risk import RISKS
from rehearsal_gateway.rehearsal.trust import cell

from ..errors import StoreUnavailable
from ..store.backends import RehearsalStore
from ..store.writer import StoreWriter, Write
from ..telemetry.metrics import GatewayMetrics
from .committed import TOOL_CALL_PREFIX


def pending_record(
    *,
    tenant: str,
    session: str | None,
    rehearsal_id: str,
    tool: str,
    arguments: Any,
    imagined: Any,
    imagined_outcome: str | None,
    unconditional: bool = False,
    risk: str = "unknown",
    anchor_tool: str | None = None,
    replaced: bool = False,
    anchor_imagined: bool = False,
    anchor_risk: str = "unknown",
) -> dict[str, Any]:
    """What is kept under a minted tool-call id until its real result arrives.

    ``unconditional``: the call was committed whatever imagination said of it, so an imagined
    failure's real outcome counts as an unselected veto, else as a weighed one (rehearsal.trust).
    ``risk``: the call's risk class (rehearsal.risk), the label of its real result's count.
    ``anchor_tool``: the tool whose learned budget (rehearsal.auto) this result counts for, and
    ``replaced``: whether the call was committed instead of that tool's anchor (imagination
    vetoed it); ``anchor_imagined``: whether the anchor was imagined; ``anchor_risk``: its class
    (whose pooled row the result counts in too).
    """
    return {
        "tenant": tenant,
        "session": session,
        "rehearsal_id": rehearsal_id,
        "tool": tool,
        "arguments": arguments,
        "imagined": imagined,
        "imagined_outcome": imagined_outcome,
        "unconditional": unconditional,
        "risk": risk,
        "anchor_tool": anchor_tool,
        "replaced": replaced,
        "anchor_imagined": anchor_imagined,
        "anchor_risk": anchor_risk,
        "sent_at": time.time(),
    }


def answered_ids(messages: Sequence[Any]) -> list[tuple[str, Any]]:
    """(tool_call_id, content) of the trailing tool messages that answer ids we minted."""
    found: list[tuple[str, Any]] = []
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") != "tool":
            break
        call_id = message.get("tool_call_id")
        if isinstance(call_id, str) and call_id.startswith(TOOL_CALL_PREFIX):
            found.append((call_id, message.get("content")))
    found.reverse()
    return found


def imagined_error(outcome: str | None) -> bool | None:
    """Whether an imagined outcome predicted failure; None when it predicted nothing usable."""
    if outcome is None or outcome == "unparsed":
        return None
    return outcome.startswith("veto") or outcome == "error"


class Feedback:
    """Matches real tool results to the imagined ones and records what they show.

    Taking a pending record is the one store call on the request's path (its summary is in a
    rehearsed answer); every write it leads to is handed to the ``StoreWriter``. A rehearsed
    request waits, at most the writer's ``settle_wait_s``, for those writes, because the
    rehearsal it is about to run reads them (the real failure in session memory, the real result
    as grounding, the trust counts); their failure never degrades it. A pass-through answer
    carries no feedback, so ``collect_later`` takes the whole collection off its path.
    """

    def __init__(self, store: RehearsalStore, metrics: GatewayMetrics, writer: StoreWriter) -> None:
        self.store = store
        self.metrics = metrics
        self.writer = writer

    async def collect(self, tenant: str, messages: Sequence[Any]) -> list[dict[str, Any]]:
        """Record every new real result in ``messages``; one summary per matched call."""
        recorded, writes = await self._take(tenant, answered_ids(messages))
        if writes:
            await asyncio.wait(writes, timeout=self.writer.settle_wait_s)
        return recorded

    def collect_later(self, tenant: str, messages: Sequence[Any]) -> None:
        """The whole collection beside the answer (for answers that do not carry it)."""
        answered = answered_ids(messages)

        async def take() -> None:
            await self._take(tenant, answered)

        if answered:
            after = [("pending", tenant, call_id) for call_id, _ in answered]
            self.writer.submit("feedback", take, after=after)

    async def _take(
        self, tenant: str, answered: list[tuple[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[asyncio.Task[None]]]:
        recorded: list[dict[str, Any]] = []
        writes: list[asyncio.Task[None]] = []
        for call_id, content in answered:
            # The turn that committed this call may still be writing its record (beside its
            # answer): taken from the writer when this process holds it, else waited for.
            mark = ("pending", tenant, call_id)
            record = self.writer.take_held(mark)
            if record is None:
                await self.writer.settled(mark)
                try:
                    record = await self.store.take_pending(tenant, call_id)
                except StoreUnavailable as exc:
                    self.metrics.store_error(exc.op)
                    continue
            if record is None:  # not ours, expired, already recorded, or another tenant's
                continue
            summary, write = self._record(tenant, call_id, record, content)
            recorded.append(summary)
            rehearsal_id = record.get("rehearsal_id")
            task = self.writer.submit(
                "feedback",
                write,
                marks=[("trust", tenant), ("trace", tenant, rehearsal_id)],
                after=[("trace", tenant, rehearsal_id)],
            )
            if task is not None:
                writes.append(task)
        return recorded, writes

    def _record(
        self, tenant: str, call_id: str, record: dict[str, Any], content: Any
    ) -> tuple[dict[str, Any], Write]:
        """The feedback summary (metrics recorded now) and the write of what it teaches."""
        real = parse_observation(content_text(content))
        real_s = max(0.0, time.time() - float(record.get("sent_at") or time.time()))
        imagined, outcome = record.get("imagined"), record.get("imagined_outcome")
        score = fidelity(imagined, real) if outcome is not None else None
        predicted, failed = imagined_error(outcome), real_error(real)
        self.metrics.observe_real_tool_call(real_s)
        risk = record.get("risk")
        self.metrics.observe_real_result(risk if risk in RISKS else "unknown", failed)
        if score is not None:
            self.metrics.observe_fidelity(score, outcome or "none")
        if predicted is not None:
            self.metrics.observe_outcome_prediction(predicted, failed)
        summary = {
            "tool_call_id": call_id,
            "rehearsal_id": record.get("rehearsal_id"),
            "tool": record.get("tool"),
            "outcome_agreement": None if predicted is None else predicted == failed,
            "fidelity": score,
            "imagined_outcome": outcome,
            "real_outcome": "error" if failed else "ok",
            "real_ms": round(real_s * 1000.0, 3),
        }

        async def write() -> None:
            if predicted is not None:
                try:
                    weighed = record.get("unconditional") is not True
                    pair = cell(predicted, failed, weighed=weighed)
                    await self.store.record_trust(tenant, str(record.get("tool")), pair)
                except StoreUnavailable as exc:
                    self.metrics.store_error(exc.op)
            anchor_tool = record.get("anchor_tool")
            if isinstance(anchor_tool, str):
                try:
                    replaced, seen = record.get("replaced"), record.get("anchor_imagined")
                    cells = auto_cells(replaced is True, failed, seen is True)
                    risk = record.get("anchor_risk")
                    pool = class_pool(risk if risk in RISKS else "unknown")
                    await self.store.record_budget(tenant, (anchor_tool, pool), cells)
                except StoreUnavailable as exc:
                    self.metrics.store_error(exc.op)
            await self._remember(tenant, record, real, failed, summary)

        return summary, write

    async def _remember(
        self, tenant: str, record: dict[str, Any], real: Any, failed: bool, summary: dict[str, Any]
    ) -> None:
        """Grounding, session memory and the trace's note; a store failure ends the write."""
        tool, arguments = str(record.get("tool")), record.get("arguments")
        canonical_args = canonical_json(arguments)
        entry = MemoryEntry(
            outcome="error" if failed else "ok",
            score=0.0 if failed else 1.0,
            actions=(f"{tool} {canonical_args}",),
            imagined=canonical_json(real),
            source="real",
        )
        session, rehearsal_id = record.get("session"), record.get("rehearsal_id")
        await self.store.save_grounding(
            tenant, tool, canonical_args, {"name": tool, "arguments": arguments, "result": real}
        )
        if isinstance(session, str):
            await self.store.append_memory(tenant, session, [entry.to_dict()])
        if isinstance(rehearsal_id, str):
            trace = await self.store.load_trace(tenant, rehearsal_id)
            if trace is not None:
                trace.setdefault("feedback", []).append({**summary, "real_result": real})
                await self.store.save_trace(tenant, rehearsal_id, trace)
