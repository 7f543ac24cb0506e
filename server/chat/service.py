"""The chat service: between the routes and the engine pool.

A route turns bytes into a ``ChatCall`` with ``ChatService.prepare`` and hands it to
``ChatService.complete``, which decides what to do with it and returns a ``ChatAnswer``: a whole
JSON body, an open engine stream, or a rehearsal still to be streamed. A call whose budget asks
for rehearsal (``server/rehearse/service.py``) is rehearsed; every other call is a
**pass-through** (the client's request, to one engine, answer relayed untouched). Either way,
tool results answering calls this gateway committed are first fed back
(``server/rehearse/feedback.py``). Retries live here:
connection errors and 5xx move a call to another engine, but only while nothing has reached the
client yet — rehearsal's own engine calls go through the same ``call_engine`` and
``open_engine_stream``.

Readiness is a list of ``ReadinessCheck`` objects; ``/ready`` passes when each does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import orjson
from pydantic import ValidationError

from server.engines.client import CHAT_PATH, EngineClient, EngineStream
from server.engines.pool import Engine, EnginePool, affinity_key
from server.errors import EngineError, InvalidRequest
from server.protocol import ChatCompletionRequest
from server.settings import Role

if TYPE_CHECKING:
    from rehearsal.budget import Budget
    from server.rehearse.feedback import Feedback
    from server.rehearse.service import Rehearsal, RehearsalService

PASSTHROUGH = "passthrough"


@dataclass(frozen=True, slots=True)
class ChatCall:
    """One validated chat-completions request, ready to send."""

    request: ChatCompletionRequest
    body: dict[str, Any]  # the client's JSON as parsed (extras included)
    payload: bytes  # the bytes an engine receives for a pass-through
    model: str | None  # the engine-side model name (aliases resolved)
    affinity: bytes
    tenant: str
    session: str | None = None  # X-Session-Id, else the ``user`` field
    budget: Budget | None = None  # set when the call is to be rehearsed

    @property
    def stream(self) -> bool:
        return bool(self.request.stream)


@dataclass(frozen=True, slots=True)
class JsonAnswer:
    """A complete answer: the engine's JSON bytes (or ours), sent with one write."""

    body: bytes
    mode: str = PASSTHROUGH
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    outcome: str | None = None  # "degraded" for a degraded rehearsal; else from the status
    rehearsal: dict[str, Any] | None = None  # a rehearsal's summary, for the request's log line


@dataclass(eq=False, slots=True)
class StreamAnswer:
    """An answer still streaming from an engine; ``close`` must run when the relay ends."""

    stream: EngineStream
    pool: EnginePool
    mode: str = PASSTHROUGH
    headers: dict[str, str] = field(default_factory=dict)
    _released: bool = False

    async def close(self) -> None:
        if self._released:
            return
        self._released = True
        try:
            await self.stream.aclose()
        finally:
            self.pool.release(self.stream.engine)


@dataclass(eq=False, slots=True)
class RehearsedStream:
    """A streamed rehearsal, run while the route's response streams.

    (``server/http/rehearse_stream``)
    """

    rehearsal: Rehearsal
    include_usage: bool

    @property
    def mode(self) -> str:
        return self.rehearsal.budget.mode


ChatAnswer = JsonAnswer | StreamAnswer | RehearsedStream


def decode_chat_request(raw: bytes) -> tuple[dict[str, Any], ChatCompletionRequest]:
    """Parse and validate a request body; ``InvalidRequest`` names what is wrong."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"the request body is not valid JSON ({exc.msg})") from None
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object")
    try:
        return body, ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        param = _param_path(first["loc"])
        raise InvalidRequest(f"{param}: {first['msg']}", param=param) from None


def _param_path(loc: tuple[int | str, ...]) -> str:
    """``("messages", 0, "user", "content")`` -> ``messages[0].content``.

    Pydantic puts union members' names in the location (a message's role tag, ``literal[...]``,
    a model class name); they are not request parameters, so they are left out.
    """
    path = ""
    after_index = False
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
            after_index = True
            continue
        is_tag = (
            (after_index and part in _ROLE_TAGS)
            or part in _TYPE_TAGS
            or "[" in part
            or part[:1].isupper()
        )
        if not is_tag:
            path += f".{part}" if path else part
        after_index = False
    return path


_ROLE_TAGS = frozenset(("system", "developer", "user", "assistant", "tool"))
_TYPE_TAGS = frozenset(("str", "int", "float", "bool", "dict", "list", "none"))


class ChatService:
    """Serves chat calls with the engine pool (and, once attached, rehearsal and feedback)."""

    def __init__(self, pool: EnginePool, engines: EngineClient, *, max_attempts: int) -> None:
        self.pool = pool
        self.engines = engines
        self.max_attempts = max_attempts
        self.rehearsal: RehearsalService | None = None
        self.feedback: Feedback | None = None

    def prepare(
        self,
        raw: bytes,
        *,
        session_id: str | None,
        tenant: str,
        headers: Mapping[str, str] | None = None,
    ) -> ChatCall:
        """Validate a request body (and its rehearsal knobs) and work out where it goes."""
        body, request = decode_chat_request(raw)
        model = self.pool.resolve_model(request.model)
        budget = None
        if self.rehearsal is not None:
            budget = self.rehearsal.budget_for(body, headers or {})
        payload = raw
        if model != request.model or "rehearsal" in body:
            # ``rehearsal`` is ours: an engine must never see it (vLLM would reject it).
            engine_body = {k: v for k, v in body.items() if k != "rehearsal"}
            payload = orjson.dumps({**engine_body, "model": model})
        return ChatCall(
            request=request,
            body=body,
            payload=payload,
            model=model,
            affinity=affinity_key(session_id, request.user, body["messages"]),
            tenant=tenant,
            session=session_id or request.user,
            budget=budget,
        )

    async def complete(self, call: ChatCall) -> ChatAnswer:
        """Answer one chat call: feed back real results, then rehearse or pass through."""
        learned: list[dict[str, Any]] = []
        if self.feedback is not None:
            learned = await self.feedback.collect(call.tenant, call.body["messages"])
        if call.budget is not None and self.rehearsal is not None:
            return await self.rehearsal.answer(call, call.budget, learned)
        if call.stream:
            return await self.passthrough_stream(call)
        return JsonAnswer(await self.passthrough(call))

    async def passthrough(self, call: ChatCall, role: Role = "act") -> bytes:
        """Send the client's request to one engine; retry on another for retryable failures."""
        return await self.call_engine(
            call.payload, role=role, model=call.model, affinity=call.affinity, label=PASSTHROUGH
        )

    async def passthrough_stream(self, call: ChatCall, role: Role = "act") -> StreamAnswer:
        """Open a stream on one engine, retrying elsewhere until its first chunk arrives."""
        return await self.open_engine_stream(
            call.payload, role=role, model=call.model, affinity=call.affinity, label=PASSTHROUGH
        )

    async def call_engine(
        self,
        payload: bytes | None,
        *,
        role: Role,
        model: str | None,
        affinity: bytes,
        label: str,
        path: str = CHAT_PATH,
        method: str = "POST",
    ) -> bytes:
        """One non-streamed engine call for ``role``; retried elsewhere when that is safe."""
        tried: set[str] = set()
        while True:
            engine = await self.pool.acquire(role, model, affinity, frozenset(tried))
            try:
                return await self.engines.chat(engine, payload, label, path=path, method=method)
            except EngineError as exc:
                self._after_failure(engine, exc, tried)
            finally:
                self.pool.release(engine)

    async def open_engine_stream(
        self,
        payload: bytes,
        *,
        role: Role,
        model: str | None,
        affinity: bytes,
        label: str,
        path: str = CHAT_PATH,
    ) -> StreamAnswer:
        """A streamed engine call whose first chunk has arrived; retried elsewhere before it."""
        tried: set[str] = set()
        while True:
            engine = await self.pool.acquire(role, model, affinity, frozenset(tried))
            try:
                stream = await self.engines.open_stream(engine, payload, label, path=path)
            except EngineError as exc:
                self.pool.release(engine)
                self._after_failure(engine, exc, tried)
                continue
            except BaseException:
                self.pool.release(engine)
                raise
            return StreamAnswer(stream, self.pool)

    def _after_failure(self, engine: Engine, exc: EngineError, tried: set[str]) -> None:
        """Re-raise unless another engine may be tried."""
        if exc.kind == "connect":
            self.pool.mark_unreachable(engine)
        tried.add(engine.name)
        if not exc.retryable or len(tried) >= self.max_attempts:
            raise exc
        if not any(e.healthy and e.name not in tried for e in self.pool.engines):
            raise exc


# --------------------------------------------------------------------------- readiness


@dataclass(frozen=True, slots=True)
class CheckResult:
    ok: bool
    detail: str


class ReadinessCheck(Protocol):
    """One dependency ``/ready`` reports: the engines, and (not critical) the store."""

    @property
    def name(self) -> str: ...

    async def check(self) -> CheckResult: ...


@dataclass(frozen=True)
class EnginesReady:
    """Ready when at least one engine passed its last health check."""

    pool: EnginePool
    name: str = "engines"

    async def check(self) -> CheckResult:
        healthy = [e.name for e in self.pool.engines if e.healthy]
        total = len(self.pool.engines)
        return CheckResult(bool(healthy), f"{len(healthy)}/{total} healthy")


async def readiness(checks: list[ReadinessCheck]) -> tuple[bool, dict[str, Any]]:
    """Run every check; the overall verdict and a JSON-able report.

    A check may declare ``critical = False`` (the store): when it fails, the gateway still serves
    (rehearsal without memory), so it stays ready and reports itself ``degraded``.
    """
    report: dict[str, Any] = {}
    ready, degraded = True, False
    for item in checks:
        result = await item.check()
        if not result.ok:
            if getattr(item, "critical", True):
                ready = False
            else:
                degraded = True
        report[item.name] = {"ok": result.ok, "detail": result.detail}
    status = "not_ready" if not ready else "degraded" if degraded else "ready"
    return ready, {"status": status, "checks": report}
