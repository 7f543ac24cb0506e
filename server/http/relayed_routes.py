"""HTTP routes for vLLM's routes the gateway relays (``server/chat/relayed.py`` lists them)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from ..chat.relayed import RELAYED, RelayedRoute, RouteRelay, engine_path
from ..engines.calls import StreamAnswer
from .body import read_body
from .openapi import (
    ENGINE_ERRORS,
    ENGINE_GET_ERRORS,
    errors,
    json_answer,
    path_parameters,
)
from .relay import StreamRelay, json_response, until_disconnect
from .state import RELAYED_STATE_KEY, gateway_of

router = APIRouter()

Endpoint = Callable[[Request], Awaitable[Response]]


def _endpoint(route: RelayedRoute) -> Endpoint:
    async def relay(request: Request) -> Response:
        state = gateway_of(request)
        setattr(request.state, RELAYED_STATE_KEY, route.path)
        limit = state.settings.max_body_bytes
        raw = (
            b"" if route.method == "GET" else await read_body(request.scope, request.receive, limit)
        )
        path = engine_path(route, request.path_params, request.url.query)
        work = RouteRelay(state.chat).relay(
            route, path, raw, session_id=request.headers.get("x-session-id")
        )
        answer = await until_disconnect(request.scope, request.receive, work)
        if isinstance(answer, StreamAnswer):
            return StreamRelay(answer)
        return json_response(answer)

    relay.__doc__ = f"Relayed to an engine: {route.what} (as vLLM serves it)."
    return relay


_ANSWER = {"type": "object", "description": "vLLM's answer, untouched"}

for _route in RELAYED:
    router.add_api_route(
        _route.path,
        _endpoint(_route),
        methods=[_route.method],
        name=f"relay {_route.path}",
        summary=f"{_route.what} (relayed to vLLM)",
        openapi_extra=path_parameters(_route.path),
        responses={
            **json_answer(_ANSWER, "As the engine answered", streams=_route.streams),
            **errors(*(ENGINE_GET_ERRORS if _route.method == "GET" else ENGINE_ERRORS)),
        },
    )
