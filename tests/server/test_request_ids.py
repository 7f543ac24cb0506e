"""The client's ``X-Request-Id`` on every engine call of a request, derived for rehearsal's calls.

Gateway -> a recording hop on loopback -> engine twin, with the real Redis. The hop is a plain
HTTP forwarder that notes the ``X-Request-Id`` of every chat call it carries, so the test sees
exactly what an engine (vLLM names its request, its answer and its log lines by that id) would.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from rehearsal_gateway.twin.worlds import World, load_world
from tests.server.conftest import FAST_HEALTH, TWIN_MODEL
from tests.server.rehearsal_support import REDIS_URL, drop_prefix, opening
from tests.support import inprocess
from tests.support.procs import Proc, cli_argv, free_port, start_http_server

CHAT = "/v1/chat/completions"


@dataclass
class Recorder:
    """A forwarding HTTP server that records the request id of every chat call it forwards."""

    target: str
    seen: list[str | None] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def app(self) -> Starlette:
        client = httpx.AsyncClient(base_url=self.target, timeout=60)

        async def forward(request: Request) -> Response:
            if request.url.path == CHAT:
                with self.lock:
                    self.seen.append(request.headers.get("x-request-id"))
            keep = {k: v for k, v in request.headers.items() if k.lower() not in ("host",)}
            upstream = await client.request(
                request.method, request.url.path, content=await request.body(), headers=keep
            )
            drop = ("content-length", "transfer-encoding", "content-encoding")
            headers = {k: v for k, v in upstream.headers.items() if k.lower() not in drop}
            return Response(upstream.content, upstream.status_code, headers)

        @asynccontextmanager
        async def lifespan(_: Starlette) -> AsyncIterator[None]:
            yield
            await client.aclose()  # its connections to the twin close with the hop

        methods = ["GET", "POST"]
        routes = [Route("/{path:path}", forward, methods=methods)]
        return Starlette(routes=routes, lifespan=lifespan)

    def take(self) -> list[str | None]:
        with self.lock:
            out, self.seen[:] = list(self.seen), []
        return out


@dataclass
class Setup:
    gateway: str
    recorder: Recorder
    world: World


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    logs: Path = tmp_path_factory.mktemp("request-ids")
    port = free_port()
    argv = cli_argv("twin", "--port", str(port), "--world", "retail", "--seed", "2")
    twin: Proc = start_http_server(argv, port=port, log_path=logs / "twin.log")
    recorder = Recorder(twin.url)
    hop_port = free_port()
    config = uvicorn.Config(
        recorder.app(), host="127.0.0.1", port=hop_port, log_level="warning", lifespan="on"
    )
    hop = uvicorn.Server(config)
    thread = threading.Thread(target=hop.run, name="recording-hop", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not hop.started and time.monotonic() < deadline:
        time.sleep(0.05)
    prefix = f"rgwtest-ids-{port}:"
    env = {**FAST_HEALTH, "RGW_REDIS_URL": REDIS_URL, "RGW_REDIS_PREFIX": prefix}
    gateway = inprocess.start_gateway(
        ["--engine", f"http://127.0.0.1:{hop_port}/v1"], log_path=logs / "gateway.log", env=env
    )
    try:
        yield Setup(gateway.url, recorder, load_world("retail"))
    finally:
        gateway.stop()
        hop.should_exit = True
        thread.join(timeout=10)
        twin.stop()
        drop_prefix(prefix)


def _body(setup: Setup, **extra: Any) -> dict[str, Any]:
    return {
        "model": TWIN_MODEL,
        "messages": opening(setup.world, setup.world.tasks[0]),
        "tools": setup.world.tool_schemas(),
        "seed": 3,
        **extra,
    }


def _post(setup: Setup, body: dict[str, Any], request_id: str | None) -> httpx.Response:
    headers = {"X-Request-Id": request_id} if request_id else {}
    url = setup.gateway + CHAT
    if not body.get("stream"):
        return httpx.post(url, json=body, headers=headers, timeout=60)
    with httpx.stream("POST", url, json=body, headers=headers, timeout=60) as response:
        response.read()
        return response


def _summary(response: httpx.Response) -> dict[str, Any]:
    if not response.headers["content-type"].startswith("text/event-stream"):
        summary: dict[str, Any] = response.json()["rehearsal"]
        return summary
    for line in response.text.splitlines():
        if line.startswith("data: {") and '"rehearsal"' in line:
            found: dict[str, Any] = json.loads(line.removeprefix("data: "))["rehearsal"]
            return found
    raise AssertionError("no rehearsal summary in the stream")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_rehearsal_calls_get_ids_derived_from_the_clients(setup: Setup, stream: bool) -> None:
    """Every engine call of one rehearsed request carries ``<client id>-<role>-<n>``: distinct
    per call, one per call the trace counts, with the role of the call it names."""
    setup.recorder.take()
    body = _body(setup, stream=stream, rehearsal={"mode": "parallel", "budget": 2})
    response = _post(setup, body, f"ids-rehearsed-{int(stream)}")
    assert response.status_code == 200, response.text
    assert response.headers["x-request-id"] == f"ids-rehearsed-{int(stream)}"
    summary = _summary(response)
    seen = setup.recorder.take()
    trace = httpx.get(f"{setup.gateway}/v1/rehearsals/{summary['id']}", timeout=10).json()
    assert summary["engine_calls"] == sum(trace["engine_calls"].values()) == len(seen) >= 2
    assert len(set(seen)) == len(seen), seen
    roles: dict[str, int] = {}
    for number, request_id in enumerate(seen, start=1):
        assert request_id is not None
        client_id, role, n = request_id.rsplit("-", 2)
        assert client_id == f"ids-rehearsed-{int(stream)}"
        assert n == str(number)  # numbered in the order the calls are made
        roles[role] = roles.get(role, 0) + 1
    assert roles == trace["engine_calls"]


def test_pass_through_carries_the_clients_id_unchanged(setup: Setup) -> None:
    """A pass-through call is the client's own request: the engine sees its id as sent."""
    setup.recorder.take()
    response = _post(setup, _body(setup), "ids-plain-1")
    assert response.status_code == 200, response.text
    assert setup.recorder.take() == ["ids-plain-1"]
    assert response.json()["id"] == "chatcmpl-ids-plain-1"  # vLLM's answer named by it


def test_a_minted_id_is_derived_from_too(setup: Setup) -> None:
    """Without a client id the gateway mints one, and rehearsal's calls derive from that."""
    setup.recorder.take()
    body = _body(setup, rehearsal={"mode": "parallel", "budget": 2})
    response = _post(setup, body, None)
    assert response.status_code == 200, response.text
    minted = response.headers["x-request-id"]
    assert minted.startswith("req_")
    seen = setup.recorder.take()
    assert seen
    assert all(s is not None and s.startswith(minted + "-") for s in seen), seen
