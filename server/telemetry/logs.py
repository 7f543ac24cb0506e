"""Structured logs: one JSON object per line, and one line per chat request.

``JsonFormatter`` turns any stdlib log record into a JSON line (uvicorn's own records included);
``log_config`` is the ``logging.config.dictConfig`` mapping that ``serve`` hands to uvicorn, which
applies it in every worker process. ``RequestRecord`` collects what the layers below a route learn
about one request — which engines served it, pass-through token counts — through a context
variable that the request-accounting middleware sets (tasks a request spawns inherit it), and
``request_line`` assembles the request's log fields when it ends.

What never reaches a line: API keys and the Authorization header (nothing here reads headers
other than ``X-Request-Id``), and message contents unless ``RGW_LOG_CONTENT=true`` asks for the
request's messages.
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import orjson

REQUEST_LOGGER = "rehearsal_gateway.request"
# Where an error answer leaves its ``log_fields`` (server/errors.py) in the request's ASGI state.
ERROR_STATE_KEY = "error"
REQUEST_ID_HEADER = b"x-request-id"
# A client's id is echoed only when it is short and plain: it ends up in headers and log lines.
_SANE_REQUEST_ID = re.compile(rb"[A-Za-z0-9._:/+=-]{1,128}")

# Attributes every LogRecord has; anything else on a record came in through ``extra=``.
_RECORD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "color_message",  # uvicorn's coloured copy of the message
}


def mint_request_id() -> str:
    return "req_" + secrets.token_hex(12)


def request_id_from(headers: list[tuple[bytes, bytes]]) -> str:
    """The client's ``X-Request-Id`` when it is sane, else a fresh one."""
    for name, value in headers:
        if name == REQUEST_ID_HEADER:
            if _SANE_REQUEST_ID.fullmatch(value):
                return value.decode("ascii")
            break
    return mint_request_id()


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, then the record's extras."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            "pid": record.process,  # tells uvicorn workers apart
        }
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRS and key not in line:
                line[key] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


def log_config(level: str) -> dict[str, Any]:
    """The dictConfig for uvicorn and the gateway: every logger writes JSON lines to stderr."""
    handler = {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}
    upper = level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "rehearsal_gateway.server.telemetry.logs.JsonFormatter"}},
        "handlers": {"json": handler},
        "loggers": {
            name: {"handlers": ["json"], "level": upper, "propagate": False}
            for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "rehearsal_gateway")
        },
    }


@dataclass(slots=True)
class RequestRecord:
    """What the layers below the route learn about one request, for its log line."""

    request_id: str
    engines: list[str] = field(default_factory=list)
    tokens: dict[str, dict[str, int]] = field(default_factory=dict)
    engine_calls: int = 0  # engine calls made so far, for their derived request ids


current_record: ContextVar[RequestRecord | None] = ContextVar("rgw_request_record", default=None)


PASSTHROUGH_ROLE = "passthrough"


def engine_request_id(role: str) -> str | None:
    """The ``X-Request-Id`` of the current request's next engine call (``None`` outside one).

    A pass-through call carries the client's id itself, as if the client had called vLLM; every
    other call (acting, rehearsing, committing) a derived one, ``<id>-<role>-<n>``, unique within
    the request so an engine never sees two live requests under one id.
    """
    record = current_record.get()
    if record is None:
        return None
    record.engine_calls += 1
    if role == PASSTHROUGH_ROLE and record.engine_calls == 1:
        return record.request_id
    return f"{record.request_id}-{role}-{record.engine_calls}"


def note_engine(name: str) -> None:
    """The current request used engine ``name`` (once per name)."""
    record = current_record.get()
    if record is not None and name not in record.engines:
        record.engines.append(name)


def note_passthrough_tokens(prompt: int, completion: int, cached: int) -> None:
    """Add one pass-through answer's token counts to the current request's."""
    record = current_record.get()
    if record is None:
        return
    totals = record.tokens.get(PASSTHROUGH_ROLE)
    if totals is None:
        record.tokens[PASSTHROUGH_ROLE] = {
            "prompt": prompt,
            "completion": completion,
            "cached": cached,
        }
        return
    totals["prompt"] += prompt
    totals["completion"] += completion
    totals["cached"] += cached


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


def request_line(
    record: RequestRecord,
    *,
    tenant: str | None,
    status: int,
    outcome: str,
    mode: str,
    elapsed: float,
    waited: float,
    rehearsal: Mapping[str, Any] | None,
    content: Any = None,
    error: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The fields of one chat request's log line (``docs/metrics.md``, "Logs")."""
    latency = {"total": _ms(elapsed), "overhead": _ms(max(elapsed - waited, 0.0))}
    fields: dict[str, Any] = {
        "request_id": record.request_id,
        "tenant": tenant,  # a hash of the key, never the key
        "status": status,
        "outcome": outcome,
        "mode": mode,
        "rehearsal_id": None,
        "budget": None,
        "latency_ms": latency,
        "tokens": record.tokens,
        "engines": record.engines,
    }
    if rehearsal is not None:
        phases = rehearsal.get("latency_ms") or {}
        latency.update({k: phases.get(k, 0.0) for k in ("act", "rehearse", "commit")})
        fields.update(
            rehearsal_id=rehearsal.get("id"),
            budget=rehearsal.get("budget"),
            depth=rehearsal.get("depth"),
            commit=rehearsal.get("commit"),
            degraded=rehearsal.get("degraded"),
            vetoes=rehearsal.get("vetoes"),
            early_exit=rehearsal.get("early_exit"),
            tokens=rehearsal.get("tokens") or record.tokens,
        )
    if error is not None:
        fields["error"] = dict(error)
    if content is not None:
        fields["messages"] = content
    return fields
