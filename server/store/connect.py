"""From ``RGW_REDIS_URL`` to a redis-py client: one node, a Redis Cluster, or a Sentinel'd primary.

Three forms, one setting:

    redis://[user:password@]host:port/db            one node (also rediss:// for TLS, unix://)
    redis+cluster://[user:password@]h1:p1,h2:p2/    a Redis Cluster; any reachable node will do,
                                                    the client learns the others (rediss+cluster://)
    redis+sentinel://[user:password@]h1:p1,h2:p2/mymaster[/db]
                                                    the primary that these Sentinels agree on for
                                                    the service ``mymaster`` (rediss+sentinel://)

Ports default to 6379 (nodes) and 26379 (Sentinels). The credentials are the data nodes'; the
Sentinels are asked without any (``docs/limits.md``). A cluster has only database 0.

redis-py has clients for all three (``RedisCluster``, ``Sentinel.master_for``) but reads a URL only
for the first: the other two forms are the ones other Redis tools use, parsed here with
``urllib`` (the one PyPI package for Sentinel URLs, ``redis-sentinel-url``, is sync-only and
unmaintained since 2017).

Every client gets the same bounds: the store's socket timeout, and one immediate retry instead of
redis-py's default of ten with backoff. One retry is what a failover needs — a pooled connection
to the old primary fails once, and the retry connects afresh (to the primary the Sentinels now
name, or along the cluster's new slot map) — while ten would hold a request for seconds while the
primary is down, where failing fast lets the answer go out degraded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff

RedisClient = aioredis.Redis | RedisCluster
CLUSTER_SCHEMES = {"redis+cluster": False, "rediss+cluster": True}  # scheme -> TLS
SENTINEL_SCHEMES = {"redis+sentinel": False, "rediss+sentinel": True}
PLAIN_SCHEMES = ("redis", "rediss", "unix")
SENTINEL_PORT = 26379
NODE_PORT = 6379


class RedisUrlError(ValueError):
    """``RGW_REDIS_URL`` is in none of the three forms (raised while settings are read)."""


@dataclass(frozen=True, slots=True)
class Topology:
    """What a Redis URL names: a kind, the addresses to start from, and how to log in."""

    kind: str  # "node" | "cluster" | "sentinel"
    addresses: tuple[tuple[str, int], ...] = ()
    service: str = ""  # the Sentinel service name
    db: int = 0
    username: str | None = None
    password: str | None = None
    tls: bool = False


def parse(url: str) -> Topology:
    """Read a Redis URL into a ``Topology``; ``RedisUrlError`` says what is wrong."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise RedisUrlError(f"a Redis URL starts with a scheme, got {url!r}")
    if scheme in PLAIN_SCHEMES:
        return Topology(kind="node")
    if scheme not in CLUSTER_SCHEMES and scheme not in SENTINEL_SCHEMES:
        known = ", ".join((*PLAIN_SCHEMES, *CLUSTER_SCHEMES, *SENTINEL_SCHEMES))
        raise RedisUrlError(f"Redis URL schemes are {known}; got {scheme!r}")
    # The host list holds commas, which urlsplit's netloc keeps whole; userinfo ends at the last @.
    netloc, _, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    if not at:
        hosts = netloc
    user, _, password = userinfo.partition(":")
    sentinel = scheme in SENTINEL_SCHEMES
    default_port = SENTINEL_PORT if sentinel else NODE_PORT
    addresses = tuple(_address(item, default_port) for item in hosts.split(",") if item.strip())
    if not addresses:
        raise RedisUrlError(f"{scheme}:// names no host")
    segments = [unquote(s) for s in urlsplit("/" + path).path.split("/") if s]
    common: dict[str, Any] = {
        "addresses": addresses,
        "username": unquote(user) or None,
        "password": unquote(password) or None,
    }
    if sentinel:
        if not segments or len(segments) > 2:
            raise RedisUrlError(f"{scheme}://HOSTS/SERVICE[/DB] names no service: {url!r}")
        return Topology(
            kind="sentinel",
            service=segments[0],
            db=_db(segments[1] if len(segments) == 2 else "0"),
            tls=SENTINEL_SCHEMES[scheme],
            **common,
        )
    if segments not in ([], ["0"]):
        raise RedisUrlError("a Redis Cluster has only database 0")
    return Topology(kind="cluster", tls=CLUSTER_SCHEMES[scheme], **common)


def _address(item: str, default_port: int) -> tuple[str, int]:
    host, _, port = item.strip().rpartition(":") if ":" in item else (item.strip(), "", "")
    host = host.strip("[]")  # an IPv6 literal in brackets
    try:
        return host, int(port) if port else default_port
    except ValueError:
        raise RedisUrlError(f"not a host:port: {item!r}") from None


def _db(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise RedisUrlError(f"the database is a number, got {text!r}") from None


@dataclass(frozen=True, slots=True)
class Connection:
    """The client the store talks through, and what else must be closed with it."""

    client: RedisClient
    kind: str
    sentinels: tuple[aioredis.Redis, ...] = ()  # Sentinel's own connections, one per Sentinel

    async def aclose(self) -> None:
        await self.client.aclose()
        for sentinel in self.sentinels:
            await sentinel.aclose()


def connect(url: str, *, timeout_s: float, max_connections: int) -> Connection:
    """A client for ``url`` with the store's bounds (no I/O until the first command)."""
    topology = parse(url)
    bounds: dict[str, Any] = {
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
        "retry": Retry(NoBackoff(), retries=1),
        "max_connections": max_connections,
        "health_check_interval": 30,
    }
    if topology.kind == "node":
        return Connection(aioredis.Redis.from_url(url, retry_on_timeout=False, **bounds), "node")
    login: dict[str, Any] = {"username": topology.username, "password": topology.password}
    if topology.kind == "cluster":
        nodes = [ClusterNode(host, port) for host, port in topology.addresses]
        cluster = RedisCluster(startup_nodes=nodes, ssl=topology.tls, **login, **bounds)
        return Connection(cluster, "cluster")
    manager = Sentinel(  # type: ignore[no-untyped-call, unused-ignore]  # typed in redis 8.2
        list(topology.addresses),
        sentinel_kwargs={
            "socket_timeout": timeout_s,
            "socket_connect_timeout": timeout_s,
            "retry": Retry(NoBackoff(), retries=0),  # the next Sentinel is the retry
        },
    )
    tls: dict[str, Any] = {"ssl": True} if topology.tls else {}
    primary: aioredis.Redis = manager.master_for(
        topology.service, db=topology.db, retry_on_timeout=False, **login, **tls, **bounds
    )
    return Connection(primary, "sentinel", tuple(manager.sentinels))
