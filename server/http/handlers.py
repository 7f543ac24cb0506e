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

from server.errors import (
    BodyTimeout,
    GatewayError,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    RateLimited,
    error_status_and_body,
    internal_error_body,
)
from server.http.relay import ClientDisconnected

log = logging.getLogger("rehearsal_gateway.server")

CLIENT_CLOSED = 499  # nginx's status for "client closed the request"; only ever in metrics


Handler = Callable[[Request, Exception], Awaitable[Response]]


def add_error_handlers(app: FastAPI) -> None:
    """Install the handlers below on ``app``."""
    for exc_type, handler in _HANDLERS.items():
        app.add_exception_handler(exc_type, handler)
    app.add_exception_handler(Exception, _internal_error)


def handler_for(exc: Exception) -> Handler | None:
    """The handler the app would answer ``exc`` with (None: a 500, Starlette's to send)."""
    for cls in type(exc).__mro__:
        if (handler := _HANDLERS.get(cls)) is not None:
            return handler
    return None


def _error_response(exc: GatewayError, headers: dict[str, str] | None = None) -> Response:
    status, body = error_status_and_body(exc)
    return Response(body, status, headers=headers, media_type="application/json")


async def _gateway_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, GatewayError)
    if isinstance(exc, BodyTimeout):  # the rest of the body may still come: not on this socket
        return _error_response(exc, headers={"connection": "close"})
    return _error_response(exc, exc.headers() if isinstance(exc, RateLimited) else None)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        return _error_response(
            MethodNotAllowed(f"{request.method} is not allowed on {request.url.path}"),
            headers=dict(exc.headers or {}),
        )
    if exc.status_code == 404:
        return _error_response(NotFound(f"no route for {request.url.path}"))
    return _error_response(InvalidRequest(str(exc.detail)))


async def _validation_error(request: Request, exc: Exception) -> Response:
    return _error_response(InvalidRequest("the request does not match the endpoint's schema"))


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
