"""Engine failures in the gateway's words: each transport error or bad answer, an ``EngineError``.

The engine client (``server/engines/client.py``) and its streams (``server/engines/streams.py``)
raise only what these functions build, so the error tree of ``server/errors.py`` is decided in
one place: which failures are a reset (retried once on a fresh connection), a refusal, a timeout,
a 5xx, an engine's own 4xx, or a malformed 200.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from rehearsal_gateway.rehearsal.messages import usage_counts

from ..errors import (
    EngineError,
    EngineFailed,
    EngineOverloaded,
    EngineRejected,
    EngineTimeout,
    EngineUnavailable,
)
from ..telemetry.logs import note_passthrough_tokens
from ..telemetry.metrics import GatewayMetrics
from .pool import Engine

PASSTHROUGH_ROLE = "passthrough"  # the one role whose tokens only the engine's answer tells


def count_usage(metrics: GatewayMetrics, body: bytes) -> bool:
    """Count a pass-through answer's ``usage`` (a JSON body, or one SSE chunk's data).

    False when ``body`` is not JSON at all (the caller decides whether that is a fault).
    """
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    prompt, completion, cached, _ = usage_counts(
        data.get("usage") if isinstance(data, dict) else None
    )
    metrics.observe_passthrough_usage(prompt, completion, cached)
    note_passthrough_tokens(prompt, completion, cached)
    return True


def is_reset(exc: httpx.HTTPError) -> bool:
    """Whether a failure to get an answer was the connection closing or resetting under it:
    EOF (``RemoteProtocolError``) or ECONNRESET/EPIPE (``ReadError``/``WriteError``), as every
    transport raises them (``server/engines/transport.py``)."""
    return isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError)


def translate(exc: httpx.HTTPError, engine: Engine) -> EngineError:
    """The gateway error for an httpx failure while talking to ``engine``."""
    if is_reset(exc):
        return EngineFailed(
            f"the connection to engine {engine.name} was reset or closed", kind="reset"
        )
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return EngineUnavailable(f"engine {engine.name} is unreachable")
    if isinstance(exc, httpx.PoolTimeout):
        return EngineOverloaded(f"no free connection to engine {engine.name}")
    if isinstance(exc, httpx.TimeoutException):
        return EngineTimeout(f"engine {engine.name} went silent for longer than RGW_CHUNK_TIMEOUT")
    return EngineFailed(f"the connection to engine {engine.name} broke ({type(exc).__name__})")


def hung(engine: Engine) -> EngineTimeout:
    """The error of a call aborted because its engine stopped answering (probes and traffic)."""
    return EngineTimeout(f"engine {engine.name} stopped answering", retryable=True)


def malformed(engine: Engine, what: str) -> EngineFailed:
    return EngineFailed(f"engine {engine.name} answered 200 with {what}", kind="malformed")


def from_status(status: int, body: bytes, engine: Engine) -> EngineError:
    """The gateway error for a non-2xx engine answer; a 4xx keeps the engine's own words."""
    if status >= 500 or status < 400:
        return EngineFailed(f"engine {engine.name} answered HTTP {status}", kind="status_5xx")
    fields: dict[str, Any] = {}
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    if isinstance(data, dict):
        # vLLM answers {"error": {...}} now and the flat {"object": "error", ...} in older releases.
        inner = data.get("error")
        fields = inner if isinstance(inner, dict) else data
    message = fields.get("message")
    if not isinstance(message, str):
        message = body.decode("utf-8", "replace")[:2000] or f"engine answered HTTP {status}"
    type_ = fields.get("type")
    param = fields.get("param")
    return EngineRejected(
        status,
        message,
        type_=type_ if isinstance(type_, str) else "invalid_request_error",
        param=param if isinstance(param, str) else None,
        code=fields.get("code") if isinstance(fields.get("code"), str | int) else None,
    )
