"""How much Redis a rehearsing deployment needs, from the sizes of the keys it really writes.

Starts an engine twin and a gateway with Redis (under a key prefix of this run's own), runs the
example agent over every task of the three twin worlds with rehearsal on (parallel, K = 4, depth
1, ``reflect``, one session per task), then reads ``MEMORY USAGE`` of every key the gateway wrote,
grouped by kind (DESIGN §6, ``server/store/keys.py``), and drops them. It prints the bytes per kind,
per session and per rehearsed turn, and what 1,000 sessions take. Needs a Redis on
``--redis`` (``scripts/redis.sh`` starts one).

    python -m benchmarks.redis_memory [--redis redis://127.0.0.1:6379/0] [--max-turns 6]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from clients.agent import ExampleAgent, ToolLatency  # noqa: E402
from clients.client import AsyncRehearsalClient, Rehearsal  # noqa: E402
from tests.support.procs import Proc, cli_argv, free_port, start_http_server  # noqa: E402
from twin.worlds import load_world  # noqa: E402

MODEL = "EnvACE-Qwen3-8B"
WORLDS = ("airline", "retail", "bank")
KINDS = ("memory", "trace", "pending", "ground", "ground-recent")


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--max-turns", type=int, default=6)
    args = parser.parse_args()

    prefix = f"rgw-size-{os.getpid()}:"
    store = redis.Redis.from_url(args.redis)
    store.ping()
    with tempfile.TemporaryDirectory(prefix="rgw-redis-size-") as tmp:
        twin, gateway = _start(Path(tmp), args.redis, prefix)
        try:
            sessions, turns = asyncio.run(_run_agents(gateway.url, args.max_turns))
            size, count = _measure(store, prefix)
        finally:
            gateway.stop()
            twin.stop()
            for key in store.scan_iter(match=prefix + "*", count=1000):
                store.delete(key)

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
    return 0


if __name__ == "__main__":
    sys.exit(main())
