"""``POST /v1/responses``: parse, hand to the responses service, stream or send its answer.

A rehearsed stream (``ResponsesStream``) opens with ``response.created`` and
``response.in_progress`` as soon as the request is accepted, keeps the connection alive with SSE
comments (``: rehearsing 2/4``, ``: keep-alive``) while the planner runs — SSE parsers skip
comment lines — then sends the committed turn's item events and ``response.completed``. A
failure after the first byte is one ``error`` event, as the Responses API reports it.
"""

from __future__ import annotations

import asyncio
import contextlib

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Send

from ..chat.responses import RehearsedResponse
from ..engines.calls import StreamAnswer
from ..errors import GatewayError, envelope
from ..rehearse.committed import with_minted_ids
from ..responses_protocol import ResponsesRequest
from .body import read_body
from .openapi import ENGINE_ERRORS, errors, json_answer, request_body
from .rehearsal_response import RehearsingStream
from .relay import (
    StreamRelay,
    json_response,
    until_disconnect,
)
from .state import (
    MODE_STATE_KEY,
    OUTCOME_STATE_KEY,
    REHEARSAL_STATE_KEY,
    gateway_of,
    tenant_of_request,
)

KEEPALIVE_S = 2.0

router = APIRouter()

# vLLM's and OpenAI's response object, in the fields every answer has (rehearsed or relayed).
RESPONSE_OBJECT = {
    "type": "object",
    "required": ["id", "object", "created_at", "model", "output", "status"],
    "properties": {"object": {"const": "response"}, "output": {"type": "array"}},
}


@router.post(
    "/v1/responses",
    openapi_extra=request_body(ResponsesRequest),
    responses={
        **json_answer(RESPONSE_OBJECT, "The response, or its events as SSE", streams=True),
        **errors(*ENGINE_ERRORS),
    },
)
async def create_response(request: Request) -> Response:
    """OpenAI Responses API: rehearsed with function tools, relayed to vLLM otherwise."""
    state = gateway_of(request)
    raw = await read_body(request.scope, request.receive, state.settings.max_body_bytes)
    call = state.responses.prepare(
        raw,
        session_id=request.headers.get("x-session-id"),
        tenant=tenant_of_request(request),
        headers=request.headers,
    )
    answer = await until_disconnect(request.scope, request.receive, state.responses.complete(call))
    setattr(request.state, MODE_STATE_KEY, answer.mode)
    if isinstance(answer, StreamAnswer):
        return StreamRelay(answer)
    if isinstance(answer, RehearsedResponse):
        return ResponsesStream(answer)
    if answer.outcome is not None:
        setattr(request.state, OUTCOME_STATE_KEY, answer.outcome)
    if answer.rehearsal is not None:
        setattr(request.state, REHEARSAL_STATE_KEY, answer.rehearsal)
    return json_response(answer)


class ResponsesStream(RehearsingStream):
    """An ASGI response that rehearses, then streams the committed turn as Responses events."""

    def __init__(self, answer: RehearsedResponse) -> None:
        super().__init__(answer.rehearsal.rehearsal_id)
        self.answer = answer

    async def serve(self, send: Send) -> None:
        async def body(chunk: bytes) -> None:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})

        writer, rehearsal = self.answer.writer, self.answer.rehearsal
        for event in writer.opening():
            await body(event)
        work = asyncio.create_task(rehearsal.run())
        expected = rehearsal.budget.budget * rehearsal.budget.depth
        shown = -1
        try:
            while not work.done():
                done = min(rehearsal.imagined_done, expected)
                if done != shown:
                    shown = done
                    await body(f": rehearsing {done}/{expected}\n\n".encode())
                finished, _ = await asyncio.wait({work}, timeout=KEEPALIVE_S)
                if not finished and rehearsal.imagined_done == shown:
                    await body(b": keep-alive\n\n")
            try:
                result = work.result()
                turn = with_minted_ids(result.turn)
                summary = self.summary = await rehearsal.settle(result, turn)
            except GatewayError as exc:
                self.outcome = "error"
                error = envelope(exc)["error"]
                await body(writer.event("error", code=error["code"], message=error["message"],
                                        param=error["param"]))  # fmt: skip
            else:
                for event in writer.closing(writer.finished(turn, result.usage, summary)):
                    await body(event)
                self.outcome = "degraded" if summary["degraded"] else "ok"
        finally:
            if not work.done():
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await work
        await send({"type": "http.response.body", "body": b"", "more_body": False})
