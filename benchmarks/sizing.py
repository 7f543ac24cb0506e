"""Sizing past one host: gateways, routers and Redis for 10, 100 and 1,000 engines.

Each row is arithmetic on figures measured by the benchmarks next to this one, plus the few that
need a GPU and are therefore stated as assumptions (flags, printed with the table):

    measured (defaults: the figures docs/deploy.md quotes; --measure reruns the benchmarks)
      gateway CPU per rehearsed request ........ python -m benchmarks.router_cpu   (gateway column)
      engine calls per rehearsed request ....... python -m benchmarks.router_cpu   (twins' metrics)
      vllm-router CPU per engine call .......... python -m benchmarks.router_cpu
      Redis bytes per rehearsed turn and per session, commands per turn
                                                 python -m benchmarks.redis_memory
    assumed
      rehearsed turns per second per engine (an H100 serving the 8B model: 5-10, docs/deploy.md)
      the real model's texts are 3x the twin's (bytes per trace and memory entry)
      a gateway pod holds 70 % of one core (the HPA's target of its 1-CPU request); a router pod
      70 % of two; one Redis primary takes 50,000 commands/s and 25 GiB

Every turn is counted as rehearsed (pass-through costs a third of the CPU and no Redis), which
makes the table an upper bound for a given turn rate.

    python -m benchmarks.sizing [--measure] [--turns-per-engine-s 8] [--engines 10 100 1000]
"""

from __future__ import annotations

import argparse
import math
import re
import subprocess
import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Measured:
    """What the benchmarks measured (defaults: 2026-12-01, 2 shared cores, docs/deploy.md)."""

    gateway_ms: float = 5.05  # gateway CPU per rehearsed request, behind vllm-router
    calls_per_turn: float = 3.2  # engine calls per rehearsed request (K=4, early exit on)
    router_ms: float = 0.458  # vllm-router CPU per engine call it forwards
    trace_bytes: float = 6569  # MEMORY USAGE of one trace (24 h)
    memory_bytes: float = 840  # one session's memory list (6 h)
    turns_per_session: float = 3.5  # rehearsed turns per agent session (126 over 36)
    commands_per_turn: float = 16.2  # Redis commands per rehearsed turn (MULTI/EXEC included)


@dataclass(frozen=True)
class Assumed:
    turns_per_engine_s: float = 8.0
    model_factor: float = 3.0
    gateway_cores: float = 0.7
    router_cores: float = 1.4
    redis_ops: float = 50_000
    redis_gib: float = 25.0
    trace_ttl_s: float = 24 * 3600
    memory_ttl_s: float = 6 * 3600
    floor: int = 2  # replicas kept for availability, whatever the load


@dataclass(frozen=True)
class Row:
    engines: int
    turns_s: float
    gateway_cores: float
    gateways: int
    router_cores: float
    routers: int
    redis_ops_s: float
    redis_gib: float
    redis_gib_1h: float  # with RGW_TRACE_TTL_S=3600
    primaries: int  # with traces kept 1 h: what a deployment of this size should run


def size(engines: int, m: Measured, a: Assumed) -> Row:
    turns_s = engines * a.turns_per_engine_s
    gateway_cores = turns_s * m.gateway_ms / 1000
    router_cores = turns_s * m.calls_per_turn * m.router_ms / 1000
    ops = turns_s * m.commands_per_turn
    sessions_s = turns_s / m.turns_per_session

    def resident(trace_ttl_s: float) -> float:
        traces = turns_s * trace_ttl_s * m.trace_bytes
        memory = sessions_s * a.memory_ttl_s * m.memory_bytes
        return (traces + memory) * a.model_factor / 2**30

    gib, gib_1h = resident(a.trace_ttl_s), resident(3600)
    primaries = max(1, math.ceil(ops / a.redis_ops), math.ceil(gib_1h / a.redis_gib))
    return Row(
        engines=engines,
        turns_s=turns_s,
        gateway_cores=gateway_cores,
        gateways=max(a.floor, math.ceil(gateway_cores / a.gateway_cores)),
        router_cores=router_cores,
        routers=max(a.floor, math.ceil(router_cores / a.router_cores)),
        redis_ops_s=ops,
        redis_gib=gib,
        redis_gib_1h=gib_1h,
        primaries=primaries,
    )


# ---- --measure: rerun the benchmarks and read their printed figures


def _run(*argv: str) -> str:
    """Run one benchmark, show its output (it is the evidence), and return it."""
    print(f"$ python -m {' '.join(argv)}", flush=True)
    done = subprocess.run(
        [sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True, check=True
    )
    print(done.stdout, flush=True)
    return done.stdout


def read_router_cpu(out: str) -> dict[str, float]:
    """The rehearsed row of ``benchmarks.router_cpu``."""
    row = re.search(
        r"parallel K=4\s+router median ([\d.]+) ms per engine call, ([\d.]+) engine calls per "
        r"request; gateway median ([\d.]+) ms",
        out,
    )
    every = re.search(r"all rounds: median ([\d.]+) ms", out)
    if row is None or every is None:
        raise ValueError(f"not benchmarks.router_cpu output:\n{out}")
    return {
        "router_ms": float(every.group(1)),
        "calls_per_turn": float(row.group(2)),
        "gateway_ms": float(row.group(3)),
    }


def read_redis_memory(out: str) -> dict[str, float]:
    """Bytes per trace and memory key, turns per session, commands per turn."""
    head = re.search(r"(\d+) sessions, (\d+) rehearsed turns", out)
    rows = {m[0]: float(m[3]) for m in re.findall(r"^(\S+)\s+(\d+)\s+(\d+)\s+(\d+)$", out, re.M)}
    ops = re.search(r"commands per rehearsed turn[^:]*: ([\d.]+)", out)
    if head is None or ops is None or not {"trace", "memory"} <= rows.keys():
        raise ValueError(f"not benchmarks.redis_memory output:\n{out}")
    return {
        "trace_bytes": rows["trace"],
        "memory_bytes": rows["memory"],
        "turns_per_session": int(head.group(2)) / int(head.group(1)),
        "commands_per_turn": float(ops.group(1)),
    }


def measure() -> Measured:
    found = read_router_cpu(_run("benchmarks.router_cpu"))
    found |= read_redis_memory(_run("benchmarks.redis_memory"))
    return replace(Measured(), **found)


def table(rows: list[Row]) -> str:
    lines = [
        "| engines | rehearsed turns/s | gateway CPU (cores) | gateway pods | router CPU (cores) "
        "| router pods | Redis commands/s | Redis memory, traces 24 h | traces 1 h "
        "| Redis primaries (traces 1 h) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.engines:,} | {r.turns_s:,.0f} | {r.gateway_cores:.1f} | {r.gateways} "
            f"| {r.router_cores:.2f} | {r.routers} | {r.redis_ops_s:,.0f} "
            f"| {r.redis_gib:,.0f} GiB | {r.redis_gib_1h:,.1f} GiB | {r.primaries} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--measure", action="store_true", help="rerun the benchmarks first")
    parser.add_argument("--engines", type=int, nargs="+", default=[10, 100, 1000])
    for item in fields(Assumed):
        flag = "--" + item.name.replace("_", "-")
        parser.add_argument(flag, type=type(item.default), default=item.default)
    for item in fields(Measured):
        parser.add_argument("--" + item.name.replace("_", "-"), type=float, default=None)
    args = parser.parse_args()

    measured = measure() if args.measure else Measured()
    given = {f.name: getattr(args, f.name) for f in fields(Measured)}
    measured = replace(measured, **{k: v for k, v in given.items() if v is not None})
    assumed = Assumed(**{f.name: getattr(args, f.name) for f in fields(Assumed)})
    print("measured:", ", ".join(f"{f.name} {getattr(measured, f.name):.4g}"
                                 for f in fields(Measured)))  # fmt: skip
    print("assumed: ", ", ".join(f"{f.name} {getattr(assumed, f.name):.4g}"
                                 for f in fields(Assumed)))  # fmt: skip
    print()
    print(table([size(n, measured, assumed) for n in args.engines]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
