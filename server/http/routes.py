"""The HTTP surface: parse, call the service, map the answer. No logic lives here."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from fastapi import APIRouter
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import Scope

from ..engines.calls import StreamAnswer
from ..errors import StoreUnavailable
from ..protocol import (
    ChatCompletion,
    ChatCompletionRequest,
    ModelCard,
    ModelList,
)
from ..rehearse.service import RehearsalRun
from ..telemetry.readiness import readiness
from .auth import DEFAULT_TENANT, TENANT_STATE_KEY
from .body import read_body
from .openapi import ENGINE_ERRORS, errors, json_answer, request_body
from .rehearsal_response import RehearsalResponse
from .relay import StreamRelay, json_response, until_disconnect
from .state import (
    CONTENT_STATE_KEY,
    MODE_STATE_KEY,
    OUTCOME_STATE_KEY,
    REHEARSAL_STATE_KEY,
    STATE_KEY,
    GatewayState,
    gateway_of,
    tenant_of_request,
)

router = APIRouter()

JSON = "application/json"


async def chat_completions(request: Request) -> Response:
    """OpenAI chat completions (non-stream and SSE)."""
    scope = request.scope
    notes = scope["state"]
    state: GatewayState = notes[STATE_KEY]
    raw = await read_body(scope, request.receive, state.settings.max_body_bytes)
    headers = headers_of(scope)
    call = state.chat.prepare(
        raw,
        session_id=headers.get("x-session-id"),
        tenant=notes.get(TENANT_STATE_KEY, DEFAULT_TENANT),
        headers=headers,
    )
    if state.settings.log_content:
        notes[CONTENT_STATE_KEY] = call.body["messages"]
    answer = await until_disconnect(scope, request.receive, state.chat.complete(call))
    notes[MODE_STATE_KEY] = answer.mode
    if isinstance(answer, StreamAnswer):
        return StreamRelay(answer)
    if isinstance(answer, RehearsalRun):
        return RehearsalResponse(answer)
    if answer.outcome is not None:
        notes[OUTCOME_STATE_KEY] = answer.outcome
    if answer.rehearsal is not None:
        notes[REHEARSAL_STATE_KEY] = answer.rehearsal
    return json_response(answer)


class DirectRoute(APIRoute):
    """A declared route whose endpoint takes the ``Request`` and returns the ``Response`` itself.

    FastAPI's documented hook for a custom route class (``APIRoute.get_route_handler``): the
    endpoint is the handler, so no dependencies are solved and no response model is rendered
    for it (an endpoint that reads its own body has neither). The route is matched, documented
    and wrapped in the app's exception handling as any other.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        return self.endpoint


router.add_api_route(
    "/v1/chat/completions",
    chat_completions,
    methods=["POST"],
    route_class_override=DirectRoute,
    openapi_extra=request_body(ChatCompletionRequest),
    responses={
        **json_answer(ChatCompletion, "The completion, or its chunks as SSE", streams=True),
        **errors(*ENGINE_ERRORS),
    },
)


# The headers the chat route reads: ``X-Session-Id`` and the knobs (``rehearsal/budget.py``).
READ_HEADERS = (b"x-session-id", b"x-rehearsal-")


def headers_of(scope: Scope) -> dict[str, str]:
    """The headers the chat route reads, by lower-case name; of a repeated one, the last (as the
    knobs read them). Only those are decoded: an SDK sends a dozen others (``x-stainless-*``,
    ``user-agent``, ...), which cost ~15 Python opcodes each to decode and the knob lookup then
    lowered again."""
    return {
        name.decode("latin-1"): value.decode("latin-1")
        for name, value in scope["headers"]
        if name.startswith(READ_HEADERS)
    }


# Before the {rehearsal_id} route, which would otherwise read "trust" as an id.
@router.get(
    "/v1/rehearsals/trust",
    responses={**json_answer({"type": "object"}, "The trust table"), **errors(401, 503)},
)
async def get_trust(request: Request) -> Response:
    """The caller's trust table: per tool, imagined x real outcome counts, rates and policy."""
    state = gateway_of(request)
    try:
        table = await state.rehearsal.trust_table(tenant_of_request(request))
    except StoreUnavailable as exc:
        state.metrics.store_error(exc.op)
        raise
    return Response(orjson.dumps(table), media_type=JSON)


@router.get(
    "/v1/rehearsals/{rehearsal_id}",
    responses={**json_answer({"type": "object"}, "The trace"), **errors(401, 404, 503)},
)
async def get_rehearsal(request: Request, rehearsal_id: str) -> Response:
    """A stored rehearsal trace, to the tenant that created it."""
    state = gateway_of(request)
    trace = await state.rehearsal.trace(tenant_of_request(request), rehearsal_id)
    return Response(orjson.dumps(trace), media_type=JSON)


@router.get("/v1/models", responses={**json_answer(ModelList, "The served models"), **errors(401)})
async def list_models(request: Request) -> Response:
    """The engines' served models as the engines list them, then the configured aliases, then
    each of those under each model-name switch offered (``parent`` naming the plain name).

    An engine's entry is relayed untouched (``max_model_len``, ``root``, ``permission``, …). An
    alias is a copy of its served model's entry under the alias's ``id``, with ``parent`` naming
    the served model (vLLM's field for "a name over that model", as for LoRA adapters).
    """
    pool = gateway_of(request).pool
    cards: list[dict[str, Any]] = []
    for name in pool.served_models():
        cards.append(pool.model_card(name) or ModelCard(id=name, root=name).model_dump())
    for alias, served in pool.aliases.items():
        base = pool.model_card(served) or ModelCard(id=served, root=served).model_dump()
        cards.append({**base, "id": alias, "parent": served})
    switch = gateway_of(request).chat.switch
    if switch is not None:  # MODEL@parallel-4 and the like (server/chat/model_switch.py)
        cards += [
            {**card, "id": name, "parent": card["id"]}
            for card in list(cards)
            for name in switch.names(str(card["id"]))
        ]
    return Response(orjson.dumps({"object": "list", "data": cards}), media_type=JSON)


@router.get("/health")
async def health() -> Response:
    """Liveness: the process answers."""
    return Response(b'{"status":"ok"}', media_type=JSON)


_REPORT = {"type": "object", "required": ["status"]}


@router.get(
    "/ready",
    responses={
        **json_answer(_REPORT, "Ready: every check that gates readiness passes"),
        503: {"description": "Not ready", "content": {JSON: {"schema": _REPORT}}},
    },
)
async def ready(request: Request) -> Response:
    """Readiness: every dependency check passes (at least one healthy engine, …)."""
    ok, report = await readiness(gateway_of(request).checks)
    return Response(orjson.dumps(report), 200 if ok else 503, media_type=JSON)


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(request: Request) -> Response:
    """Prometheus exposition."""
    body, content_type = gateway_of(request).metrics.render()
    return Response(body, media_type=content_type)
