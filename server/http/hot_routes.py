"""Direct dispatch of the hot routes: the chat endpoint without FastAPI's per-request machinery.

FastAPI declares every route (its OpenAPI document, 404/405 for the rest), but serving one
request walks ten layers between our middleware and the endpoint: Starlette's exception
middleware, two exit stacks, the router and an included router matching every path in turn,
the route's request/response wrappers, dependency solving, and a wrapper around ``send`` at most
of them. For a pass-through that is about a tenth of the gateway's CPU per request (py-spy over
3,000 agent bodies: FastAPI.__call__ 28.5% inclusive against the endpoint's 22.7%, and the
per-message ``send`` wrappers besides).

``HotRoutes`` is the innermost of our middleware (inside request accounting, API keys and fair
use, so every request is still counted, authenticated and limited). A request whose method and
exact path name a hot route is handed to that route's own endpoint function, the one FastAPI
declares, with a Starlette ``Request``; a ``GatewayError`` (or a vanished client) it raises is
answered by the same handler ``server/http/handlers.py`` installs on the app, and anything else
propagates to Starlette's server-error middleware, as from a routed request. Every other request
goes to FastAPI unchanged, and so does every request FastAPI's native OpenTelemetry traces (its
router is what names the span's ``http.route``). Nothing here decides anything: one function per
route, two paths to it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.http.handlers import handler_for

Endpoint = Callable[[Request], Awaitable[Response]]

# Set by FastAPI's native OpenTelemetry support on a request it traces (only when a global OTel
# provider is configured): its router names the span's route, so such a request takes it.
TELEMETRY_SCOPE_KEY = "fastapi.telemetry"


class HotRoutes:
    """Pure ASGI: ``(method, path)`` → endpoint, before FastAPI's router; the rest pass by."""

    def __init__(self, app: ASGIApp, routes: Mapping[tuple[str, str], Endpoint]) -> None:
        self.app = app
        self.routes = dict(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = (
            self.routes.get((scope["method"], scope["path"])) if scope["type"] == "http" else None
        )
        if endpoint is None or TELEMETRY_SCOPE_KEY in scope:
            await self.app(scope, receive, send)
            return
        started = False

        async def send_noting_start(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        request = Request(scope, receive, send)
        try:
            response = await endpoint(request)
            await response(scope, receive, send_noting_start)
        except Exception as exc:
            handler = handler_for(exc)
            if handler is None or started:
                raise  # Starlette's server-error middleware: a logged 500, as for any route
            await (await handler(request, exc))(scope, receive, send)
            exc.__traceback__ = None
