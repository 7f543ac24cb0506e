"""The rest of vLLM's surface: routes the gateway does not answer itself, relayed to an engine.

vLLM's OpenAI-compatible server answers more than chat completions — legacy completions, the
tokenizer, the Anthropic-style messages API, … — and a client pointed at the gateway instead of
vLLM must not find them missing. ``RELAYED`` lists every such route of vLLM 0.32 (a contract
test holds it to a real vLLM's ``/openapi.json``); ``NOT_RELAYED`` lists vLLM's routes that stay
behind, each with the reason. A relayed call takes the same path as a chat pass-through: the
engine pool picks the engine (session affinity, health, per-engine limits), connection errors and
5xx move it to another engine while nothing has reached the client, aliases are resolved, the
request id is forwarded, and a ``stream: true`` answer is relayed chunk by chunk.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import orjson

from ... import __version__
from ..chat_call import PASSTHROUGH, JsonAnswer
from ..engines.calls import StreamAnswer
from ..engines.pool import affinity_key
from ..errors import InvalidRequest, NotFound
from .service import ChatService, decode_json_object


@dataclass(frozen=True, slots=True)
class RelayedRoute:
    """One vLLM route the gateway relays: its path template, method, and whether it streams."""

    path: str
    method: str = "POST"
    streams: bool = False  # ``"stream": true`` in the body asks for SSE
    what: str = ""
    # The engine's JSON object answer gains ``gateway_version``: /version tells both versions.
    with_gateway_version: bool = False


RELAYED: tuple[RelayedRoute, ...] = (
    RelayedRoute("/v1/completions", streams=True, what="legacy text completions"),
    RelayedRoute("/v1/chat/completions/batch", what="several chat completions in one call"),
    RelayedRoute("/v1/messages", streams=True, what="the Anthropic Messages API"),
    RelayedRoute("/v1/messages/count_tokens", what="token count of a Messages request"),
    RelayedRoute("/v1/responses/{response_id}", "GET", what="a response the engine stored"),
    RelayedRoute("/v1/responses/{response_id}/cancel", what="cancel a background response"),
    RelayedRoute("/tokenize", what="prompt or chat messages to token ids"),
    RelayedRoute("/detokenize", what="token ids to text"),
    RelayedRoute(
        "/version",
        "GET",
        what="the engine's vLLM version, and the gateway's",
        with_gateway_version=True,
    ),
    RelayedRoute("/invocations", streams=True, what="SageMaker's entry point"),
    RelayedRoute("/generative_scoring", what="scores of candidate continuations"),
    RelayedRoute("/v1/systemone", what="structured decisions"),
)

# vLLM routes that are not relayed, and why (docs/gateway.md shows the same table).
NOT_RELAYED: dict[str, str] = {
    "/health": "the gateway's own liveness",
    "/metrics": "the gateway's own metrics; each engine's are scraped from the engine",
    "/load": "one engine's load: the gateway routes on it, it is not the pool's",
    "/ping": "SageMaker's health check: the gateway's /health answers for the gateway",
    "/kv_event_sources": "one engine's KV-cache event endpoints, for a cache-aware router",
    "/scale_elastic_ep": "operator action on one engine",
    "/is_scaling_elastic_ep": "operator state of one engine",
}

# Body fields whose first items identify a conversation (for session affinity).
_CONVERSATION_FIELDS = ("messages", "input", "prompt")


def relay_affinity(session_id: str | None, body: Mapping[str, Any]) -> bytes:
    """The routing key of a relayed call: session header > ``user`` > the conversation's head."""
    user = body.get("user")
    for name in _CONVERSATION_FIELDS:
        value = body.get(name)
        if isinstance(value, list):
            return affinity_key(session_id, user if isinstance(user, str) else None, value)
        if isinstance(value, str):
            return affinity_key(session_id, user if isinstance(user, str) else None, [value])
    if session_id or isinstance(user, str):
        return affinity_key(session_id, user if isinstance(user, str) else None, [])
    return b"r:" + hashlib.blake2b(orjson.dumps(dict(body)), digest_size=16).digest()


def engine_path(route: RelayedRoute, params: Mapping[str, str], query: str) -> str:
    """The path asked of the engine: ``route``'s template, each parameter percent-encoded.

    Never the client's path as decoded: a ``%2F`` in a parameter would become a segment of the
    engine's URL, reaching another engine route — one of ``NOT_RELAYED`` even — and a ``%03``
    would be a URL httpx refuses to build. A parameter that is a dot segment (``.`` or ``..``)
    is no id of anything and cannot be relayed at all: the engine client (aiohttp, through
    yarl 1.25) decodes ``%2E%2E`` and drops the segment, so the call would reach the parent
    route. The gateway answers such a parameter with its own 404 naming it.
    """
    for name, value in params.items():
        if value in (".", ".."):
            raise NotFound(f"no resource has the {name} '{value}'", param=name)
    segments = {name: quote(value, safe="") for name, value in params.items()}
    path = route.path.format_map(segments)
    return f"{path}?{query}" if query else path


class RouteRelay:
    """Relays one call of a ``RelayedRoute`` through the chat service's engine calls."""

    def __init__(self, chat: ChatService) -> None:
        self.chat = chat

    async def relay(
        self,
        route: RelayedRoute,
        path: str,
        raw: bytes,
        *,
        session_id: str | None,
    ) -> JsonAnswer | StreamAnswer:
        """Send ``raw`` (the client's body) to ``path`` on one engine; its answer, untouched."""
        if route.method == "GET":
            body = await self.chat.calls.call(
                None, role="act", model=None, affinity=b"", label=PASSTHROUGH,
                path=path, method="GET",
            )  # fmt: skip
            return JsonAnswer(with_gateway_version(body) if route.with_gateway_version else body)
        request = decode_json_object(raw)
        requested = request.get("model")
        if requested is not None and not isinstance(requested, str):
            raise InvalidRequest("model: expected a string", param="model")
        model = self.chat.pool.resolve_model(requested)
        payload = raw if model == requested else orjson.dumps({**request, "model": model})
        affinity = relay_affinity(session_id, request)
        if route.streams and request.get("stream") is True:
            return await self.chat.calls.open_stream(
                payload, role="act", model=model, affinity=affinity, label=PASSTHROUGH, path=path
            )
        body = await self.chat.calls.call(
            payload, role="act", model=model, affinity=affinity, label=PASSTHROUGH, path=path
        )
        return JsonAnswer(body)


def with_gateway_version(body: bytes) -> bytes:
    """An engine's JSON object answer with the gateway's own version beside the engine's."""
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    if not isinstance(answer, dict):
        return body
    return orjson.dumps({**answer, "gateway_version": __version__})
