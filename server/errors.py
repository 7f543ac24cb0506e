"""The gateway's errors and the one table that turns each into an HTTP answer.

::

    GatewayError
    ├── InvalidRequest          400  invalid_request_error
    │   ├── PayloadTooLarge     413  invalid_request_error / request_too_large
    │   └── BodyTimeout         408  invalid_request_error / request_timeout
    ├── Unauthorized            401  authentication_error / invalid_api_key
    ├── NotFound                404  not_found_error
    │   └── ModelNotFound       404  invalid_request_error / model_not_found
    ├── MethodNotAllowed        405  invalid_request_error
    ├── RateLimited             429  requests / rate_limit_exceeded   (with Retry-After)
    ├── StoreUnavailable        503  service_unavailable / store_unavailable
    │                           (raised at the store boundary; rehearsal degrades instead)
    └── EngineError                  (raised at the engine boundary, from httpx errors)
        ├── EngineRejected      the engine's own 4xx, relayed with its status and message
        ├── EngineUnavailable   503  service_unavailable / engine_unavailable   (retryable)
        ├── EngineOverloaded    503  service_unavailable / engine_overloaded
        ├── EngineFailed        502  upstream_error / engine_error              (retryable)
        │                       (a 5xx, a reset or cut connection, a malformed 200)
        └── EngineTimeout       504  timeout_error / engine_timeout
                                (retryable when cut early: a hung engine, a late first chunk)

Anything else that escapes a route is a 500 ``internal_error`` whose message never carries the
exception text. The same envelope ``{"error": {"message", "type", "param", "code"}}`` is the JSON
body of an error response and the payload of the SSE error event sent when a stream breaks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import orjson

ENVELOPE_HEADERS = {"content-type": "application/json"}


class GatewayError(Exception):
    """Base of every error the gateway answers with an envelope."""

    def __init__(
        self, message: str, *, param: str | None = None, code: str | int | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


class InvalidRequest(GatewayError):
    """The request is malformed: bad JSON, wrong types, unknown roles, bad tool schemas."""


class PayloadTooLarge(InvalidRequest):
    """The body is over ``max_body_bytes``."""


class BodyTimeout(InvalidRequest):
    """The request body did not arrive whole within ``body_timeout``."""


class Unauthorized(GatewayError):
    """API keys are configured and the request carries none or a wrong one."""


class NotFound(GatewayError):
    """No such route or resource."""


class ModelNotFound(NotFound):
    """The requested model is neither served by an engine nor a configured alias."""


class MethodNotAllowed(GatewayError):
    """The route exists but not for this HTTP method."""


class EngineError(GatewayError):
    """An upstream engine could not give a usable answer."""

    #: Whether another engine may be tried (only ever before a byte reached the client).
    retryable = False
    #: The ``kind`` label of ``rehearsal_gateway_engine_errors_total``.
    kind = "protocol"


class EngineRejected(EngineError):
    """The engine refused the request with a 4xx; relayed as the engine said it."""

    kind = "status_4xx"

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type_: str = "invalid_request_error",
        param: str | None = None,
        code: str | int | None = None,
    ) -> None:
        super().__init__(message, param=param, code=code)
        self.status = status
        self.type = type_


class RateLimited(GatewayError):
    """A per-key fair-use limit refused the request (``server/store/fair_use.py``).

    ``limit`` names which (``rate``, ``concurrency``, ``engine_calls``); ``retry_after_s`` is
    when a retry would pass, sent as the ``Retry-After`` header (whole seconds, at least 1).
    """

    def __init__(self, message: str, *, limit: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.limit = limit
        self.retry_after_s = retry_after_s

    def headers(self) -> dict[str, str]:
        return {"retry-after": str(max(1, math.ceil(self.retry_after_s)))}


class StoreUnavailable(GatewayError):
    """The store (Redis) could not be reached or answered too slowly; ``op`` names the call.

    Rehearsal and feedback absorb it (the answer is served without memory, and says so); only
    a route that needs the store itself, such as reading a stored trace, answers with it.
    """

    def __init__(self, op: str, detail: str) -> None:
        super().__init__(f"the rehearsal store is unavailable ({op}: {detail})")
        self.op = op


class EngineUnavailable(EngineError):
    """No engine could be reached (none healthy, or the connection was refused)."""

    retryable = True
    kind = "connect"


class EngineOverloaded(EngineError):
    """Every engine stayed at its concurrency limit for longer than ``queue_timeout``."""

    kind = "saturated"


class EngineFailed(EngineError):
    """The engine answered 5xx or broke the protocol (a cut connection, garbage)."""

    retryable = True

    def __init__(self, message: str, *, kind: str = "protocol") -> None:
        super().__init__(message)
        self.kind = kind


class EngineTimeout(EngineError):
    """The engine went silent for longer than a bound: first byte, between chunks, overall.

    ``retryable`` when the wait was cut early and another engine may still answer in time (the
    engine stopped answering its probes, or a stream's first chunk did not come): the call moves.
    """

    kind = "timeout"

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


@dataclass(frozen=True, slots=True)
class ErrorKind:
    """One row of the error table."""

    status: int
    type: str
    code: str | int | None = None


# The one table. Lookup walks the exception's MRO, so a subclass without a row uses its parent's.
ERROR_TABLE: dict[type[GatewayError], ErrorKind] = {
    GatewayError: ErrorKind(500, "internal_error", "internal_error"),
    InvalidRequest: ErrorKind(400, "invalid_request_error"),
    PayloadTooLarge: ErrorKind(413, "invalid_request_error", "request_too_large"),
    BodyTimeout: ErrorKind(408, "invalid_request_error", "request_timeout"),
    Unauthorized: ErrorKind(401, "authentication_error", "invalid_api_key"),
    NotFound: ErrorKind(404, "not_found_error", "not_found"),
    ModelNotFound: ErrorKind(404, "invalid_request_error", "model_not_found"),
    MethodNotAllowed: ErrorKind(405, "invalid_request_error", "method_not_allowed"),
    RateLimited: ErrorKind(429, "requests", "rate_limit_exceeded"),  # OpenAI's own type and code
    StoreUnavailable: ErrorKind(503, "service_unavailable", "store_unavailable"),
    EngineError: ErrorKind(502, "upstream_error", "engine_error"),
    EngineUnavailable: ErrorKind(503, "service_unavailable", "engine_unavailable"),
    EngineOverloaded: ErrorKind(503, "service_unavailable", "engine_overloaded"),
    EngineTimeout: ErrorKind(504, "timeout_error", "engine_timeout"),
}

INTERNAL = ERROR_TABLE[GatewayError]


def classify(exc: GatewayError) -> ErrorKind:
    """The table row for ``exc``; an engine's 4xx keeps the engine's own status and type."""
    if isinstance(exc, EngineRejected):
        return ErrorKind(exc.status, exc.type, exc.code)
    for klass in type(exc).__mro__:
        row = ERROR_TABLE.get(klass)
        if row is not None:
            return row
    return INTERNAL  # unreachable: GatewayError is in the table


def envelope(exc: GatewayError) -> dict[str, Any]:
    """The OpenAI error envelope for ``exc``."""
    row = classify(exc)
    return {
        "error": {
            "message": exc.message,
            "type": row.type,
            "param": exc.param,
            "code": exc.code if exc.code is not None else row.code,
        }
    }


def log_fields(exc: GatewayError) -> dict[str, Any]:
    """What a request's log line says of the error it was answered with: the envelope's type,
    code, param and message (cut to 300 characters)."""
    error = envelope(exc)["error"]
    return {
        "type": error["type"],
        "code": error["code"],
        "param": error["param"],
        "message": str(error["message"])[:300],
    }


def error_status_and_body(exc: GatewayError) -> tuple[int, bytes]:
    """HTTP status and JSON body of the error response for ``exc``."""
    return classify(exc).status, orjson.dumps(envelope(exc))


def internal_error_body() -> bytes:
    """The body of a 500: a fixed message, never the exception's text or a traceback."""
    return orjson.dumps(envelope(GatewayError("internal error in the gateway")))


def sse_error_event(exc: GatewayError) -> bytes:
    """The SSE event that ends a stream broken after its first byte, followed by ``[DONE]``."""
    return b"data: " + orjson.dumps(envelope(exc)) + b"\n\ndata: [DONE]\n\n"
