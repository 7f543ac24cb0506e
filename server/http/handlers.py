"""Exception handlers: every error reaches the client through ``server/errors.py``'s table.

Gateway errors map to their status and OpenAI envelope; Starlette's own 404/405/validation
errors are re-raised as ours first, a vanished client is a 499 (seen only in metrics) and anything
unexpected is logged and answered with a generic 500 that names nothing internal.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Scope, Send

from ..errors import (
    BodyTimeout,
    GatewayError,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    RateLimited,
    error_status_and_body,
    internal_error_body,
    log_fields,
)
from ..telemetry.logs import ERROR_STATE_KEY
from .relay import ClientDisconnected

log = logging.getLogger("rehearsal_gateway.server")

CLIENT_CLOSED = 499  # nginx's status for "client closed the request"; only ever in metrics


Handler = Callable[[Request, Exception], Awaitable[Response]]


def add_error_handlers(app: FastAPI) -> None:
    """Install the handlers below on ``app``."""
    for exc_type, handler in _HANDLERS.items():
        app.add_exception_handler(exc_type, handler)
    app.add_exception_handler(Exception, _internal_error)


def _error_response(
    request: Request, exc: GatewayError, headers: dict[str, str] | None = None
) -> Response:
    # The request's log line says which error it was answered with (server/http/accounting.py).
    request.scope.setdefault("state", {})[ERROR_STATE_KEY] = log_fields(exc)
    status, body = error_status_and_body(exc)
    return Response(body, status, headers=headers, media_type="application/json")


async def _gateway_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, GatewayError)
    if isinstance(exc, BodyTimeout):  # the rest of the body may still come: not on this socket
        return _error_response(request, exc, headers={"connection": "close"})
    return _error_response(request, exc, exc.headers() if isinstance(exc, RateLimited) else None)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        return _error_response(
            request,
            MethodNotAllowed(f"{request.method} is not allowed on {request.url.path}"),
            headers=dict(exc.headers or {}),
        )
    if exc.status_code == 404:
        return _error_response(request, NotFound(f"no route for {request.url.path}"))
    return _error_response(request, InvalidRequest(str(exc.detail)))


async def _validation_error(request: Request, exc: Exception) -> Response:
    return _error_response(
        request, InvalidRequest("the request does not match the endpoint's schema")
    )


async def _client_gone(request: Request, exc: Exception) -> Response:
    return Response(status_code=CLIENT_CLOSED)


_HANDLERS: dict[type[Exception], Handler] = {
    GatewayError: _gateway_error,
    HTTPException: _http_error,
    RequestValidationError: _validation_error,
    ClientDisconnected: _client_gone,
}


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s", request.url.path, exc_info=exc)
    return Response(internal_error_body(), 500, media_type="application/json")


async def send_internal_error(scope: Scope, exc: Exception, send: Send) -> None:
    """The generic 500 for an error no route handled, logged with its traceback: what the app's
    handler for ``Exception`` answers, sent from inside the middleware stack so that the
    answer still carries the request id (Starlette runs that handler outside every middleware).
    """
    log.exception("unhandled error on %s", scope["path"], exc_info=exc)
    body = internal_error_body()
    head = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": 500, "headers": head})
    await send({"type": "http.response.body", "body": body})
