"""A soak: keep-alive clients, mixed pass-through and rehearsed, against twin, gateway and Redis.

Starts a private ``redis-server`` (free port, nothing persisted), the engine twin and one gateway
in front of both, then runs ``--clients`` (64) agents for ``--seconds`` (600). Each agent holds a
keep-alive connection pool of its own (aiohttp, the client settings an operator's agent would
have) and loops over a conversation: a turn is pass-through or rehearsed (``--rehearsed``
fraction), streamed or not, and the turn after a committed tool call carries that call's result,
so the feedback path (``take_pending``, trust, grounding, memory) runs as in production.

Every request ends in exactly one of:

- **answered**: a 200 whose body (or stream, to ``data: [DONE]``) arrived whole;
- **error**: a clear error, i.e. a status >= 400 with the OpenAI envelope, or an SSE error event;
- **lost**: neither, i.e. the connection failed, closed or timed out (``--timeout``) without an
  answer.

``degraded`` counts answered rehearsals whose ``rehearsal.degraded`` is set (Redis is healthy all
along, so every one is a gateway fault). The gateway's RSS (``/proc/<pid>/status``) is sampled
every ``--sample-s`` (10) seconds and printed at start, middle and end, with min and max.

    python -m benchmarks.soak [--seconds 600] [--clients 64] [--rehearsed 0.5]

Cost: one core or so for the twin and gateway together, plus the client; ``--seconds`` of wall
time and ~5 s to start. Exit status 1 when anything was lost or degraded.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bodies import MODEL  # noqa: E402
from benchmarks.bodies import SMALL_SYSTEM as SYSTEM  # noqa: E402
from benchmarks.bodies import SMALL_TOOLS as TOOLS  # noqa: E402
from tests.support.procs import Proc, cli_argv, free_port, start_http_server  # noqa: E402
from tests.support.redis_servers import RedisProc, start_redis  # noqa: E402


@dataclass
class Tally:
    """What happened to every request sent, and the gateway's RSS over time."""

    sent: int = 0
    answered: int = 0
    errors: int = 0
    lost: int = 0
    degraded: int = 0
    rehearsed: int = 0
    streamed: int = 0
    feedback_sent: int = 0
    feedback_ours: int = 0  # tool results answering a call the gateway committed (``call_`` ids)
    statuses: Counter[int] = field(default_factory=Counter)
    lost_kinds: Counter[str] = field(default_factory=Counter)
    degraded_reasons: Counter[str] = field(default_factory=Counter)
    rss_mb: list[tuple[float, float]] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _body(messages: list[dict[str, Any]], rehearse: bool, stream: bool, seed: int) -> bytes:
    body: dict[str, Any] = {
        "model": MODEL, "messages": messages, "tools": TOOLS, "seed": seed, "max_tokens": 256,
        "stream": stream,
    }  # fmt: skip
    if rehearse:
        body["rehearsal"] = {"mode": "parallel", "budget": 4}
        body["temperature"] = 0.7
    return orjson.dumps(body)


def _read_sse(text: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None, bool]:
    """(the assistant turn's first tool call, the rehearsal summary, whether it ended in [DONE])."""
    call: dict[str, Any] | None = None
    summary: dict[str, Any] | None = None
    done = False
    for line in text.split("\n"):
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            done = True
            continue
        chunk = orjson.loads(data)
        if "error" in chunk:
            raise _SseError(chunk["error"].get("type", "error"))
        summary = chunk.get("rehearsal", summary)
        for choice in chunk.get("choices") or ():
            for delta_call in (choice.get("delta") or {}).get("tool_calls") or ():
                if call is None and delta_call.get("id"):
                    call = {"id": delta_call["id"], **(delta_call.get("function") or {})}
    return call, summary, done


class _SseError(Exception):
    """An SSE error event: a clear error, not a lost request."""


class Agent:
    """One client: a conversation that alternates turns and feeds committed calls' results back."""

    def __init__(self, index: int, url: str, args: argparse.Namespace, tally: Tally) -> None:
        self.url, self.args, self.tally = url, args, tally
        self.rng = random.Random(index)
        self.index = index
        self.messages = self._fresh()

    def _fresh(self) -> list[dict[str, Any]]:
        order = f"#W{1000 + self.rng.randrange(9000)}"
        text = f"Hi, I am user {self.index}; please cancel order {order}."
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]

    async def run(self, session: aiohttp.ClientSession, until: float) -> None:
        while time.monotonic() < until:
            rehearse = self.rng.random() < self.args.rehearsed
            stream = self.rng.random() < self.args.streamed
            await self.turn(session, rehearse, stream)
            await asyncio.sleep(self.rng.uniform(0, self.args.think_s))

    async def turn(self, session: aiohttp.ClientSession, rehearse: bool, stream: bool) -> None:
        tally = self.tally
        tally.sent += 1
        tally.rehearsed += rehearse
        tally.streamed += stream
        if self.messages[-1]["role"] == "tool":
            tally.feedback_sent += 1
            tally.feedback_ours += self.messages[-1]["tool_call_id"].startswith("call_")
        body = _body(self.messages, rehearse, stream, self.rng.randrange(1 << 30))
        started = time.perf_counter()
        try:
            async with session.post(
                self.url, data=body, headers={"content-type": "application/json"}
            ) as response:
                raw = await response.read()
                tally.statuses[response.status] += 1
                if response.status != 200:
                    error = orjson.loads(raw).get("error")  # the envelope, or this raises
                    tally.errors += error is not None
                    tally.lost += error is None
                    self.messages = self._fresh()
                    return
                if stream:
                    call, summary, done = _read_sse(raw.decode())
                    if not done:
                        raise aiohttp.ClientPayloadError("stream ended without [DONE]")
                else:
                    answer = orjson.loads(raw)
                    summary = answer.get("rehearsal")
                    calls = answer["choices"][0]["message"].get("tool_calls") or []
                    call = {"id": calls[0]["id"], **calls[0]["function"]} if calls else None
        except _SseError:
            tally.errors += 1
            self.messages = self._fresh()
            return
        except (TimeoutError, aiohttp.ClientError, ValueError, KeyError) as exc:
            tally.lost += 1
            tally.lost_kinds[type(exc).__name__] += 1
            self.messages = self._fresh()
            return
        tally.answered += 1
        tally.latencies.append(time.perf_counter() - started)
        if summary is not None and summary.get("degraded"):
            tally.degraded += 1
            tally.degraded_reasons[str(summary["degraded"])] += 1
        self._advance(call)

    def _advance(self, call: dict[str, Any] | None) -> None:
        """The next turn: this call's (made-up) result, or a new conversation."""
        if call is None or len(self.messages) > 12:
            self.messages = self._fresh()
            return
        failed = self.rng.random() < 0.2
        result = {"error": "order not found"} if failed else {"status": "pending", "ok": True}
        self.messages = [
            *self.messages,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call["id"],
                        "type": "function",
                        "function": {
                            "name": call.get("name", ""),
                            "arguments": call.get("arguments", "{}"),
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call["id"], "content": orjson.dumps(result).decode()},
        ]


async def sample_rss(pid: int, tally: Tally, every_s: float, until: float) -> None:
    started = time.monotonic()
    while True:
        tally.rss_mb.append((time.monotonic() - started, rss_mb(pid)))
        if time.monotonic() >= until:
            return
        await asyncio.sleep(min(every_s, max(0.0, until - time.monotonic())))


async def soak(args: argparse.Namespace, gateway: Proc) -> Tally:
    tally = Tally()
    url = f"{gateway.url}/v1/chat/completions"
    until = time.monotonic() + args.seconds
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    sessions = [
        aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=2, keepalive_timeout=args.client_keepalive_s),
            timeout=timeout,
        )
        for _ in range(args.clients)
    ]
    agents = [Agent(i, url, args, tally) for i in range(args.clients)]
    sampler = asyncio.create_task(sample_rss(gateway.popen.pid, tally, args.sample_s, until))
    try:
        await asyncio.gather(*(a.run(s, until) for a, s in zip(agents, sessions, strict=True)))
        await sampler
    finally:
        for session in sessions:
            await session.close()
    return tally


def metric_total(text: str, name: str) -> dict[str, float]:
    """Every series of one metric family in a Prometheus text page, by its label text."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            found[series[len(name) :] or "{}"] = float(value)
    return found


def report(tally: Tally, args: argparse.Namespace, metrics: str) -> str:
    samples = tally.rss_mb
    middle = samples[len(samples) // 2] if samples else (0.0, 0.0)
    ordered = sorted(tally.latencies)

    def pct(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else 0.0

    rss = [mb for _, mb in samples] or [0.0]
    lines = [
        f"soak: {args.clients} clients, {args.seconds:.0f} s, rehearsed {args.rehearsed:.0%}, "
        f"streamed {args.streamed:.0%}, {os.cpu_count()} CPUs",
        f"sent {tally.sent}  answered {tally.answered}  errors {tally.errors}  "
        f"lost {tally.lost}  degraded {tally.degraded}",
        f"rehearsed {tally.rehearsed}  streamed {tally.streamed}  "
        f"carrying a tool result {tally.feedback_sent}  "
        f"rate {tally.sent / max(args.seconds, 1e-9):.1f} req/s  "
        f"latency p50 {pct(0.5):.0f} ms  p99 {pct(0.99):.0f} ms",
        f"statuses {dict(sorted(tally.statuses.items()))}  lost kinds {dict(tally.lost_kinds)}  "
        f"degraded reasons {dict(tally.degraded_reasons)}",
        f"gateway RSS MB: start {samples[0][1]:.1f} (t={samples[0][0]:.0f}s)  "
        f"middle {middle[1]:.1f} (t={middle[0]:.0f}s)  end {samples[-1][1]:.1f} "
        f"(t={samples[-1][0]:.0f}s)  min {min(rss):.1f}  max {max(rss):.1f}  "
        f"samples {len(samples)}"
        if samples
        else "gateway RSS: no samples",
    ]
    matched = sum(metric_total(metrics, "rehearsal_gateway_real_tool_call_seconds_count").values())
    lines.append(
        f"feedback: {tally.feedback_ours} tool results answered a call the gateway committed, "
        f"{matched:.0f} matched their pending record"
    )
    for name in (
        "rehearsal_gateway_store_errors_total",
        "rehearsal_gateway_degraded_total",
        "rehearsal_gateway_store_writes_total",
        "rehearsal_gateway_rate_limited_total",
    ):
        series = {k: v for k, v in metric_total(metrics, name).items() if v}
        lines.append(f"{name}: {series or 0}")
    return "\n".join(lines)


def settled_metrics(url: str, patience_s: float = 30.0) -> tuple[str, float]:
    """The gateway's metrics once its background writes stop moving (and how long that took)."""
    started = time.monotonic()
    last = None
    while True:
        text = httpx.get(f"{url}/metrics", timeout=10).text
        written = metric_total(text, "rehearsal_gateway_store_writes_total")
        if written == last or time.monotonic() - started > patience_s:
            return text, time.monotonic() - started
        last = written
        time.sleep(0.5)


def start_stack(args: argparse.Namespace, workdir: Path) -> tuple[RedisProc, Proc, Proc]:
    redis_proc = start_redis(workdir / "redis", free_port())
    twin_port, gateway_port = free_port(), free_port()
    twin = start_http_server(
        cli_argv("twin", "--port", str(twin_port), "--latency", args.latency, "--seed", "1",
                 "--latency-scale", str(args.latency_scale), "--world", "retail"),
        port=twin_port,
        log_path=workdir / "twin.log",
    )  # fmt: skip
    env = {"RGW_REDIS_URL": f"redis://127.0.0.1:{redis_proc.port}/0"}
    gateway = start_http_server(
        cli_argv("serve", "--engine", f"{twin.url}/v1", "--port", str(gateway_port),
                 "--log-level", "warning"),
        port=gateway_port,
        log_path=workdir / "gateway.log",
        env=env,
    )  # fmt: skip
    return redis_proc, twin, gateway


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--rehearsed", type=float, default=0.5, help="fraction rehearsed")
    parser.add_argument("--streamed", type=float, default=0.3, help="fraction streamed")
    parser.add_argument("--think-s", type=float, default=0.05, help="max pause between turns")
    parser.add_argument("--timeout", type=float, default=120.0, help="per request, seconds")
    parser.add_argument("--client-keepalive-s", type=float, default=15.0)
    parser.add_argument("--sample-s", type=float, default=10.0, help="RSS sampling period")
    parser.add_argument("--latency", default="zero", help="the twin's latency profile")
    parser.add_argument("--latency-scale", type=float, default=0.2)
    parser.add_argument("--workdir", default=None)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rgw-soak-") as tmp:
        workdir = Path(args.workdir or tmp)
        redis_proc, twin, gateway = start_stack(args, workdir)
        try:
            tally = asyncio.run(soak(args, gateway))
            metrics, settled_s = settled_metrics(gateway.url)
            print(f"background writes settled {settled_s:.1f} s after the last answer")
        finally:
            gateway.stop()
            twin.stop()
            redis_proc.stop()
    print(report(tally, args, metrics))
    return 1 if tally.lost or tally.degraded else 0


if __name__ == "__main__":
    sys.exit(main())
