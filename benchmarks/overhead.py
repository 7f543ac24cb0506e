"""Pass-through overhead of the gateway, measured against the engine twin in the same run.

Starts the twin (``--latency zero``) and a gateway in front of it, then, for 1, 16 and 64
concurrent clients, alternates rounds sent straight to the twin and rounds sent through the
gateway (the order flips every round, so machine drift hits both alike). Requests are realistic
tool-calling chats (system prompt, tool list, a few turns with a tool result). The load generator
is a minimal keep-alive HTTP/1.1 client on asyncio streams, so its own CPU stays small.

Printed per concurrency: p50/p99 latency direct and through the gateway, the added latency, the
gateway process's CPU time per request (utime + stime from ``/proc/<pid>/stat``, so the twin's
and this script's CPU are excluded) and errors. Ratios, not absolute times, are the point.

    python -m benchmarks.overhead [--rounds 6] [--requests 400] [--markdown]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.procs import Proc, cli_argv, free_port, start_http_server  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
MODEL = "EnvACE-Qwen3-8B"


def _tool(name: str, description: str, props: dict[str, dict[str, object]]) -> dict[str, object]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props, "required": list(props)},
        },
    }


TOOLS = [
    _tool("get_order_details", "Look up an order by id.", {"order_id": {"type": "string"}}),
    _tool("get_user_details", "Look up a user by id.", {"user_id": {"type": "string"}}),
    _tool(
        "cancel_pending_order",
        "Cancel a pending order.",
        {
            "order_id": {"type": "string"},
            "reason": {"type": "string", "enum": ["no longer needed", "ordered by mistake"]},
        },
    ),
    _tool(
        "return_delivered_order_items",
        "Return items of a delivered order.",
        {
            "order_id": {"type": "string"},
            "item_ids": {"type": "array", "items": {"type": "string"}},
            "payment_method_id": {"type": "string"},
        },
    ),
    _tool("find_user_id_by_email", "Find a user id.", {"email": {"type": "string"}}),
]
SYSTEM = (
    "You are a retail customer-service agent. Authenticate the user first, check order status "
    "before any write, confirm every write with the user, and call one tool at a time."
)


def build_requests(count: int, seed: int) -> list[bytes]:
    """Varied tool-calling chat requests (1–3 turns, some carrying a tool result)."""
    rng = random.Random(seed)
    bodies = []
    for i in range(count):
        order = f"#W{1000 + rng.randrange(9000)}"
        messages: list[dict[str, object]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Hi, I am user {i}; please cancel order {order}."},
        ]
        if rng.random() < 0.5:
            call_id = f"chatcmpl-tool-{rng.getrandbits(128):032x}"
            arguments = orjson.dumps({"order_id": order}).decode()
            messages += [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": "get_order_details", "arguments": arguments},
                        }
                    ],
                },
                {
                    "role": "tool",
                    "tool_call_id": call_id,
                    "content": orjson.dumps({"order_id": order, "status": "pending"}).decode(),
                },
            ]
        body = {"model": MODEL, "messages": messages, "tools": TOOLS, "seed": i, "max_tokens": 256}
        bodies.append(orjson.dumps(body))
    return bodies


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
        if self.writer is not None:
            self.writer.close()
            await self.writer.wait_closed()


@dataclass
class Samples:
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    cpu_seconds: float = 0.0
    requests: int = 0


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of one process, from the kernel's accounting."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


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


async def measure(args: argparse.Namespace, twin: Proc, gateway: Proc) -> list[dict[str, float]]:
    bodies = build_requests(64, seed=7)
    rows = []
    for clients in args.clients:
        total = max(args.requests, clients * 4)
        await run_round(gateway.port, clients, bodies, clients * 4)  # warm-up, both paths
        await run_round(twin.port, clients, bodies, clients * 4)
        direct, through = Samples(), Samples()
        for rnd in range(args.rounds):
            order = [(twin, direct), (gateway, through)]
            for proc, acc in order if rnd % 2 == 0 else order[::-1]:
                cpu_before = process_cpu_seconds(gateway.popen.pid)
                got = await run_round(proc.port, clients, bodies, total)
                if proc is gateway:
                    acc.cpu_seconds += process_cpu_seconds(gateway.popen.pid) - cpu_before
                acc.latencies += got.latencies
                acc.errors += got.errors
                acc.requests += got.requests
        rows.append(
            {
                "clients": clients,
                "direct_p50": pct(direct.latencies, 0.5),
                "direct_p99": pct(direct.latencies, 0.99),
                "gateway_p50": pct(through.latencies, 0.5),
                "gateway_p99": pct(through.latencies, 0.99),
                "added_p50": pct(through.latencies, 0.5) - pct(direct.latencies, 0.5),
                "cpu_ms": through.cpu_seconds / through.requests * 1000,
                "errors_direct": direct.errors,
                "errors_gateway": through.errors,
                "requests": through.requests,
            }
        )
    return rows


def render(rows: list[dict[str, float]]) -> str:
    header = (
        "| clients | direct p50 ms | direct p99 ms | gateway p50 ms | gateway p99 ms "
        "| added p50 ms | gateway CPU ms/req | errors (direct/gateway) | requests |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    lines = [
        f"| {r['clients']} | {r['direct_p50']:.2f} | {r['direct_p99']:.2f} "
        f"| {r['gateway_p50']:.2f} | {r['gateway_p99']:.2f} | {r['added_p50']:+.2f} "
        f"| {r['cpu_ms']:.3f} "
        f"| {r['errors_direct']}/{r['errors_gateway']} | {r['requests']} |"
        for r in rows
    ]
    return header + "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--requests", type=int, default=400, help="requests per round")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--workdir", default=str(ROOT / ".cache" / "bench"))
    args = parser.parse_args()
    workdir = Path(args.workdir)
    twin_port, gateway_port = free_port(), free_port()
    twin = start_http_server(
        cli_argv("twin", "--port", str(twin_port), "--latency", "zero", "--seed", "1"),
        port=twin_port,
        log_path=workdir / "twin.log",
    )
    try:
        gateway = start_http_server(
            cli_argv(
                "serve",
                "--engine",
                f"{twin.url}/v1",
                "--port",
                str(gateway_port),
                "--log-level",
                "warning",
            ),
            port=gateway_port,
            log_path=workdir / "gateway.log",
        )
        try:
            rows = asyncio.run(measure(args, twin, gateway))
        finally:
            gateway.stop()
    finally:
        twin.stop()
    print(f"gateway pass-through overhead vs. the twin (zero latency), {os.cpu_count()} CPUs")
    print(render(rows))
    bad = [r for r in rows if r["errors_gateway"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
