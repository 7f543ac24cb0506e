"""Pass-through cost of the gateway next to vllm-router's, both in front of one engine, one run.

Starts the engine twin (``--latency zero``: the engine costs no wall time), the pinned
``vllm-router`` in front of it (the deploy files' flags, ``tests/support/router.py``) and a
gateway in front of it (pass-through: no rehearsal). For each body profile
(``benchmarks/bodies.py``: ``small``, and ``agent``, a realistic mid-task agent turn) and each
client count it sends rounds straight to the twin, through the router and through the gateway,
rotating the order every round so machine drift hits all three alike. The load generator is a
bare keep-alive HTTP/1.1 client on asyncio streams, so its own CPU stays small.

Printed per profile and client count, for each front: p50/p99 latency, the latency it adds to the
direct path, its process's CPU time per request (every thread's, from the scheduler's count
in ``/proc/<pid>/task/*/schedstat``; the twin's and this script's CPU are excluded) and errors;
then the gateway's ratios to vllm-router. Ratios from one run, not absolute times, are the point.
``--floor`` adds two more fronts, the Python floor (``benchmarks/floor_relay.py``: a bare relay on
the gateway's uvicorn and aiohttp, no gateway logic) and the bare floor
(``benchmarks/floor_bare.py``: no ASGI server at all, asyncio with httptools and the gateway's
engine transport), to tell the gateway's own cost from its stack's, and its stack's from Python's.
``--against DIR`` (repeatable) adds the gateway of another source tree (say a ``git worktree`` of
the commit before a change) as one more front, and the gateway's CPU as a multiple of that one's:
before and after, on the same machine in the same rounds.

    python -m benchmarks.overhead [--rounds 4] [--requests 300] [--clients 1 16 64]
                                  [--profiles small agent] [--floor] [--against DIR]
                                  [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bodies import PROFILES, build_bodies  # noqa: E402
from benchmarks.gateway_cpu import cpu_seconds, tree_cli_argv  # noqa: E402
from tests.support.procs import Proc, cli_argv, free_port, start_http_server  # noqa: E402
from tests.support.router import start_router  # noqa: E402

FRONTS = ("direct", "vllm-router", "gateway")
FLOOR = "python floor"
BARE_FLOOR = "bare floor"  # benchmarks/floor_bare.py: no ASGI server at all
FLOORS = (FLOOR, BARE_FLOOR)
AGAINST = "gateway at "  # a front serving another source tree's gateway (``--against``)


class Connection:
    """One keep-alive HTTP/1.1 connection that POSTs JSON and reads a content-length answer."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        head = (
            f"POST {path} HTTP/1.1\r\nhost: {self.host}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n"
        ).encode()
        self.writer.write(head + body)
        status_line = await self.reader.readline()
        status = int(status_line.split(b" ", 2)[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        await self.reader.readexactly(length)
        return status

    async def close(self) -> None:
        """Close the socket; a peer that already reset it is not a second error (the request
        that met the reset was counted)."""
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()


@dataclass
class Samples:
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    cpu_seconds: float = 0.0
    requests: int = 0


async def run_round(port: int, clients: int, bodies: list[bytes], total: int) -> Samples:
    samples = Samples()
    queue = iter(range(total))

    async def client() -> None:
        conn = Connection("127.0.0.1", port)
        try:
            for i in queue:
                started = time.perf_counter()
                try:
                    status = await conn.post("/v1/chat/completions", bodies[i % len(bodies)])
                except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
                    status = 0
                    await conn.close()
                    conn = Connection("127.0.0.1", port)
                samples.latencies.append(time.perf_counter() - started)
                samples.errors += status != 200
        finally:
            await conn.close()

    await asyncio.gather(*(client() for _ in range(clients)))
    samples.requests = total
    return samples


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def measure_one(
    args: argparse.Namespace, fronts: dict[str, Proc], profile: str, clients: int
) -> dict[str, Any]:
    """Interleaved rounds of one profile and client count on every front."""
    bodies = build_bodies(profile, 64, seed=7)
    total = max(args.requests, clients * 4)
    for proc in fronts.values():  # warm-up: connections, imports, caches
        await run_round(proc.port, clients, bodies, clients * 4)
    acc = {name: Samples() for name in fronts}
    names = list(fronts)
    for rnd in range(args.rounds):
        shift = rnd % len(names)
        for name in names[shift:] + names[:shift]:
            proc = fronts[name]
            cpu_before = cpu_seconds(proc.popen.pid)
            got = await run_round(proc.port, clients, bodies, total)
            acc[name].cpu_seconds += cpu_seconds(proc.popen.pid) - cpu_before
            acc[name].latencies += got.latencies
            acc[name].errors += got.errors
            acc[name].requests += got.requests
    direct_p50 = pct(acc["direct"].latencies, 0.5)
    direct_p99 = pct(acc["direct"].latencies, 0.99)
    row: dict[str, Any] = {
        "profile": profile,
        "body_bytes": sorted(map(len, bodies))[len(bodies) // 2],
        "clients": clients,
        "fronts": {},
    }
    for name, samples in acc.items():
        p50, p99 = pct(samples.latencies, 0.5), pct(samples.latencies, 0.99)
        row["fronts"][name] = {
            "p50_ms": p50,
            "p99_ms": p99,
            "added_p50_ms": p50 - direct_p50,
            "added_p99_ms": p99 - direct_p99,
            # The direct path's CPU is the twin's: excluded (it is the same work on every path).
            "cpu_ms": None if name == "direct" else samples.cpu_seconds / samples.requests * 1000,
            "errors": samples.errors,
            "requests": samples.requests,
        }
    gateway, router = row["fronts"]["gateway"], row["fronts"]["vllm-router"]
    row["cpu_ratio"] = gateway["cpu_ms"] / router["cpu_ms"] if router["cpu_ms"] else None
    row["added_p50_excess_ms"] = gateway["added_p50_ms"] - router["added_p50_ms"]
    row["floor_cpu_ratios"] = {
        name: row["fronts"][name]["cpu_ms"] / router["cpu_ms"]
        for name in FLOORS
        if name in row["fronts"] and router["cpu_ms"]
    }
    row["vs_trees"] = {
        name: gateway["cpu_ms"] / front["cpu_ms"]
        for name, front in row["fronts"].items()
        if name.startswith(AGAINST) and front["cpu_ms"]
    }
    return row


async def measure(args: argparse.Namespace, fronts: dict[str, Proc]) -> list[dict[str, Any]]:
    return [
        await measure_one(args, fronts, profile, clients)
        for profile in args.profiles
        for clients in args.clients
    ]


def render(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| profile | clients | front | p50 ms | p99 ms | added p50 ms | added p99 ms "
        "| CPU ms/req | errors | requests |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        for name, f in r["fronts"].items():
            cpu = "—" if f["cpu_ms"] is None else f"{f['cpu_ms']:.3f}"
            lines.append(
                f"| {r['profile']} ({r['body_bytes']} B) | {r['clients']} | {name} "
                f"| {f['p50_ms']:.2f} | {f['p99_ms']:.2f} | {f['added_p50_ms']:+.2f} "
                f"| {f['added_p99_ms']:+.2f} | {cpu} | {f['errors']} | {f['requests']} |"
            )
    lines += [
        "",
        "| profile | clients | gateway CPU / vllm-router CPU "
        "| gateway added p50 − vllm-router added p50 ms |",
        "|---|---:|---:|---:|",
    ]
    floors = [name for name in FLOORS if any(name in r["floor_cpu_ratios"] for r in rows)]
    for name in floors:
        lines[-2] += f" {name} CPU / vllm-router CPU |"
        lines[-1] += "---:|"
    trees = list(rows[0]["vs_trees"]) if rows else []
    for tree in trees:
        lines[-2] += f" gateway CPU / {tree} CPU |"
        lines[-1] += "---:|"
    for r in rows:
        ratio = "—" if r["cpu_ratio"] is None else f"{r['cpu_ratio']:.2f}×"
        line = f"| {r['profile']} | {r['clients']} | {ratio} | {r['added_p50_excess_ms']:+.2f} |"
        for name in floors:
            ratio = r["floor_cpu_ratios"].get(name)
            line += " — |" if ratio is None else f" {ratio:.2f}× |"
        for tree in trees:
            line += f" {r['vs_trees'][tree]:.2f}× |" if tree in r["vs_trees"] else " — |"
        lines.append(line)
    return "\n".join(lines)


def start_fronts(
    workdir: Path, floor: bool = False, against: list[str] | None = None
) -> dict[str, Proc]:
    """The twin, vllm-router and a gateway in front of it, with ``floor`` the Python floor
    (``benchmarks/floor_relay.py``), and the gateway of each tree ``against``; the caller
    stops them."""
    twin_port = free_port()
    fronts: dict[str, Proc] = {}
    try:
        fronts["direct"] = start_http_server(
            cli_argv("twin", "--port", str(twin_port), "--latency", "zero", "--seed", "1"),
            port=twin_port,
            log_path=workdir / "twin.log",
        )
        engine = fronts["direct"].url
        fronts["vllm-router"] = start_router([engine], workdir / "router.log")
        gateway_port = free_port()
        fronts["gateway"] = start_http_server(
            cli_argv("serve", "--engine", f"{engine}/v1", "--port", str(gateway_port),
                     "--log-level", "warning"),
            port=gateway_port,
            log_path=workdir / "gateway.log",
        )  # fmt: skip
        if floor:
            floor_port = free_port()
            fronts[FLOOR] = start_http_server(
                [sys.executable, "-m", "uvicorn", "benchmarks.floor_relay:app", "--port",
                 str(floor_port), "--http", "httptools", "--loop", "uvloop", "--log-level",
                 "warning", "--no-access-log"],
                port=floor_port,
                log_path=workdir / "floor.log",
                env={"FLOOR_ENGINE": engine},
            )  # fmt: skip
            bare_port = free_port()
            fronts[BARE_FLOOR] = start_http_server(
                [sys.executable, "-m", "benchmarks.floor_bare", "--port", str(bare_port)],
                port=bare_port,
                log_path=workdir / "floor-bare.log",
                env={"FLOOR_ENGINE": engine},
            )
        for tree in against or ():
            port = free_port()
            fronts[f"{AGAINST}{Path(tree).resolve().name}"] = start_http_server(
                tree_cli_argv(str(Path(tree).resolve()), "serve", "--engine", f"{engine}/v1",
                              "--port", str(port), "--log-level", "warning"),
                port=port,
                log_path=workdir / f"gateway-{port}.log",
            )  # fmt: skip
    except BaseException:
        stop_fronts(fronts)
        raise
    return fronts


def stop_fronts(fronts: dict[str, Proc]) -> None:
    for proc in reversed(fronts.values()):
        proc.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--requests", type=int, default=300, help="requests per round and front")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--profiles", nargs="+", default=list(PROFILES), choices=list(PROFILES))
    parser.add_argument("--json", help="also write the rows as JSON to this path")
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also measure the Python floors: a bare uvicorn + aiohttp relay with no gateway "
        "logic (benchmarks/floor_relay.py), and a relay with no ASGI server at all on the "
        "gateway's engine transport (benchmarks/floor_bare.py)",
    )
    parser.add_argument(
        "--against",
        action="append",
        default=[],
        metavar="DIR",
        help="also run the gateway of the source tree in DIR, and compare CPU with it",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rgw-overhead-") as tmp:
        fronts = start_fronts(Path(tmp), floor=args.floor, against=args.against)
        try:
            rows = asyncio.run(measure(args, fronts))
        finally:
            stop_fronts(fronts)
    print(
        f"pass-through cost: gateway and vllm-router, each in front of one twin (zero latency), "
        f"{args.rounds} interleaved rounds of {args.requests} requests, {os.cpu_count()} CPUs"
    )
    print(render(rows))
    if args.json:
        Path(args.json).write_bytes(orjson.dumps(rows, option=orjson.OPT_INDENT_2))
    return 1 if failed(rows) else 0


def failed(rows: list[dict[str, Any]]) -> bool:
    """Whether a front under test lost a request: a gateway, vllm-router or the engine itself.

    The floors are instruments: the aiohttp floor has no retries and, at 64 clients, may meet a
    keep-alive socket the twin just closed. Their errors are in the table, not in the verdict.
    """
    return any(
        front["errors"]
        for row in rows
        for name, front in row["fronts"].items()
        if name not in FLOORS
    )


if __name__ == "__main__":
    sys.exit(main())
