"""The store on a real 3-master Redis Cluster and on a Sentinel-managed pair failing over mid-run.

Every server here is a private ``redis-server`` on free loopback ports (``tests/support``): the
Cluster is created by ``redis-cli --cluster create``; the Sentinel pair is a primary, its replica
and three Sentinels, and the failover is the primary's SIGKILL.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import pytest

from rehearsal_gateway.server.errors import StoreUnavailable
from rehearsal_gateway.server.store.backends import RedisStore
from rehearsal_gateway.server.store.connect import RedisUrlError, Topology, parse
from rehearsal_gateway.server.store.keys import Keys, Lifetimes
from rehearsal_gateway.twin.worlds import World, load_world
from tests.server.conftest import TWIN_MODEL
from tests.server.rehearsal_support import assistant_turn, opening, rehearsal_of
from tests.support.procs import Proc
from tests.support.redis_servers import Cluster, SentinelPair, redis_cluster, redis_sentinel

REHEARSE = {"mode": "parallel", "budget": 3, "commit": "select", "early_exit": False}


# --------------------------------------------------------------------------- the URL forms


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        pytest.param("redis://h:1/0", Topology(kind="node"), id="node"),
        pytest.param("rediss://u:p@h:1/2", Topology(kind="node"), id="node-tls"),
        pytest.param(
            "redis+cluster://a:7000,b:7001/",
            Topology(kind="cluster", addresses=(("a", 7000), ("b", 7001))),
            id="cluster",
        ),
        pytest.param(
            "rediss+cluster://:pw@a/0",
            Topology(kind="cluster", addresses=(("a", 6379),), password="pw", tls=True),
            id="cluster-tls-default-port",
        ),
        pytest.param(
            "redis+sentinel://u:p%40ss@s1:5000,s2,[::1]:5001/mymaster/3",
            Topology(
                kind="sentinel",
                addresses=(("s1", 5000), ("s2", 26379), ("::1", 5001)),
                service="mymaster",
                db=3,
                username="u",
                password="p@ss",
            ),
            id="sentinel",
        ),
    ],
)
def test_redis_url_forms(url: str, expected: Topology) -> None:
    """One node, a Cluster and a Sentinel service are each read from one URL."""
    assert parse(url) == expected


@pytest.mark.parametrize(
    ("url", "says"),
    [
        pytest.param("localhost:6379", "scheme", id="no-scheme"),
        pytest.param("memcached://h:1", "schemes are", id="unknown-scheme"),
        pytest.param("redis+cluster:///", "no host", id="cluster-no-host"),
        pytest.param("redis+cluster://h:1/2", "only database 0", id="cluster-db"),
        pytest.param("redis+sentinel://h:1", "names no service", id="sentinel-no-service"),
        pytest.param("redis+sentinel://h:1/m/x", "a number", id="sentinel-bad-db"),
        pytest.param("redis+sentinel://h:port/m", "host:port", id="bad-port"),
    ],
)
def test_bad_redis_urls_say_what_is_wrong(url: str, says: str) -> None:
    """A URL in none of the forms is refused with the reason."""
    with pytest.raises(RedisUrlError, match=says):
        parse(url)


def test_brace_in_the_prefix_is_refused() -> None:
    """A brace in the prefix would become every key's hash tag: refused."""
    from rehearsal_gateway.server.settings import GatewaySettings

    with pytest.raises(ValueError, match="braces"):
        GatewaySettings(redis_prefix="{rgw}:")


# --------------------------------------------------------------------------- Redis Cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with redis_cluster(tmp_path_factory.mktemp("cluster")) as running:
        yield running


async def test_the_store_works_on_a_cluster_and_spreads_over_its_masters(cluster: Cluster) -> None:
    """Every store operation (the trust script too) runs on the Cluster; one tenant's keys reach
    all three masters."""
    prefix = f"rgwtest-{uuid.uuid4().hex[:8]}:"
    lifetimes = Lifetimes(memory_max_entries=3, grounding_max_per_tool=2)
    store = RedisStore(cluster.url, keys=Keys(prefix=prefix), lifetimes=lifetimes)
    try:
        assert store.kind == "redis-cluster"
        await store.ping()
        for i in range(30):
            await store.save_trace("t", f"rh_{i}", {"i": i})
            await store.append_memory("t", f"s{i}", [{"i": 1}, {"i": 2}])
        await store.append_memory("t", "s0", [{"i": 3}, {"i": 4}])
        assert await store.recent_memory("t", "s0", 10) == [{"i": 4}, {"i": 3}, {"i": 2}]
        assert await store.load_trace("t", "rh_7") == {"i": 7}
        await store.save_pending("t", "call_a", {"tool": "x"})
        assert await store.take_pending("t", "call_a") == {"tool": "x"}
        assert await store.take_pending("t", "call_a") is None
        for n in (1, 2, 3):
            await store.save_grounding("t", "get_order", f'{{"id":{n}}}', {"result": n})
        found = await store.grounding("t", "get_order", '{"id":2}', 5)
        assert found == [{"result": 2}, {"result": 3}]
        for cell in ("oo", "oo", "eo"):  # the trust table: one Lua script on one key
            await store.record_trust("t", "get_order", cell)
        assert (await store.trust_table("t"))["get_order"] == {"oo": 2, "eo": 1}
        per_node = cluster.keys_per_node(prefix)
        assert min(per_node) > 0, f"one tenant's keys did not spread: {per_node}"
        client = cluster.nodes[0].client()
        ground = Keys(prefix).grounding("t", "get_order", "h")
        recent = Keys(prefix).grounding_recent("t", "get_order")
        assert client.cluster("keyslot", ground) == client.cluster("keyslot", recent)  # type: ignore[no-untyped-call]
        client.close()
    finally:
        for node in cluster.nodes:
            client = node.client()
            for key in client.scan_iter(match=prefix + "*"):
                assert client.ttl(key) > 0, key
                client.delete(key)
            client.close()
        await store.close()


def _session(
    gateway: Proc, world: World, session: str, task_index: int, timeout: float = 30
) -> list[Any]:
    """A rehearsed first turn, the tool results sent back, and the rehearsed second turn."""
    url = gateway.url + "/v1"
    with openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=timeout) as sdk:
        task = world.tasks[task_index % len(world.tasks)]
        messages = opening(world, task)
        answers = []
        for _ in range(2):
            completion = sdk.chat.completions.create(
                model=TWIN_MODEL,
                messages=messages,
                tools=world.tool_schemas(),
                seed=3,
                extra_body={"rehearsal": REHEARSE},
                extra_headers={"X-Session-Id": session},
            )
            answers.append(completion)
            calls = completion.choices[0].message.tool_calls or []
            if not calls:
                break
            messages.append(assistant_turn(completion))
            state = world.new_state(task)
            for call in calls:
                try:
                    arguments = json.loads(call.function.arguments)
                except ValueError:
                    arguments = None
                result = world.call(state, call.function.name, arguments)
                content = json.dumps(result)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
    return answers


def test_the_gateway_rehearses_with_memory_and_grounding_on_a_cluster(
    cluster: Cluster, start_twin: Callable[..., Proc], start_gateway: Callable[..., Proc]
) -> None:
    """Through the gateway: sessions on the Cluster, never degraded, memory and grounding kept."""
    prefix = f"rgwtest-{uuid.uuid4().hex[:8]}:"
    twin = start_twin("--world", "retail")
    gateway = start_gateway(
        twin.url + "/v1", env={"RGW_REDIS_URL": cluster.url, "RGW_REDIS_PREFIX": prefix}
    )
    world = load_world("retail")
    answers = [a for i in range(6) for a in _session(gateway, world, f"c-{i}", i)]
    assert [rehearsal_of(a)["degraded"] for a in answers] == [None] * len(answers)
    kinds: dict[str, int] = {}
    for node in cluster.nodes:
        client = node.client()
        for key in client.scan_iter(match=prefix + "*"):
            kind = key.removeprefix(prefix).split(":", 1)[0]
            kinds[kind] = kinds.get(kind, 0) + 1
            client.delete(key)
        client.close()
    assert {"trace", "memory", "ground", "ground-recent"} <= set(kinds), kinds


# --------------------------------------------------------------------------- Sentinel failover


@pytest.fixture
def sentinel_pair(tmp_path: Path) -> Iterator[SentinelPair]:
    with redis_sentinel(tmp_path / "sentinel") as pair:
        yield pair


def _await_failover(pair: SentinelPair, old_port: int, timeout: float = 30) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if pair.current_primary_port() != old_port:
            return time.monotonic() - started
        time.sleep(0.05)
    raise AssertionError("the Sentinels never promoted the replica")


async def test_the_store_fails_fast_then_resumes_after_a_sentinel_failover(
    sentinel_pair: SentinelPair,
) -> None:
    """Primary killed: each call fails fast, then the promoted replica serves everything."""
    pair = sentinel_pair
    store = RedisStore(pair.url, keys=Keys(prefix="rgwtest-failover:"), timeout_s=0.25)
    try:
        assert store.kind == "redis-sentinel"
        await store.append_memory("t", "s", [{"before": 1}])
        await store.save_grounding("t", "get_order", '{"id":1}', {"result": 1})
        assert pair.primary.ask("WAIT", 1, 2000) == 1  # the replica has both writes
        pair.primary.kill()
        slowest, failures, resumed_after = 0.0, 0, None
        started = time.monotonic()
        while time.monotonic() - started < 30:
            began = time.monotonic()
            try:
                await store.append_memory("t", "s", [{"during": failures}])
            except StoreUnavailable:
                failures += 1
                slowest = max(slowest, time.monotonic() - began)
                await asyncio.sleep(0.05)
                continue
            resumed_after = time.monotonic() - started
            break
        assert resumed_after is not None, "the store never came back"
        assert failures > 0, "the kill was not noticed: this test proves nothing"
        assert slowest < 1.5, f"a failing call took {slowest:.2f}s: it should fail fast"
        memory = await store.recent_memory("t", "s", 10)
        assert memory[-1] == {"before": 1}
        assert await store.grounding("t", "get_order", '{"id":1}', 1) == [{"result": 1}]
        assert pair.current_primary_port() == pair.replica.port
    finally:
        await store.close()


@dataclass
class Tally:
    served: int = 0
    degraded: int = 0
    lost: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, answers: list[Any]) -> None:
        with self.lock:
            self.served += len(answers)
            self.degraded += sum(rehearsal_of(a)["degraded"] is not None for a in answers)


def _clients(gateway: Proc, world: World, tally: Tally, stop: threading.Event, name: str) -> None:
    for i in range(200):
        if stop.is_set():
            return
        try:
            tally.record(_session(gateway, world, f"{name}-{i}", i))
        except openai.APIError as exc:
            with tally.lock:
                tally.lost.append(f"{type(exc).__name__}: {exc}")


def test_the_gateway_keeps_serving_through_a_sentinel_failover(
    sentinel_pair: SentinelPair, start_twin: Callable[..., Proc], start_gateway: Callable[..., Proc]
) -> None:
    """Kill the primary under load: nothing lost or hung, and memory and grounding come back."""
    pair = sentinel_pair
    prefix = f"rgwtest-{uuid.uuid4().hex[:8]}:"
    twin = start_twin("--world", "retail")
    gateway = start_gateway(
        twin.url + "/v1", env={"RGW_REDIS_URL": pair.url, "RGW_REDIS_PREFIX": prefix}
    )
    world = load_world("retail")
    tally, stop = Tally(), threading.Event()
    threads = [
        threading.Thread(target=_clients, args=(gateway, world, tally, stop, f"w{n}"))
        for n in range(3)
    ]
    for thread in threads:
        thread.start()
    while tally.served < 10:
        time.sleep(0.02)
    old = pair.primary.port
    pair.primary.kill()
    before_kill = tally.served
    took = _await_failover(pair, old)
    at_failover = (tally.served, tally.degraded)
    time.sleep(2)  # let the clients run on the new primary
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "a client hung"
    assert tally.lost == [], tally.lost
    # After the failover, fresh sessions are rehearsed with memory and grounding again: the
    # grounding kept so far is dropped first, so what is found below was written afterwards.
    new_primary = pair.replica.client()
    for key in new_primary.scan_iter(match=f"{prefix}ground*"):
        new_primary.delete(key)
    answers = [a for i in range(3) for a in _session(gateway, world, f"after-{i}", i)]
    assert [rehearsal_of(a)["degraded"] for a in answers] == [None] * len(answers)
    memory_keys = list(new_primary.scan_iter(match=f"{prefix}memory:*after-*"))
    ground_keys = list(new_primary.scan_iter(match=f"{prefix}ground:*"))
    new_primary.close()
    assert memory_keys, "no memory written after the failover"
    assert ground_keys, "no grounding written after the failover"
    after_promotion = tally.degraded - at_failover[1]
    print(f"\nsentinel failover: promoted after {took:.1f}s; {tally.served} requests served "
          f"({tally.served - before_kill} after the kill), {tally.degraded} degraded "
          f"({after_promotion} after the promotion), {len(tally.lost)} lost")  # fmt: skip
