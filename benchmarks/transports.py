"""The HTTP client decision: what each engine transport costs in CPU, side by side in one run.

All against one engine twin with ``--latency zero`` (the engine costs no wall time, so CPU is the
client's or the gateway's own):

- ``wire``: ``WireTransport`` (asyncio's sockets and httptools' parser), the default
  (``server/engines/wire.py``);
- ``aiohttp``: ``AiohttpTransport`` (aiohttp's pool and parser), the other one the gateway ships
  (``server/engines/transports.py``, ``RGW_ENGINE_TRANSPORT=aiohttp``);
- ``httpx``: ``HttpxTransport`` (below), httpx's client on its own transport (httpcore).

Each through the engine-transport seam (``server/engines/transport.py``), as the gateway calls it
(figures: docs/decisions/0104-wire-behind-the-seam.md).

``clients`` measures the client stack alone, in this process (no gateway): the same chat
request ``--requests`` times, ``--concurrency`` at a time, with each transport and with a bare
``aiohttp.ClientSession`` (aiohttp itself, no seam on top), in interleaved rounds, as CPU
milliseconds per request; ``--body agent`` sends the realistic agent body of
``benchmarks/bodies.py`` instead, and ``--with pyreqwest`` adds a compiled client (Rust's
reqwest under asyncio, not a dependency) when it is installed. ``serve`` runs a gateway with
one of the transports; it is what ``python -m benchmarks.gateway_cpu --transports
wire,aiohttp,httpx`` starts to measure whole gateways.

    python -m benchmarks.transports clients [--requests 400] [--rounds 3] [--concurrency 8]
                                            [--body world|small|agent] [--with pyreqwest]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import ssl
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bodies import PROFILES, build_bodies  # noqa: E402
from benchmarks.rehearsal import world_request  # noqa: E402
from rehearsal_gateway.server.engines.transport import (  # noqa: E402
    EngineRequest,
    EngineResponse,
    EngineTransport,
)
from rehearsal_gateway.server.engines.transports import AiohttpTransport  # noqa: E402
from rehearsal_gateway.server.engines.wire import WireTransport  # noqa: E402
from rehearsal_gateway.twin.worlds import load_world  # noqa: E402
from tests.support.procs import cli_argv, free_port, start_http_server  # noqa: E402

TRANSPORTS = ("wire", "aiohttp", "httpx")


class HttpxResponse:
    """An ``httpx.Response`` opened with ``stream=True`` behind the seam."""

    __slots__ = ("_response",)

    def __init__(self, response: httpx.Response) -> None:
        self._response = response

    @property
    def status(self) -> int:
        return self._response.status_code

    @property
    def headers(self) -> Mapping[str, str]:
        return self._response.headers

    async def read(self) -> bytes:
        try:
            return await self._response.aread()
        finally:
            await self._response.aclose()

    def chunks(self) -> AsyncIterator[bytes]:
        return self._response.aiter_raw()

    async def aclose(self) -> None:
        await self._response.aclose()


class HttpxTransport:
    """Engine calls on one ``httpx.AsyncClient`` with httpx's own transport (httpcore).

    A contender for this benchmark, not a transport the gateway ships: httpcore closes an idle
    socket only when the pool is next used (``tests/server/test_engine_http.py`` pins that the
    gateway's does it on time).
    """

    def __init__(self, *, sockets: int = 100, keepalive_s: float = 4.0, write_s: float = 30.0,
                 tls: ssl.SSLContext | None = None) -> None:  # fmt: skip
        limits = httpx.Limits(
            max_connections=sockets, max_keepalive_connections=sockets, keepalive_expiry=keepalive_s
        )
        self.write_s = write_s
        self._client = httpx.AsyncClient(
            limits=limits,
            verify=tls or ssl.create_default_context(),
            headers={"accept-encoding": "identity"},  # never a compressed answer
            trust_env=False,
        )
        self._timeouts: dict[float | None, httpx.Timeout] = {}

    def _timeout(self, connect_s: float | None) -> httpx.Timeout:
        timeout = self._timeouts.get(connect_s)
        if timeout is None:
            timeout = httpx.Timeout(connect=connect_s, read=None, write=self.write_s, pool=None)
            self._timeouts[connect_s] = timeout
        return timeout

    async def send(self, request: EngineRequest) -> EngineResponse:
        extensions = {"sni_hostname": request.server_name} if request.server_name else None
        built = self._client.build_request(
            request.method, request.url, content=request.body, headers=request.headers,
            timeout=self._timeout(request.connect_s), extensions=extensions,
        )  # fmt: skip
        return HttpxResponse(await self._client.send(built, stream=True))

    async def aclose(self) -> None:
        await self._client.aclose()


def transport(name: str, connections: int = 64) -> EngineTransport:
    """The engine transport called ``name``."""
    if name == "wire":
        return WireTransport(sockets=connections)
    if name == "aiohttp":
        return AiohttpTransport(sockets=connections)
    if name == "httpx":
        return HttpxTransport(sockets=connections)
    raise ValueError(f"unknown transport {name!r}")


def serve(args: argparse.Namespace) -> int:
    """A gateway in front of ``--engine`` whose engine calls use ``--transport``."""
    import uvicorn

    from rehearsal_gateway.server.app import create_app
    from rehearsal_gateway.server.settings import GatewaySettings

    settings = GatewaySettings(engines=[args.engine], port=args.port)
    app = create_app(settings, engine_transport=transport(args.transport))
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")
    return 0


Send = Callable[[bytes], Awaitable[bytes]]


async def _rounds(url: str, body: bytes, requests: int, conc: int, name: str) -> float:
    """CPU ms per request of ``requests`` chat calls with client ``name``."""
    gate = asyncio.Semaphore(conc)
    headers = {"content-type": "application/json", "accept-encoding": "identity"}
    if name == "aiohttp-bare":
        import aiohttp

        async with aiohttp.ClientSession(headers=headers) as session:

            async def one_bare() -> None:
                async with gate, session.post(url, data=body) as answer:
                    await answer.read()
                    if answer.status != 200:
                        raise RuntimeError(f"HTTP {answer.status}")

            started = time.process_time()
            await asyncio.gather(*(one_bare() for _ in range(requests)))
            return (time.process_time() - started) / requests * 1000
    if name == "pyreqwest":
        return await _rounds_pyreqwest(url, body, requests, gate, headers)
    engine = transport(name)
    request = EngineRequest("POST", url, headers, body, connect_s=60)

    async def one() -> None:
        async with gate:
            answer = await engine.send(request)
            await answer.read()
            if answer.status != 200:
                raise RuntimeError(f"HTTP {answer.status}")

    try:
        started = time.process_time()
        await asyncio.gather(*(one() for _ in range(requests)))
        return (time.process_time() - started) / requests * 1000
    finally:
        await engine.aclose()


async def _rounds_pyreqwest(
    url: str, body: bytes, requests: int, gate: asyncio.Semaphore, headers: dict[str, str]
) -> float:
    """The same rounds on pyreqwest (Rust's reqwest and hyper under asyncio): a contender only.

    Not a dependency: ``--with pyreqwest`` measures it when it is installed. Its requests run on
    tokio threads of this process, which ``time.process_time`` counts with the rest.
    """
    from pyreqwest.client import ClientBuilder

    async with ClientBuilder().default_headers(headers).build() as client:

        async def one() -> None:
            async with gate:
                answer = await client.post(url).body_bytes(body).build().send()
                await answer.bytes()
                if answer.status != 200:
                    raise RuntimeError(f"HTTP {answer.status}")

        started = time.process_time()
        await asyncio.gather(*(one() for _ in range(requests)))
        return (time.process_time() - started) / requests * 1000


def clients(args: argparse.Namespace) -> int:
    """The client stacks alone, interleaved rounds, CPU ms per request."""
    if args.body == "world":
        world = load_world("retail")
        body = orjson.dumps({**world_request(world, 0, 0, None), "model": "EnvACE-Qwen3-8B"})
    else:
        body = build_bodies(args.body, 1, seed=7)[0]
    names = [*TRANSPORTS, "aiohttp-bare"]
    for extra in args.contenders:
        if importlib.util.find_spec(extra) is None:
            print(f"{extra} is not installed: `pip install {extra}` to measure it too")
        else:
            names.append(extra)
    spent: dict[str, list[float]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="rgw-transports-") as tmp:
        port = free_port()
        twin = start_http_server(
            cli_argv("twin", "--port", str(port), "--latency", "zero", "--seed", "1"),
            port=port, log_path=Path(tmp) / "twin.log",
        )  # fmt: skip
        url = twin.url + "/v1/chat/completions"
        try:
            for name in names:  # warm-up
                asyncio.run(_rounds(url, body, 40, args.concurrency, name))
            for _ in range(args.rounds):
                for name in names:
                    value = asyncio.run(_rounds(url, body, args.requests, args.concurrency, name))
                    spent[name].append(value)
        finally:
            twin.stop()
    shape = f"{args.requests} requests x {args.rounds} rounds, concurrency {args.concurrency}"
    what = "retail world request" if args.body == "world" else f"{args.body} body"
    print(f"client CPU per engine request ({what}, {shape}, twin latency zero)")
    shipped = statistics.median(spent["wire"])
    for name, values in spent.items():
        shown = ", ".join(f"{v:.3f}" for v in values)
        median = statistics.median(values)
        ratio = median / shipped
        print(f"  {name:<13} median {median:.3f} ms  x{ratio:.2f} of wire  ({shown})")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("clients", help="the client stacks alone")
    one.add_argument("--requests", type=int, default=400)
    one.add_argument("--rounds", type=int, default=3)
    one.add_argument("--concurrency", type=int, default=8)
    one.add_argument(
        "--body", choices=["world", *PROFILES], default="world",
        help="the request: the retail world's, or a body profile of benchmarks/bodies.py",
    )  # fmt: skip
    one.add_argument(
        "--with", dest="contenders", action="append", default=[], choices=["pyreqwest"],
        help="also measure a client that is no dependency of ours, if it is installed",
    )  # fmt: skip
    one.set_defaults(func=clients)
    gateway = sub.add_parser("serve", help="a gateway with one engine transport")
    gateway.add_argument("--transport", choices=TRANSPORTS, required=True)
    gateway.add_argument("--port", type=int, required=True)
    gateway.add_argument("--engine", required=True)
    gateway.set_defaults(func=serve)
    args = parser.parse_args()
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
