"""Engine discovery: a DNS name stands for several engines, and the gateway follows its answer.

The engines are real twins on three loopback addresses sharing one port, exactly as the pods
behind a Kubernetes headless Service share a port on different IPs. The gateway runs in this
process so the test can decide what the name resolves to, and change it while serving; one test
goes through the system resolver instead, with a real gateway process.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn

from rehearsal_gateway.server.app import create_app
from rehearsal_gateway.server.engines.discovery import expand
from rehearsal_gateway.server.settings import EngineSpec, GatewaySettings
from tests.server.conftest import TWIN_MODEL, metric_value
from tests.support.procs import Proc, cli_argv, free_port, start_http_server

ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
HEALTHY = "rehearsal_gateway_engine_healthy"
CALLS = "rehearsal_gateway_engine_call_seconds_count"


class Dns:
    """The answer for ``engines.test``, as the test sets it; ``failing`` makes lookups fail."""

    def __init__(self, *addresses: str) -> None:
        self.addresses = list(addresses)
        self.failing = False
        self.lookups = 0

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        assert host == "engines.test"
        self.lookups += 1
        if self.failing:
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return list(self.addresses)


@pytest.fixture
def twins(tmp_path: Path) -> Iterator[tuple[int, list[Proc]]]:
    """Three engine twins, one per loopback address, all on the same port."""
    port = free_port()
    procs = []
    try:
        for address in ADDRESSES:
            argv = cli_argv("twin", "--host", address, "--port", str(port), "--seed", "1")
            log = tmp_path / f"twin-{address}.log"
            procs.append(start_http_server(argv, port=port, log_path=log, host=address))
        yield port, procs
    finally:
        for proc in procs:
            proc.stop()


@asynccontextmanager
async def gateway(engine: str, dns: Dns) -> AsyncIterator[str]:
    """A gateway served by uvicorn in this event loop, resolving names through ``dns``."""
    settings = GatewaySettings(
        engines=[EngineSpec.parse(engine)],
        port=free_port(),
        health_interval=0.2,
        health_timeout=0.5,
        discovery_interval=0.2,
    )
    config = uvicorn.Config(
        create_app(settings, resolver=dns), port=settings.port, log_level="warning"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        await until(lambda: server.started, seconds=15)
        yield f"http://127.0.0.1:{settings.port}"
    finally:
        server.should_exit = True
        await task


def engine_name(port: int, address: str) -> str:
    return f"engines.test:{port}/{address}"


async def until(check: Callable[[], bool], seconds: float = 10.0) -> None:
    """Poll a (blocking) predicate off the loop until it holds; fail after ``seconds``."""
    for _ in range(int(seconds / 0.05)):
        if await asyncio.to_thread(check):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"still false after {seconds}s")


async def sessions(base_url: str, count: int, tag: str) -> None:
    """``count`` chats with distinct session ids: affinity spreads them over every engine."""
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        for i in range(count):
            body = {
                "model": TWIN_MODEL,
                "messages": [{"role": "user", "content": f"{tag} {i}"}],
                "max_tokens": 8,
            }
            headers = {"X-Session-Id": f"{tag}-{i}"}
            response = await client.post("/v1/chat/completions", json=body, headers=headers)
            assert response.status_code == 200, response.text


def calls(base_url: str, port: int) -> dict[str, float]:
    return {a: metric_value(base_url, CALLS, engine=engine_name(port, a)) for a in ADDRESSES}


def healthy(base_url: str, port: int, address: str) -> bool:
    return metric_value(base_url, HEALTHY, engine=engine_name(port, address)) == 1.0


def exported(base_url: str, port: int, address: str) -> bool:
    """Whether the engine's health gauge is exported at all (a departed engine's is dropped)."""
    series = f'{HEALTHY}{{engine="{engine_name(port, address)}"}}'
    return series in httpx.get(base_url + "/metrics").text


def test_expand_makes_one_engine_per_address() -> None:
    """Each address becomes the group's URL with the host swapped; IPv6 gets its brackets."""
    group = EngineSpec.parse("https://user:pw@engines.test:9000/v1,discover=dns,roles=act,name=g")
    specs = expand(group, ["10.0.0.7", "fd00::2"])
    assert [spec.url for spec in specs] == [
        "https://user:pw@10.0.0.7:9000/v1",
        "https://user:pw@[fd00::2]:9000/v1",
    ]
    assert [spec.label for spec in specs] == ["g/10.0.0.7", "g/fd00::2"]
    assert all(spec.discover is None and spec.roles == {"act"} for spec in specs)
    default_port = expand(EngineSpec.parse("http://engines.test/v1,discover=dns"), ["10.0.0.8"])
    assert default_port[0].url == "http://10.0.0.8:80/v1"


def test_expand_keeps_the_tls_name_of_an_https_group() -> None:
    """An https group's members are checked against the group's name; http ones need none."""
    group = EngineSpec.parse("https://engines.test:9000/v1,discover=dns")
    assert {spec.tls_name for spec in expand(group, ["10.0.0.7", "10.0.0.9"])} == {"engines.test"}
    pinned = EngineSpec.parse("https://engines.test:9000/v1,discover=dns,tls_name=vllm.internal")
    assert expand(pinned, ["10.0.0.7"])[0].tls_name == "vllm.internal"
    plain = EngineSpec.parse("http://engines.test:9000/v1,discover=dns")
    assert expand(plain, ["10.0.0.7"])[0].tls_name is None


def test_discover_option_is_validated() -> None:
    """Only ``discover=dns`` is understood; anything else is a settings error naming it."""
    with pytest.raises(ValueError, match="discover"):
        EngineSpec.parse("http://engines.test:8000/v1,discover=srv")


async def test_gateway_follows_the_dns_answer(twins: tuple[int, list[Proc]]) -> None:
    """Engines join and leave as the name's answer changes; traffic follows, nothing fails."""
    port, _ = twins
    dns = Dns(*ADDRESSES[:2])
    async with gateway(f"http://engines.test:{port}/v1,discover=dns", dns) as url:
        assert (await asyncio.to_thread(httpx.get, url + "/ready")).status_code == 200
        await sessions(url, 16, "two")
        before = await asyncio.to_thread(calls, url, port)
        assert before[ADDRESSES[0]] > 0
        assert before[ADDRESSES[1]] > 0
        assert before[ADDRESSES[2]] == 0

        # Scale up: the third address answers too, is probed, and takes its share.
        dns.addresses = list(ADDRESSES)
        await until(lambda: healthy(url, port, ADDRESSES[2]))
        await sessions(url, 24, "three")
        grown = await asyncio.to_thread(calls, url, port)
        assert grown[ADDRESSES[2]] > 0

        # Scale down: the first address disappears, stops getting calls, and its gauge goes.
        dns.addresses = list(ADDRESSES[1:])
        await until(lambda: not exported(url, port, ADDRESSES[0]))
        await sessions(url, 16, "after")
        shrunk = await asyncio.to_thread(calls, url, port)
        assert shrunk[ADDRESSES[0]] == grown[ADDRESSES[0]]
        assert sum(shrunk.values()) == sum(grown.values()) + 16

        # A resolver outage keeps the last answer: the gateway still serves on both engines.
        dns.failing = True
        failing_since = dns.lookups
        await until(lambda: dns.lookups > failing_since + 2)
        await sessions(url, 8, "outage")
        for address in ADDRESSES[1:]:
            assert await asyncio.to_thread(healthy, url, port, address)


async def test_a_name_that_never_resolves_is_not_ready_and_answers_503() -> None:
    """The gateway starts anyway (engines may come later); calls get 503, not 404."""
    dns = Dns()
    dns.failing = True
    engine = "http://engines.test:8000/v1,discover=dns"
    async with gateway(engine, dns) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
        assert (await client.get("/health")).status_code == 200
        assert (await client.get("/ready")).status_code == 503
        body = {"model": TWIN_MODEL, "messages": [{"role": "user", "content": "hi"}]}
        response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 503
    assert response.json()["error"]["type"] == "service_unavailable"


def test_serve_expands_a_name_through_the_system_resolver(start_twin, start_gateway) -> None:
    """``serve --engine http://localhost:P/v1,discover=dns``: a real lookup, a real answer."""
    twin = start_twin()
    gateway_proc = start_gateway(f"http://localhost:{twin.port}/v1,discover=dns")
    body = {"model": TWIN_MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    response = httpx.post(gateway_proc.url + "/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 200, response.text
    name = f"localhost:{twin.port}/127.0.0.1"
    assert metric_value(gateway_proc.url, HEALTHY, engine=name) == 1.0
    assert metric_value(gateway_proc.url, CALLS, engine=name) == 1.0
