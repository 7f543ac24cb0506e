"""vllm-router's CPU per forwarded call, next to the gateway's, for placing routers at scale.

Starts two engine twins with ``--latency zero`` (the engines cost no wall time), the pinned
``vllm-router`` in front of them with the deploy files' flags, and a gateway in front of the
router (``--engine ROUTER,router=vllm-router``), plus, as the baseline of the same run, a second
gateway straight in front of one twin. It sends the world's requests (system prompt, task,
tools), pass-through and rehearsed (parallel, K = 4, depth 1, ``reflect``), in interleaved rounds,
and reads the processes' CPU time (``/proc/PID/task/*/schedstat``) around each round: the
router's CPU per engine call it forwarded (counted by the twins' own metrics), and each
gateway's per request.

    python -m benchmarks.router_cpu [--requests 200] [--rounds 2] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.gateway_cpu import MODES, add_load_arguments, cpu_seconds, send  # noqa: E402
from rehearsal_gateway.twin.worlds import load_world  # noqa: E402
from tests.support.procs import Proc, cli_argv, free_port, start_http_server  # noqa: E402
from tests.support.router import start_router  # noqa: E402


def finished(twins: list[Proc]) -> float:
    """Chat requests the twins have answered, from their own ``vllm:*`` metrics."""
    total = 0.0
    for twin in twins:
        for line in httpx.get(twin.url + "/metrics", timeout=5).text.splitlines():
            if line.startswith("vllm:e2e_request_latency_seconds_count"):
                total += float(line.rsplit(" ", 1)[1])
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_load_arguments(parser)
    args = parser.parse_args()

    world = load_world(args.world)
    router_ms: dict[str, list[float]] = {name: [] for name in MODES}
    gateway_ms: dict[str, list[float]] = {name: [] for name in MODES}
    direct_ms: dict[str, list[float]] = {name: [] for name in MODES}
    calls: dict[str, list[float]] = {name: [] for name in MODES}
    with tempfile.TemporaryDirectory(prefix="rgw-router-cpu-") as tmp:
        twins = []
        for seed in (1, 2):
            port = free_port()
            twins.append(start_http_server(
                cli_argv("twin", "--port", str(port), "--latency", "zero", "--seed", str(seed)),
                port=port, log_path=Path(tmp) / f"twin-{seed}.log",
            ))  # fmt: skip
        router = start_router([t.url for t in twins], Path(tmp) / "router.log")
        gateway_port = free_port()
        gateway = start_http_server(
            cli_argv("serve", "--port", str(gateway_port),
                     "--engine", f"{router.url}/v1,router=vllm-router"),
            port=gateway_port, log_path=Path(tmp) / "gateway.log",
        )  # fmt: skip
        direct_port = free_port()
        direct = start_http_server(
            cli_argv("serve", "--port", str(direct_port), "--engine", twins[0].url + "/v1"),
            port=direct_port, log_path=Path(tmp) / "gateway-direct.log",
        )  # fmt: skip
        try:
            for knobs in MODES.values():  # warm-up: imports, connections, caches
                asyncio.run(send(gateway.url, world, knobs, 20, args.concurrency))
                asyncio.run(send(direct.url, world, knobs, 20, args.concurrency))
            for _ in range(args.rounds):
                for name, knobs in MODES.items():
                    engine_calls = finished(twins)
                    r0, g0 = cpu_seconds(router.popen.pid), cpu_seconds(gateway.popen.pid)
                    asyncio.run(send(gateway.url, world, knobs, args.requests, args.concurrency))
                    r1, g1 = cpu_seconds(router.popen.pid), cpu_seconds(gateway.popen.pid)
                    forwarded = finished(twins) - engine_calls
                    router_ms[name].append((r1 - r0) / forwarded * 1000)
                    gateway_ms[name].append((g1 - g0) / args.requests * 1000)
                    calls[name].append(forwarded / args.requests)
                    d0 = cpu_seconds(direct.popen.pid)
                    asyncio.run(send(direct.url, world, knobs, args.requests, args.concurrency))
                    direct_ms[name].append(
                        (cpu_seconds(direct.popen.pid) - d0) / args.requests * 1000
                    )
        finally:
            direct.stop()
            gateway.stop()
            router.stop()
            for twin in twins:
                twin.stop()

    shape = f"{args.requests} requests x {args.rounds} rounds, concurrency {args.concurrency}"
    print(f"gateway -> vllm-router -> 2 twins ({args.world} world with tools, {shape}, "
          "twin latency zero)")  # fmt: skip
    for name in MODES:
        print(f"  {name:<14} router median {statistics.median(router_ms[name]):.3f} ms per "
              f"engine call, {statistics.median(calls[name]):.1f} engine calls per request; "
              f"gateway median {statistics.median(gateway_ms[name]):.2f} ms per request "
              f"(direct to a twin: {statistics.median(direct_ms[name]):.2f} ms)")  # fmt: skip
    every = [v for values in router_ms.values() for v in values]
    print(f"  router CPU per engine call, all rounds: median {statistics.median(every):.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
