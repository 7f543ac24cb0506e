"""A scripted engine transport, shipped with the library (like ``httpx.MockTransport``).

``ScriptedTransport`` is an ``EngineTransport`` that answers engine calls from a script and
records every request it saw; handed to ``create_app(settings, engine_transport=engine)`` it
replaces the network only, so everything above the seam runs as it serves::

    engine = ScriptedTransport(models=("qwen3",))
    engine.enqueue(completion(tool_call("get_order", {"order_id": "#W1"})), role="act")
    engine.enqueue(imagined({"status": "pending"}), role="rehearse", match=about("get_order"))
    engine.enqueue(streamed("Hel", "lo"))                      # a pass-through stream
    engine.enqueue(failure(503, "engine overloaded"))          # an engine's error answer
    engine.enqueue(httpx.ConnectError("refused"))              # a transport failure
    engine.enqueue(completion("late"), delay=0.05)             # scripted latency

A call takes the first queued answer whose ``role`` and ``match`` accept its request, so
concurrent calls get the right answers whatever order they arrive in. The role is the one the
gateway writes into a call's ``X-Request-Id`` (``<id>-<role>-<n>``; a pass-through call carries
the client's id and is ``passthrough``). A call nothing accepts fails with ``LookupError``: an
unscripted call is a bug in the test, not an engine failure to be absorbed. Health checks
(``/health``, ``/v1/models``, ``/metrics``) are answered as an idle engine serving ``models``
answers them, unscripted.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson

from .transport import EngineRequest, EngineResponse

__all__ = [
    "ScriptedAnswer",
    "ScriptedTransport",
    "about",
    "completion",
    "failure",
    "imagined",
    "role_of",
    "streamed",
    "tool_call",
]

ROLES = ("act", "rehearse", "commit", "passthrough")
Matcher = Callable[[EngineRequest], bool]


@dataclass(frozen=True, slots=True)
class ScriptedAnswer:
    """An engine's answer: a status, headers, and a body whole or in the chunks it arrives in."""

    status: int
    chunks: tuple[bytes, ...]
    headers: Mapping[str, str] = field(default_factory=lambda: {"content-type": "application/json"})


def tool_call(name: str, arguments: Any, *, call_id: str | None = None) -> dict[str, Any]:
    """One tool call of an assistant message, as an OpenAI-compatible engine writes it."""
    return {
        "id": call_id or f"call-{name}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def completion(
    *choices: str | dict[str, Any], prompt_tokens: int = 10, completion_tokens: int = 5
) -> ScriptedAnswer:
    """A chat completion with one choice per argument: its text, or one tool call."""
    made = []
    for index, choice in enumerate(choices or ("",)):
        if isinstance(choice, str):
            message: dict[str, Any] = {"role": "assistant", "content": choice}
            finish = "stop"
        else:
            message = {"role": "assistant", "content": None, "tool_calls": [choice]}
            finish = "tool_calls"
        made.append({"index": index, "message": message, "finish_reason": finish})
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens * len(made),
        "total_tokens": prompt_tokens + completion_tokens * len(made),
    }
    body = {
        "id": "chatcmpl-scripted", "object": "chat.completion", "created": 0,
        "model": "scripted", "choices": made, "usage": usage,
    }  # fmt: skip
    return ScriptedAnswer(200, (orjson.dumps(body),))


def imagined(result: Any) -> ScriptedAnswer:
    """A rehearsal-role answer: the tool's imagined ``result`` in EnvACE's output format."""
    return completion(f"<execution_result>\n{json.dumps(result)}\n</execution_result>")


def streamed(*pieces: str, finish_reason: str = "stop") -> ScriptedAnswer:
    """A streamed chat completion: one SSE event per piece of text, a usage event, ``[DONE]``."""
    base = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 0}
    events = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
    events += [{**base, "choices": [{"index": 0, "delta": {"content": p}}]} for p in pieces]
    events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish_reason}]})
    tokens = len(pieces)
    usage = {"prompt_tokens": 10, "completion_tokens": tokens, "total_tokens": 10 + tokens}
    events.append({**base, "choices": [], "usage": usage})
    chunks = tuple(b"data: " + orjson.dumps(event) + b"\n\n" for event in events)
    sse = {"content-type": "text/event-stream"}
    return ScriptedAnswer(200, (*chunks, b"data: [DONE]\n\n"), sse)


def failure(status: int, message: str) -> ScriptedAnswer:
    """An engine's error answer in the OpenAI error envelope, as vLLM writes it."""
    body = {"error": {"message": message, "type": "EngineError", "code": status}}
    return ScriptedAnswer(status, (orjson.dumps(body),))


def role_of(request: EngineRequest) -> str:
    """The role the gateway gave this call, read from its ``X-Request-Id``."""
    parts = request.headers.get("x-request-id", "").rsplit("-", 2)
    if len(parts) == 3 and parts[1] in ROLES and parts[2].isdigit():
        return parts[1]
    return "passthrough"


def about(tool: str) -> Matcher:
    """Accepts a call whose messages mention ``tool`` (a rehearsal of that tool's call)."""
    needle = tool.encode()
    return lambda request: request.body is not None and needle in request.body


class _Answer:
    """A scripted answer behind the seam."""

    def __init__(self, answer: ScriptedAnswer) -> None:
        self._answer = answer
        self.status = answer.status
        self.headers = answer.headers

    async def read(self) -> bytes:
        return b"".join(self._answer.chunks)

    async def chunks(self) -> AsyncIterator[bytes]:
        for chunk in self._answer.chunks:
            await asyncio.sleep(0)  # each chunk its own arrival, as off a socket
            yield chunk

    async def aclose(self) -> None:
        return None


@dataclass(slots=True)
class _Queued:
    answer: ScriptedAnswer | BaseException
    role: str | None
    match: Matcher | None
    delay: float


class ScriptedTransport:
    """An ``EngineTransport`` that answers from a script and keeps every request it was sent."""

    def __init__(self, *, models: Sequence[str] = ("scripted",)) -> None:
        self.models = tuple(models)
        self.requests: list[EngineRequest] = []  # every scripted call, in arrival order
        self.closed = False
        self._queue: list[_Queued] = []

    def enqueue(
        self,
        answer: ScriptedAnswer | BaseException,
        *,
        role: str | None = None,
        match: Matcher | None = None,
        delay: float = 0.0,
    ) -> None:
        """Answer the next call that ``role`` and ``match`` accept (any, when both are None)."""
        if role is not None and role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, not {role!r}")
        self._queue.append(_Queued(answer, role, match, delay))

    def bodies(self, role: str | None = None) -> list[dict[str, Any]]:
        """The JSON bodies of the scripted calls sent so far (of one role, when given)."""
        return [
            orjson.loads(request.body)
            for request in self.requests
            if request.body and (role is None or role_of(request) == role)
        ]

    @property
    def pending(self) -> int:
        """How many scripted answers no call has taken yet."""
        return len(self._queue)

    async def send(self, request: EngineRequest) -> EngineResponse:
        health = self._health(request)
        if health is not None:
            return _Answer(health)
        self.requests.append(request)
        queued = self._take(request)
        if queued.delay:
            await asyncio.sleep(queued.delay)
        if isinstance(queued.answer, BaseException):
            raise queued.answer
        return _Answer(queued.answer)

    async def aclose(self) -> None:
        self.closed = True

    def _take(self, request: EngineRequest) -> _Queued:
        role = role_of(request)
        for index, queued in enumerate(self._queue):
            if queued.role not in (None, role):
                continue
            if queued.match is None or queued.match(request):
                return self._queue.pop(index)
        raise LookupError(f"no scripted answer for a {role} call to {request.url}")

    def _health(self, request: EngineRequest) -> ScriptedAnswer | None:
        if request.method != "GET":
            return None
        path = urlsplit(request.url).path
        if path.endswith("/models"):
            cards = [{"id": name, "object": "model"} for name in self.models]
            return ScriptedAnswer(200, (orjson.dumps({"object": "list", "data": cards}),))
        if path.endswith("/metrics"):
            return ScriptedAnswer(200, (b"",), {"content-type": "text/plain"})
        if path.endswith("/health"):
            return ScriptedAnswer(200, (b"",), {})
        return None
