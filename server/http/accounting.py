"""Request accounting, the outermost middleware: request id, metrics and one log line.

Pure ASGI (Starlette's ``BaseHTTPMiddleware`` would break streaming and context variables). It
sets the request's ``RequestRecord`` and ``WaitClock`` (``server/telemetry``) for the layers
below to write into, and reads what the route left in the request's state when it ends. An error
no route handled is answered here with the generic 500, so that it too carries the request id.
"""

from __future__ import annotations

import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..chat_call import PASSTHROUGH
from ..telemetry.logs import (
    ERROR_STATE_KEY,
    REQUEST_ID_HEADER,
    REQUEST_LOGGER,
    RequestRecord,
    current_record,
    request_id_from,
    request_line,
)
from ..telemetry.metrics import GatewayMetrics
from ..telemetry.waits import WaitClock, current_clock
from .auth import TENANT_STATE_KEY
from .handlers import send_internal_error
from .state import (
    CONTENT_STATE_KEY,
    MODE_STATE_KEY,
    OUTCOME_STATE_KEY,
    REHEARSAL_STATE_KEY,
    RELAYED_STATE_KEY,
)

request_log = logging.getLogger(REQUEST_LOGGER)

CHAT_PATH = "/v1/chat/completions"
RESPONSES_PATH = "/v1/responses"
# Requests that may be rehearsed: counted by mode in ``requests_total``, one "chat request" line.
REQUEST_PATHS = frozenset((CHAT_PATH, RESPONSES_PATH))
# Every relayed route lives under one of these (``server/chat/relayed.py``); the rest are ours.
RELAYED_PREFIXES = ("/v1/", "/tokenize", "/detokenize", "/version", "/invocations", "/generative")


class RequestAccounting:
    """Pure ASGI: request id, metrics and the JSON log line of each request to an engine.

    Every HTTP response carries ``X-Request-Id`` (the client's when sane, else minted), and every
    engine call the request makes carries it too (``server/engines/client.py``). A chat or
    responses request moves the in-flight gauge, the request counter by mode/outcome, the
    duration and overhead histograms, and leaves one "chat request" line on the
    ``rehearsal_gateway.request`` logger; a relayed request (``/tokenize``, ``/v1/completions``,
    …) moves the in-flight gauge and the relayed-request families, and leaves a "relayed
    request" line naming its route.
    """

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        record = RequestRecord(request_id_from(scope["headers"]))
        request_id = record.request_id.encode("ascii")
        started = time.perf_counter()
        status = 500
        answering = False  # the response has started: too late for a 500 of ours

        async def send_and_note(message: Message) -> None:
            nonlocal status, answering
            if message["type"] == "http.response.start":
                status, answering = message["status"], True
                headers = [*message.get("headers", ()), (REQUEST_ID_HEADER, request_id)]
                message = {**message, "headers": headers}
            await send(message)

        if scope["path"] not in REQUEST_PATHS and not scope["path"].startswith(RELAYED_PREFIXES):
            try:
                await self.app(scope, receive, send_and_note)
            except Exception as exc:
                if answering:
                    raise  # the server closes the connection
                await send_internal_error(scope, exc, send_and_note)
            return
        clock = WaitClock()
        token = current_clock.set(clock)
        record_token = current_record.set(record)
        with self.metrics.track_in_flight():
            try:
                await self.app(scope, receive, send_and_note)
            except Exception as exc:
                if answering:
                    raise
                await send_internal_error(scope, exc, send_and_note)
            finally:
                current_clock.reset(token)
                current_record.reset(record_token)
                elapsed = time.perf_counter() - started
                account(self.metrics, scope, record, status, elapsed, clock)


def account(
    metrics: GatewayMetrics,
    scope: Scope,
    record: RequestRecord,
    status: int,
    elapsed: float,
    clock: WaitClock,
) -> None:
    """Metrics and the log line of one finished request: what the route left in the scope's
    state says how it went."""
    state = scope.get("state", {})
    outcome = "ok" if status < 400 else "client_error" if status < 500 else "error"
    relayed = state.get(RELAYED_STATE_KEY)
    if relayed is not None:
        metrics.observe_relayed(relayed, outcome, elapsed)
        if request_log.isEnabledFor(logging.INFO):
            fields = request_line(
                record, tenant=state.get(TENANT_STATE_KEY), status=status, outcome=outcome,
                mode=PASSTHROUGH,
                elapsed=elapsed, waited=clock.waited, rehearsal=None,
                error=state.get(ERROR_STATE_KEY),
            )  # fmt: skip
            request_log.info("relayed request", extra={**fields, "route": relayed})
        return
    if scope["path"] not in REQUEST_PATHS:
        return  # no such route: nothing to account
    mode = state.get(MODE_STATE_KEY, PASSTHROUGH)
    if outcome == "ok":
        outcome = state.get(OUTCOME_STATE_KEY, outcome)
    metrics.observe_request(mode, outcome, elapsed)
    metrics.observe_overhead(mode, elapsed - clock.waited)
    if request_log.isEnabledFor(logging.INFO):
        fields = request_line(
            record, tenant=state.get(TENANT_STATE_KEY), status=status, outcome=outcome,
            mode=mode,
            elapsed=elapsed, waited=clock.waited,
            rehearsal=state.get(REHEARSAL_STATE_KEY),
            content=state.get(CONTENT_STATE_KEY),
            error=state.get(ERROR_STATE_KEY),
        )  # fmt: skip
        request_log.info("chat request", extra=fields)
