"""Private Redis topologies on loopback: a 3-master Cluster, and a primary/replica under Sentinel.

Each server is a real ``redis-server`` on free ports in its own process group and directory, so
a test can kill one (a failover), and nothing touches the shared Redis on 6379. Everything is
stopped when the context ends.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import redis
import redis.asyncio as aioredis

from rehearsal_gateway.server.store.backends import RedisStore
from rehearsal_gateway.server.store.keys import Keys, Lifetimes
from tests.support.procs import free_port


@dataclass
class RedisProc:
    """One running redis-server (or Sentinel) and where it listens."""

    popen: subprocess.Popen[bytes]
    port: int
    log_path: Path

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=2, decode_responses=True)

    def ask(self, *command: str | int) -> object:
        """One command on a connection of its own, closed at once."""
        with self.client() as client:
            return client.execute_command(*command)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, sig)
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=5)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)


def _port_pair_free(port: int) -> bool:
    """A cluster node also listens on port + 10000 (its cluster bus)."""
    if port + 10000 > 65535:
        return False
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port + 10000))
        except OSError:
            return False
    return True


def cluster_port() -> int:
    for _ in range(200):
        port = free_port()
        if _port_pair_free(port):
            return port
    raise RuntimeError("no free port pair for a cluster node")


def start_redis(
    workdir: Path, port: int, *args: str, sentinel_conf: Path | None = None
) -> RedisProc:
    """``redis-server`` (or ``--sentinel`` with a config file) on ``port``; waits for PONG."""
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "redis.log"
    argv = ["redis-server"]
    if sentinel_conf is not None:
        argv += [str(sentinel_conf), "--sentinel"]
    argv += ["--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir)]
    if sentinel_conf is None:
        argv += ["--save", "", "--appendonly", "no"]
    argv += [*args, "--logfile", str(log_path)]
    popen = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True
    )
    proc = RedisProc(popen, port, log_path)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if popen.poll() is not None:
            raise RuntimeError(f"redis-server on {port} exited: {proc.log()}")
        with contextlib.suppress(redis.RedisError):
            if proc.ask("PING"):
                return proc
        time.sleep(0.05)
    proc.stop()
    raise RuntimeError(f"redis-server on {port} did not answer: {proc.log()}")


@dataclass
class Cluster:
    nodes: list[RedisProc]

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes) + "/"

    def keys_per_node(self, prefix: str) -> list[int]:
        """How many of ``prefix``'s keys each master holds (SCAN per node, as an operator would)."""
        counts = []
        for node in self.nodes:
            client = node.client()
            counts.append(sum(1 for _ in client.scan_iter(match=prefix + "*")))
            client.close()
        return counts


@contextlib.contextmanager
def redis_cluster(workdir: Path, masters: int = 3) -> Iterator[Cluster]:
    """``masters`` nodes with ``--cluster-enabled yes`` joined by ``redis-cli --cluster create``."""
    nodes: list[RedisProc] = []
    try:
        for i in range(masters):
            port = cluster_port()
            flags = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                     "--cluster-node-timeout", "2000")  # fmt: skip
            nodes.append(start_redis(workdir / f"node-{i}", port, *flags))
        create = ["redis-cli", "--cluster", "create"]
        create += [f"127.0.0.1:{n.port}" for n in nodes]
        create += ["--cluster-replicas", "0", "--cluster-yes"]
        subprocess.run(create, check=True, capture_output=True, timeout=60)
        _wait_cluster_ok(nodes)
        yield Cluster(nodes)
    finally:
        for node in nodes:
            node.stop()


def _wait_cluster_ok(nodes: Sequence[RedisProc]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        states = []
        for node in nodes:
            client = node.client()
            states.append(client.cluster("info").get("cluster_state"))  # type: ignore[no-untyped-call]
            client.close()
        if all(state == "ok" for state in states):
            return
        time.sleep(0.1)
    raise RuntimeError(f"the cluster did not reach state ok: {states}")


@dataclass
class SentinelPair:
    primary: RedisProc
    replica: RedisProc
    sentinels: list[RedisProc] = field(default_factory=list)
    service: str = "mymaster"

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}/0"

    def current_primary_port(self) -> int:
        client = self.sentinels[0].client()
        try:
            _host, port = client.sentinel_get_master_addr_by_name(self.service)
        finally:
            client.close()
        return int(port)


@contextlib.contextmanager
def redis_sentinel(workdir: Path, sentinels: int = 3) -> Iterator[SentinelPair]:
    """A primary, its replica and ``sentinels`` Sentinels (quorum 2) that fail over in ~1 s."""
    procs: list[RedisProc] = []
    try:
        primary = start_redis(workdir / "primary", free_port())
        procs.append(primary)
        replica_port = free_port()
        replica = start_redis(
            workdir / "replica", replica_port, "--replicaof", "127.0.0.1", str(primary.port)
        )
        procs.append(replica)
        _wait_replicated(replica)
        pair = SentinelPair(primary, replica)
        quorum = sentinels // 2 + 1
        for i in range(sentinels):
            conf = workdir / f"sentinel-{i}" / "sentinel.conf"
            conf.parent.mkdir(parents=True, exist_ok=True)
            conf.write_text(
                f"sentinel monitor {pair.service} 127.0.0.1 {primary.port} {quorum}\n"
                f"sentinel down-after-milliseconds {pair.service} 1000\n"
                f"sentinel failover-timeout {pair.service} 5000\n"
                f"sentinel parallel-syncs {pair.service} 1\n"
            )
            sentinel = start_redis(conf.parent, free_port(), sentinel_conf=conf)
            procs.append(sentinel)
            pair.sentinels.append(sentinel)
        _wait_sentinels_see_replica(pair)
        yield pair
    finally:
        for proc in reversed(procs):
            proc.stop()


def _wait_replicated(replica: RedisProc) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        with replica.client() as client:
            info = client.info("replication")
        if info.get("master_link_status") == "up":
            return
        time.sleep(0.05)
    raise RuntimeError(f"the replica never linked to its primary: {replica.log()}")


def _wait_sentinels_see_replica(pair: SentinelPair) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        ready = 0
        for sentinel in pair.sentinels:
            client = sentinel.client()
            try:
                replicas = client.sentinel_slaves(pair.service)
                peers = client.sentinel_sentinels(pair.service)
            finally:
                client.close()
            if replicas and len(peers) == len(pair.sentinels) - 1:
                ready += 1
        if ready == len(pair.sentinels):
            return
        time.sleep(0.1)
    raise RuntimeError("the Sentinels never learned of the replica and of each other")


SHARED_REDIS_URL = "redis://127.0.0.1:6379/0"


@contextlib.asynccontextmanager
async def scratch_store(
    url: str = SHARED_REDIS_URL, *, lifetimes: Lifetimes | None = None
) -> AsyncIterator[RedisStore]:
    """A ``RedisStore`` under a prefix of its own on a running Redis; its keys go afterwards."""
    keys = Keys(prefix=f"rgwtest-{uuid.uuid4().hex[:8]}:")
    store = RedisStore(url, keys=keys, **({"lifetimes": lifetimes} if lifetimes else {}))
    try:
        yield store
    finally:
        raw = aioredis.Redis.from_url(url)
        async for key in raw.scan_iter(match=keys.pattern()):
            await raw.delete(key)
        await raw.aclose()
        await store.close()
