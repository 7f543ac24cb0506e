"""The HTTP client decision: what each engine transport costs in CPU, side by side in one run.

All against one engine twin with ``--latency zero`` (the engine costs no wall time, so CPU is the
client's or the gateway's own):

- ``aiohttp``: httpx with ``httpx_aiohttp.AiohttpTransport`` (aiohttp's pool and parser), what
  ships (``server/engines/client.py``);
- ``httpx``: httpx's default transport (httpcore).

The hand-written transport these were measured against is gone; its figures, from the same
benchmark, are in docs/decisions/0001-engine-client-transport.md.

``clients`` measures the client stack alone, in this process (no gateway): the same chat
request ``--requests`` times, ``--concurrency`` at a time, with each transport and with a bare
``aiohttp.ClientSession`` (aiohttp itself, no httpx on top), in interleaved rounds, as CPU
milliseconds per request; ``--body agent`` sends the realistic agent body of
``benchmarks/bodies.py`` instead, and ``--with pyreqwest`` adds a compiled client (Rust's
reqwest under asyncio, not a dependency) when it is installed. ``serve`` runs a gateway with
one of the transports; it is what ``python -m benchmarks.gateway_cpu --transports
aiohttp,httpx`` starts to measure whole gateways.

    python -m benchmarks.transports clients [--requests 400] [--rounds 3] [--concurrency 8]
                                            [--body world|small|agent] [--with pyreqwest]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bodies import PROFILES, build_bodies  # noqa: E402
from benchmarks.rehearsal import world_request  # noqa: E402
from tests.support.procs import cli_argv, free_port, start_http_server  # noqa: E402
from twin.worlds import load_world  # noqa: E402

TRANSPORTS = ("aiohttp", "httpx")


def transport(name: str, connections: int = 64) -> httpx.AsyncBaseTransport:
    """The engine transport called ``name``."""
    if name == "aiohttp":
        from httpx_aiohttp import AiohttpTransport

        return AiohttpTransport()
    if name == "httpx":
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        return httpx.AsyncHTTPTransport(limits=limits)
    raise ValueError(f"unknown transport {name!r}")


def serve(args: argparse.Namespace) -> int:
    """A gateway in front of ``--engine`` whose plain-http engine calls use ``--transport``."""
    import uvicorn

    from server.app import create_app
    from server.settings import GatewaySettings

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
    async with httpx.AsyncClient(transport=transport(name), headers=headers, timeout=60) as client:

        async def one() -> None:
            async with gate:
                answer = await client.post(url, content=body)
                if answer.status_code != 200:
                    raise RuntimeError(f"HTTP {answer.status_code}")

        started = time.process_time()
        await asyncio.gather(*(one() for _ in range(requests)))
        return (time.process_time() - started) / requests * 1000


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
    shipped = statistics.median(spent["aiohttp"])
    for name, values in spent.items():
        shown = ", ".join(f"{v:.3f}" for v in values)
        median = statistics.median(values)
        ratio = median / shipped
        print(f"  {name:<13} median {median:.3f} ms  x{ratio:.2f} of aiohttp  ({shown})")
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
