"""``POST /v1/responses``: rehearsed like a chat completion when it offers function tools.

The Responses request is read (``server/responses_protocol.py``), its rehearsal knobs resolved
exactly as for chat (body ``rehearsal`` object, ``X-Rehearsal-*`` headers, server defaults and
caps, a budget alone turning rehearsal on). When they ask for rehearsal and every tool is a
function, the request is translated into a chat call and served by the **same** rehearsal
service as chat completions — the same planner, summary, trace, pending observations and
feedback (``function_call_output`` items are tool results) — and the committed turn is written
as a ``response`` object or its event stream (``server/rehearse/responses_writer.py``).
Everything else (no tools, other tool types, rehearsal off) is relayed to an engine, which
serves ``/v1/responses`` itself, with only our ``rehearsal`` field and the tools' MCP
``annotations`` (the gateway's to read, ``rehearsal/risk.py``) removed.

``previous_response_id`` names a response kept by whoever answered it; a rehearsed answer is
the gateway's and is not kept as a response, so a rehearsed request that sends one is refused
with a 400 (send the whole conversation as ``input``, as the SDKs' default agents do). ``store``
is accepted and answered with ``"store": false``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from rehearsal_gateway.rehearsal.budget import Budget
from rehearsal_gateway.rehearsal.risk import has_annotations, strip_annotations

from ..chat_call import PASSTHROUGH, ChatCall, JsonAnswer
from ..engines.calls import StreamAnswer
from ..errors import InvalidRequest
from ..rehearse.committed import with_minted_ids
from ..rehearse.feedback import Feedback
from ..rehearse.responses_writer import ResponseWriter
from ..rehearse.service import RehearsalRun, RehearsalService
from ..responses_protocol import (
    ResponsesRequest,
    has_only_function_tools,
    parse_responses_request,
    to_chat_body,
)
from .relayed import relay_affinity
from .service import ChatService, decode_json_object

RESPONSES_PATH = "/v1/responses"


@dataclass(frozen=True, slots=True)
class ResponsesCall:
    """One validated Responses request: rehearsed (``chat`` set) or relayed (``payload``)."""

    request: ResponsesRequest
    body: dict[str, Any]
    payload: bytes  # what an engine receives when relayed
    model: str | None
    affinity: bytes
    chat: ChatCall | None = None  # the translated chat call, when rehearsed


@dataclass(eq=False, slots=True)
class RehearsedResponse:
    """A streamed rehearsed response, run while the route's response streams."""

    rehearsal: RehearsalRun
    writer: ResponseWriter

    @property
    def mode(self) -> str:
        return self.rehearsal.budget.mode


class ResponsesService:
    """Answers Responses requests with the chat service's engines and the rehearsal service."""

    def __init__(
        self, chat: ChatService, rehearsal: RehearsalService, feedback: Feedback | None
    ) -> None:
        self.chat = chat
        self.rehearsal = rehearsal
        self.feedback = feedback

    def _budget(self, request: ResponsesRequest, body: Mapping[str, Any],
                headers: Mapping[str, str]) -> Budget | None:  # fmt: skip
        knobs = {
            "rehearsal": body.get("rehearsal"),
            "tools": request.tools if has_only_function_tools(request) else None,
            "tool_choice": request.tool_choice,
        }
        return self.rehearsal.budget_for(knobs, headers)

    def prepare(
        self, raw: bytes, *, session_id: str | None, tenant: str, headers: Mapping[str, str]
    ) -> ResponsesCall:
        """Validate the body and its knobs; decide between rehearsing and relaying."""
        body = decode_json_object(raw)
        switch = self.chat.switch
        if switch is not None and isinstance(body.get("model"), str):
            found = switch.split(body["model"])  # MODEL@parallel-4, as for chat
            if found is not None:
                body["model"], knobs = found
                headers = {**knobs, **headers}  # the request's own headers win
                raw = orjson.dumps(body)  # relayed as the plain model
        request = parse_responses_request(body)
        model = self.chat.pool.resolve_model(request.model)
        affinity = relay_affinity(session_id, body)
        if self._budget(request, body, headers) is None:
            payload = raw
            # As for chat: tools' MCP annotations are the gateway's, never an engine's (vLLM's
            # Responses request refuses fields it does not know).
            annotated = b'"annotations"' in raw and has_annotations(body.get("tools"))
            if model != request.model or "rehearsal" in body or annotated:
                engine_body = {k: v for k, v in body.items() if k != "rehearsal"}
                if annotated:
                    engine_body["tools"] = list(strip_annotations(body["tools"]))
                payload = orjson.dumps({**engine_body, "model": model})
            return ResponsesCall(request, body, payload, model, affinity)
        if request.previous_response_id is not None:
            raise InvalidRequest(
                "previous_response_id cannot be combined with rehearsal: the gateway does not "
                "keep responses; send the whole conversation as input",
                param="previous_response_id",
            )
        chat_body = to_chat_body(request, body)
        chat = self.chat.prepare(
            orjson.dumps(chat_body), session_id=session_id, tenant=tenant, headers=headers
        )
        return ResponsesCall(request, body, raw, model, chat.affinity, chat)

    async def complete(self, call: ResponsesCall) -> JsonAnswer | StreamAnswer | RehearsedResponse:
        """Rehearse (feeding back real results first) or relay one Responses call."""
        chat = call.chat
        if chat is None or chat.budget is None:
            return await self._relay(call)
        budget = chat.budget
        await self.rehearsal.admit(chat.tenant, budget)
        learned: list[dict[str, Any]] = []
        if self.feedback is not None:
            learned = await self.feedback.collect(chat.tenant, chat.body["messages"])
        rehearsal = RehearsalRun(self.rehearsal, chat, budget, learned)
        writer = ResponseWriter(call.request, rehearsal.model)
        if call.request.stream:
            return RehearsedResponse(rehearsal, writer)
        result = await rehearsal.run()
        turn = with_minted_ids(result.turn)
        summary = await rehearsal.settle(result, turn)
        return JsonAnswer(
            orjson.dumps(writer.finished(turn, result.usage, summary)),
            mode=budget.mode,
            headers=rehearsal.headers(result),
            outcome="degraded" if summary["degraded"] else None,
            rehearsal=summary,
        )

    async def _relay(self, call: ResponsesCall) -> JsonAnswer | StreamAnswer:
        kwargs: dict[str, Any] = {
            "role": "act", "model": call.model, "affinity": call.affinity,
            "label": PASSTHROUGH, "path": RESPONSES_PATH,
        }  # fmt: skip
        if call.request.stream:
            return await self.chat.calls.open_stream(call.payload, **kwargs)
        return JsonAnswer(await self.chat.calls.call(call.payload, **kwargs))
