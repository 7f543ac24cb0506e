"""How much Redis a rehearsing deployment needs, from the sizes of the keys it really writes.

Starts an engine twin and a gateway with Redis (under a key prefix of this run's own), runs the
example agent over every task of the three twin worlds with rehearsal on (parallel, K = 4, depth
1, ``reflect``, one session per task), then reads ``MEMORY USAGE`` of every key the gateway wrote,
grouped by kind (DESIGN §6, ``server/store/keys.py``), and drops them. It prints the bytes per kind,
per session and per rehearsed turn, and what 1,000 sessions take; and, from ``INFO commandstats``
around the run, the Redis commands the gateway sent per rehearsed turn, writes and reads apart
(the ops/s a deployment needs, docs/deploy.md). By default it starts a private ``redis-server`` on
a free port, so that no other client's commands are counted; ``--redis URL`` uses that server
instead (its command counts then include whatever else talks to it).

    python -m benchmarks.redis_memory [--redis redis://127.0.0.1:6379/0] [--max-turns 6]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rehearsal_gateway.clients.agent import ExampleAgent, ToolLatency  # noqa: E402
from rehearsal_gateway.clients.client import AsyncRehearsalClient, Rehearsal  # noqa: E402
from rehearsal_gateway.twin.worlds import load_world  # noqa: E402
from tests.support.procs import Proc, cli_argv, free_port, start_http_server  # noqa: E402
from tests.support.redis_servers import start_redis  # noqa: E402

MODEL = "EnvACE-Qwen3-8B"
WORLDS = ("airline", "retail", "bank")
KINDS = ("memory", "trace", "pending", "ground", "ground-recent")
# What the store sends (server/store/backends.py), by whether it changes data; MULTI/EXEC wrap the
# writes of one transaction and are counted apart. Anything else (this script's own SCAN, MEMORY,
# INFO; readiness PINGs) is not the store's traffic per turn.
WRITES = ("set", "getdel", "lpush", "ltrim", "expire", "lrem", "del", "eval", "evalsha")
READS = ("get", "lrange", "mget", "hgetall", "hget")
FRAMING = ("multi", "exec")


def _start(workdir: Path, redis_url: str, prefix: str) -> tuple[Proc, Proc]:
    twin_port, gateway_port = free_port(), free_port()
    twin = start_http_server(
        cli_argv("twin", "--port", str(twin_port), "--skill", "0.5", "--fidelity", "0.95",
                 "--seed", "1"),
        port=twin_port, log_path=workdir / "twin.log",
    )  # fmt: skip
    gateway = start_http_server(
        cli_argv("serve", "--port", str(gateway_port), "--engine", twin.url + "/v1",
                 "--redis", redis_url),
        port=gateway_port, log_path=workdir / "gateway.log", env={"RGW_REDIS_PREFIX": prefix},
    )  # fmt: skip
    return twin, gateway


async def _run_agents(gateway: str, max_turns: int) -> tuple[int, int]:
    """Every task of every world, one session each; returns (sessions, turns)."""
    client = AsyncRehearsalClient(gateway + "/v1", api_key="unused")
    knobs = Rehearsal(mode="parallel", budget=4, depth=1, commit="reflect")
    sessions = turns = 0
    try:
        for name in WORLDS:
            world = load_world(name)
            agent = ExampleAgent(
                client, world, model=MODEL, rehearsal=knobs,
                latency=ToolLatency(read_s=0.0, write_s=0.0), max_turns=max_turns, seed=7,
            )  # fmt: skip
            for task in world.tasks:
                episode = await agent.run(task, session_id=f"size-{task.id}")
                sessions += 1
                turns += episode.turns
    finally:
        await client.close()
    return sessions, turns


def _measure(store: redis.Redis, prefix: str) -> tuple[Counter[str], Counter[str]]:
    """Bytes and key counts per kind, for every key under ``prefix``."""
    size: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for key in store.scan_iter(match=prefix + "*", count=1000):
        kind = key.decode().removeprefix(prefix).split(":", 1)[0]
        size[kind] += int(store.memory_usage(key, samples=0) or 0)
        count[kind] += 1
    return size, count


def commands(store: redis.Redis) -> Counter[str]:
    """Calls per command since the server started (``INFO commandstats``)."""
    stats = store.info("commandstats")
    return Counter({name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()})


@contextlib.contextmanager
def redis_url(given: str | None, workdir: Path) -> Iterator[str]:
    """The given server, or a private one on a free port for the length of the run."""
    if given is not None:
        yield given
        return
    server = start_redis(workdir / "redis", free_port())
    try:
        yield f"redis://127.0.0.1:{server.port}/0"
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis", default=None, help="a server to use (default: a private one)")
    parser.add_argument("--max-turns", type=int, default=6)
    args = parser.parse_args()

    prefix = f"rgw-size-{os.getpid()}:"
    with tempfile.TemporaryDirectory(prefix="rgw-redis-size-") as tmp, \
            redis_url(args.redis, Path(tmp)) as url:  # fmt: skip
        store = redis.Redis.from_url(url)
        store.ping()
        twin, gateway = _start(Path(tmp), url, prefix)
        try:
            before = commands(store)
            sessions, turns = asyncio.run(_run_agents(gateway.url, args.max_turns))
            sent = commands(store) - before
            size, count = _measure(store, prefix)
        finally:
            gateway.stop()
            twin.stop()
            for key in store.scan_iter(match=prefix + "*", count=1000):
                store.delete(key)
            store.close()

    print(f"{sessions} sessions, {turns} rehearsed turns (parallel K=4, depth 1, reflect)\n")
    print(f"{'kind':<14}{'keys':>7}{'bytes':>11}{'bytes/key':>11}")
    for kind in KINDS:
        per_key = size[kind] / count[kind] if count[kind] else 0
        print(f"{kind:<14}{count[kind]:>7}{size[kind]:>11}{per_key:>11.0f}")
    total = sum(size.values())
    print(f"{'all':<14}{sum(count.values()):>7}{total:>11}")
    print(f"\nper session: {total / sessions / 1024:.1f} KiB "
          f"(memory {size['memory'] / sessions / 1024:.1f} KiB, "
          f"traces {size['trace'] / sessions / 1024:.1f} KiB)")  # fmt: skip
    print(f"per rehearsed turn, trace: {size['trace'] / max(turns, 1) / 1024:.1f} KiB")
    print(f"1,000 such sessions alive at once: {total / sessions * 1000 / 2**20:.1f} MiB")
    writes = sum(sent[name] for name in WRITES)
    reads = sum(sent[name] for name in READS)
    framed = sum(sent[name] for name in FRAMING)
    shown = ", ".join(f"{name} {sent[name]}" for name in (*WRITES, *READS, *FRAMING) if sent[name])
    private = "private server" if args.redis is None else "shared server: may include others"
    per = max(turns, 1)
    print(f"\nRedis commands per rehearsed turn ({private}): "
          f"{(writes + reads + framed) / per:.1f} — writes {writes / per:.1f}, "
          f"reads {reads / per:.1f}, MULTI/EXEC {framed / per:.1f}")  # fmt: skip
    print(f"  ({shown}; over {turns} turns)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
