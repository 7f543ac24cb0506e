"""The chat lane: ``POST /v1/chat/completions`` served straight from uvicorn's request cycle.

Why. Issue 16 asks pass-through to cost at most 1.2x vllm-router's CPU on a small body and 1.5x
on an agent body. A relay on bare asyncio (httptools' request parser, the engine wire of
``server/engines/wire.py``, no ASGI) measured 0.45-0.53x vllm-router's CPU in the same run where
the gateway measured 1.29-1.76x (``benchmarks.overhead``, 2026-12-03, small and agent bodies, 1
and 16 clients): the stack between the socket and the endpoint, not the relay, is what costs.
Python opcodes per small-body pass-through (``python -m benchmarks.opcodes --profile small``)
put uvicorn's ASGI ``send`` at 354, Starlette at 437 and our four middleware closures and their
message dict copies at ~400 of the gateway's ~5,300. No ASGI server option skips those layers
for one route (granian, a Rust server, costs more per ASGI message: docs/benchmarks.md), so this
module does it, in about a hundred lines. Measured: 5,297 -> 4,352 opcodes per small
pass-through for the lane alone, 3,936 with the cuts beside it, gateway CPU x0.79-0.95 of the
tree before in one interleaved run (docs/benchmarks.md, "Sixth pass").

What it is. ``LaneProtocol``, ``HeaderTimeoutProtocol`` (``server/http/header_timeout.py``) with
one method more, hands this module the request cycles uvicorn made for the chat route on our own
app, instead of running the ASGI app on them. ``serve_chat`` then runs, as plain calls in the same
order, exactly what the ASGI path runs for that route: request accounting (request id, in-flight
gauge, metrics, the request's log line: ``account``), API keys (``ApiKeyRing.authenticate``), fair
use (``FairUse.enter``/``leave``), the endpoint (``routes.answer_chat``, what the declared
``chat_completions`` runs, without a Starlette ``Request``) and the app's error handlers, with an
unexpected error logged and answered with the generic 500. A body that came whole with its head is
taken off the cycle as it is; one still on its way is read through uvicorn's own ``receive`` (so
``Expect: 100-continue``, flow control and disconnects behave as on any route). A complete answer
(a relayed JSON body, an error envelope) leaves as one write; a stream or a rehearsed answer goes
through uvicorn's own ``send``, unchanged. Uvicorn keeps the connection: keep-alive, pipelining,
drain, timeouts.

``RGW_CHAT_LANE=false`` sends the route back through the ASGI stack; so does FastAPI's native
OpenTelemetry (``RGW_FASTAPI_TELEMETRY``), whose router names each span's route.
``tests/server/test_lane.py`` holds the two paths to the same bytes.
"""

from __future__ import annotations

import contextvars
import logging
import secrets
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, RequestResponseCycle
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

from server.chat_call import JsonAnswer
from server.errors import RateLimited, Unauthorized, internal_error_body
from server.http.accounting import CHAT_PATH, account
from server.http.auth import DEFAULT_TENANT, TENANT_STATE_KEY, authorization_of
from server.http.auth import refusal as unauthorized
from server.http.handlers import handler_for
from server.http.header_timeout import HeaderTimeoutProtocol
from server.http.limits import refusal as over_limits
from server.http.relay import answer_head
from server.http.routes import answer_chat
from server.http.state import STATE_KEY, GatewayState
from server.telemetry.logs import (
    REQUEST_ID_HEADER,
    RequestRecord,
    current_record,
    request_id_from,
)
from server.telemetry.waits import WaitClock, current_clock

log = logging.getLogger("rehearsal_gateway.server")

Head = list[tuple[bytes, bytes]]


class LaneProtocol(HeaderTimeoutProtocol):
    """The gateway's HTTP/1.1 protocol: ``HeaderTimeoutProtocol``, with the chat lane."""

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        # The gateway and its settings are the app's for its whole life (its lifespan has run
        # before uvicorn accepts a connection): looked up once per connection, not per request.
        self._lane = lane_of(self.app_state)
        # As uvicorn starts an ASGI task: a fresh context when asked for (uvicorn >= 0.55).
        self._fresh_context = getattr(self.config, "reset_contextvars", False)

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        scope: Any = cycle.scope
        gateway = self._lane
        # Not when uvicorn answers 503 over limit_concurrency (``app`` is then its own).
        if (
            gateway is None
            or app is not self.app
            or scope["path"] != CHAT_PATH
            or scope["method"] != "POST"
        ):
            super()._start_asgi_task(cycle, app)
            return
        context = contextvars.Context() if self._fresh_context else None
        task = self.loop.create_task(serve_chat(cycle, gateway), context=context)
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)


def lane_of(app_state: dict[str, Any]) -> GatewayState | None:
    """The gateway whose chat lane serves the app's chat requests, or None (the ASGI stack
    serves them)."""
    gateway = app_state.get(STATE_KEY)
    if gateway is None or not gateway.settings.chat_lane or gateway.settings.fastapi_telemetry:
        return None
    return gateway  # type: ignore[no-any-return]


async def serve_chat(cycle: RequestResponseCycle, gateway: GatewayState) -> None:
    """Answer one chat request on ``cycle``, accounted as ``RequestAccounting`` would."""
    scope: Any = cycle.scope
    record = RequestRecord(request_id_from(scope["headers"]))
    clock = WaitClock()
    clock_token = current_clock.set(clock)
    record_token = current_record.set(record)
    request_id = record.request_id.encode("ascii")
    started = time.perf_counter()
    status = 500
    try:
        with gateway.metrics.track_in_flight():
            status = await _admit(cycle, gateway, request_id)
    except BaseException as exc:  # what uvicorn's run_asgi does with an app that raised
        log.error("Exception in the chat lane", exc_info=exc)
        if cycle.response_started:
            cycle.transport.close()
        else:
            await _internal_error(cycle, request_id)
    finally:
        current_clock.reset(clock_token)
        current_record.reset(record_token)
        account(gateway.metrics, scope, record, status, time.perf_counter() - started, clock)
        cycle.on_response = lambda: None


async def _admit(cycle: RequestResponseCycle, gateway: GatewayState, request_id: bytes) -> int:
    """API keys, then fair use, then the route; the status answered."""
    state = cycle.scope["state"]
    tenant = DEFAULT_TENANT
    if gateway.keyring.enabled:
        try:
            tenant = gateway.keyring.authenticate(authorization_of(cycle.scope["headers"]))
        except Unauthorized as exc:
            return await _write(cycle, *unauthorized(exc), request_id)
    state[TENANT_STATE_KEY] = tenant
    fair_use = gateway.fair_use
    if fair_use is None:
        return await _route(cycle, request_id)
    lease = secrets.token_hex(8)
    try:
        leased = await fair_use.enter(tenant, lease)
    except RateLimited as exc:
        return await _write(cycle, *over_limits(exc), request_id)
    try:
        return await _route(cycle, request_id)
    finally:
        if leased:
            await fair_use.leave(tenant, lease)


async def _route(cycle: RequestResponseCycle, request_id: bytes) -> int:
    """The endpoint and, for what it raises, the app's own error handlers."""
    scope: Any = cycle.scope
    body = None
    if not cycle.more_body:  # the body came whole with the head (uvicorn parsed both at once)
        body, cycle.body = bytes(cycle.body), bytearray()
    try:
        response = await answer_chat(scope, cycle.receive, body)  # type: ignore[arg-type]
        if isinstance(response, JsonAnswer):
            head = answer_head(response)
            return await _write(cycle, response.status, head, response.body, request_id)
        return await _relay(cycle, response, request_id)  # a stream or a rehearsal: it runs

    except Exception as exc:
        if cycle.response_started:
            raise
        handler = handler_for(exc)
        if handler is None:
            log.exception("unhandled error on %s", scope["path"], exc_info=exc)
            return await _internal_error(cycle, request_id)
        response = await handler(Request(scope, cycle.receive, cycle.send), exc)  # type: ignore[arg-type]
        exc.__traceback__ = None
        return await _write_response(cycle, response, request_id)


async def _relay(cycle: RequestResponseCycle, response: Response, request_id: bytes) -> int:
    """A stream or a rehearsed answer, through uvicorn's ``send`` with the request id added."""
    send = cycle.send

    async def send_with_id(message: Any) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message["headers"], (REQUEST_ID_HEADER, request_id)]}
        await send(message)

    await response(cycle.scope, cycle.receive, send_with_id)  # type: ignore[arg-type]
    return response.status_code


async def _internal_error(cycle: RequestResponseCycle, request_id: bytes) -> int:
    """The generic 500, as the app's handler for an unexpected error answers it."""
    body = internal_error_body()
    head = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    return await _write(cycle, 500, head, body, request_id)


async def _write_response(cycle: RequestResponseCycle, answer: Response, request_id: bytes) -> int:
    body = bytes(answer.body)  # bytes already: the same object
    return await _write(cycle, answer.status_code, answer.raw_headers, body, request_id)


async def _write(
    cycle: RequestResponseCycle, status: int, head: Head, body: bytes, request_id: bytes
) -> int:
    """One complete answer in one write, ending the cycle as uvicorn's ``send`` ends it.

    Every header here is the gateway's own (an engine's headers are never relayed), so uvicorn's
    per-header checks for line breaks have nothing to find.
    """
    if cycle.flow.write_paused and not cycle.disconnected:
        await cycle.flow.drain()
    if cycle.disconnected:
        return status
    cycle.response_started = True
    cycle.waiting_for_100_continue = False
    if cycle.access_log:
        scope: Any = cycle.scope
        cycle.access_logger.info(
            '%s - "%s %s HTTP/%s" %d',
            get_client_addr(scope), scope["method"], get_path_with_query_string(scope),
            scope["http_version"], status,
        )  # fmt: skip
    lines = b"".join([b"%b: %b\r\n" % pair for pair in (*cycle.default_headers, *head)])
    if b"\nconnection: close\r\n" in b"\n" + lines:  # names come lower-cased, ours say "close"
        cycle.keep_alive = False
    elif not cycle.keep_alive:
        lines += b"connection: close\r\n"
    answer = (STATUS_LINE[status], lines, REQUEST_ID_HEADER, request_id, body)
    cycle.transport.write_whole(b"%b%b%b: %b\r\n\r\n%b" % answer)  # type: ignore[attr-defined]
    cycle.response_complete = True
    # uvicorn's ``send`` sets ``message_event`` here to wake a ``receive`` still waiting; in the
    # lane nothing waits on ``receive`` once the answer is written (``asyncio.Event.set``: 29
    # Python opcodes).
    if not cycle.keep_alive:
        cycle.transport.close()
    cycle.on_response()
    return status
