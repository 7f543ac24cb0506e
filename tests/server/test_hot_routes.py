"""``HotRoutes``: the chat endpoint dispatched directly, the same answers as through FastAPI.

The ASGI contract of the dispatcher itself (what it takes, what it passes by, how it answers an
error), then the same requests through a real gateway with and without the direct dispatch,
compared byte for byte.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
import orjson
import pytest
from starlette.requests import Request
from starlette.responses import Response

from server.errors import InvalidRequest
from server.http.hot_routes import HotRoutes
from server.http.relay import ClientDisconnected
from tests.support.inprocess import InProcessGateway


class Inner:
    """The app behind the dispatcher: records what reached it."""

    def __init__(self) -> None:
        self.scopes: list[dict[str, Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.scopes.append(scope)
        await Response(b"inner", 200)(scope, receive, send)


def run(app: Any, scope: dict[str, Any]) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent


def http_scope(method: str = "POST", path: str = "/v1/chat/completions") -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "headers": [], "query_string": b""}


def body_of(sent: list[dict[str, Any]]) -> bytes:
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def test_a_hot_route_is_served_by_its_endpoint_and_the_rest_pass_by() -> None:
    inner = Inner()
    seen: list[Request] = []

    async def endpoint(request: Request) -> Response:
        seen.append(request)
        return Response(await request.body(), 201)

    app = HotRoutes(inner, {("POST", "/v1/chat/completions"): endpoint})
    sent = run(app, http_scope())
    assert sent[0]["status"] == 201
    assert body_of(sent) == b"{}"
    assert len(seen) == 1
    assert not inner.scopes
    traced = {**http_scope(), "fastapi.telemetry": object()}  # FastAPI's router names its span
    for scope in (
        http_scope("GET"),
        http_scope(path="/v1/completions"),
        http_scope(path="/v1/chat/completions/"),
        traced,
    ):
        assert body_of(run(app, scope)) == b"inner"
    assert [s["method"] for s in inner.scopes] == ["GET", "POST", "POST", "POST"]
    assert len(seen) == 1


def test_gateway_errors_get_the_apps_envelope_and_others_propagate() -> None:
    async def invalid(request: Request) -> Response:
        raise InvalidRequest("messages: field required", param="messages")

    async def gone(request: Request) -> Response:
        raise ClientDisconnected

    async def broken(request: Request) -> Response:
        raise RuntimeError("a bug")

    routes = {("POST", "/invalid"): invalid, ("POST", "/gone"): gone, ("POST", "/bug"): broken}
    app = HotRoutes(Inner(), routes)
    sent = run(app, http_scope(path="/invalid"))
    assert sent[0]["status"] == 400
    error = orjson.loads(body_of(sent))["error"]
    assert error["param"] == "messages"
    assert error["type"] == "invalid_request_error"
    assert run(app, http_scope(path="/gone"))[0]["status"] == 499
    with pytest.raises(RuntimeError, match="a bug"):
        run(app, http_scope(path="/bug"))


def test_an_error_after_the_response_started_is_not_answered_twice() -> None:
    class Breaks(Response):
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            raise InvalidRequest("too late for an envelope")

    async def endpoint(request: Request) -> Response:
        return Breaks()

    sent: list[dict[str, Any]] = []
    app = HotRoutes(Inner(), {("POST", "/v1/chat/completions"): endpoint})

    async def go() -> None:
        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await app(http_scope(), receive, send)

    with pytest.raises(InvalidRequest):
        asyncio.run(go())
    assert [m["type"] for m in sent] == ["http.response.start"]


def test_non_http_scopes_pass_by() -> None:
    inner = Inner()

    async def endpoint(request: Request) -> Response:  # pragma: no cover - never reached
        raise AssertionError

    app = HotRoutes(inner, {("POST", "/v1/chat/completions"): endpoint})

    async def go() -> None:
        async def receive() -> dict[str, Any]:
            return {"type": "lifespan.startup"}

        async def send(message: dict[str, Any]) -> None:
            pass

        class Lifespan(Inner):
            async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
                self.scopes.append(scope)

        app.app = lifespan = Lifespan()
        await app({"type": "lifespan"}, receive, send)
        assert lifespan.scopes == [{"type": "lifespan"}]

    asyncio.run(go())


BODIES = [
    b'{"model": "EnvACE-Qwen3-8B", "messages": [{"role": "user", "content": "hi"}], "seed": 3}',
    b'{"model": "EnvACE-Qwen3-8B", "messages": []}',
    b'{"model": "EnvACE-Qwen3-8B", "messages": [{"role": "user"}], "tools": 3}',
    b"not json",
    b'{"model": "EnvACE-Qwen3-8B", "messages": [{"role": "user", "content": "hi"}], "stream": true,'
    b' "seed": 3}',
    b'{"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]}',
]


def hot_routes_of(gateway: InProcessGateway) -> HotRoutes:
    """The dispatcher inside a started gateway's middleware stack."""
    layer: Any = gateway.server.config.app.middleware_stack
    while not isinstance(layer, HotRoutes):
        layer = layer.app
    return layer


def test_the_direct_dispatch_answers_as_fastapi_routing_does(start_twin, start_gateway) -> None:
    """The same requests to a gateway with the dispatch and one without: the same answers."""
    twin = start_twin("--latency", "zero", "--seed", "1")
    # The chat lane off (server/http/lane.py): the ASGI stack serves the chat route here.
    no_lane = {"RGW_CHAT_LANE": "false"}
    direct, routed = (start_gateway(f"{twin.url}/v1", env=no_lane) for _ in range(2))
    hot_routes_of(routed).routes.clear()  # every request through FastAPI's router
    assert hot_routes_of(direct).routes
    for body in BODIES:
        answers = []
        for gateway in (direct, routed):
            r = httpx.post(
                f"{gateway.url}/v1/chat/completions",
                content=body,
                headers={"content-type": "application/json", "x-request-id": "same-id"},
            )
            # The twin stamps "created" from its clock: the one field two calls may differ in.
            content = re.sub(rb'"created": ?\d+', b'"created":0', r.content)
            answers.append((r.status_code, r.headers.get("content-type"), content))
        assert answers[0] == answers[1], body
        assert answers[0][0] in (200, 400, 404), answers[0]
