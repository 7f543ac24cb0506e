"""Imagination on engines of its own, on real vLLM: plain latency under rehearsal load, shared
against split.

Starts two real vLLM engines (CPU build, the tiny random Qwen3 of ``make vllm-env``), each pinned
to one core (``taskset -c`` and vLLM's own ``VLLM_CPU_OMP_THREADS_BIND``), with
``--max-num-seqs`` small enough that rehearsal traffic queues, and two gateways in front of both:

- **shared**: both engines in the main set; each serves both roles, rehearsal held to
  ``--share`` of its ``--max-num-seqs`` slots (``RGW_REHEARSAL_ENGINE_SHARE``);
- **split**: engine 0 the main set, engine 1 the rehearsal set (``--rehearsal-engine``).

Each round measures plain pass-through requests (``max_tokens`` 16) sent one at a time,
``--gap-ms`` apart so that they span about one rehearsal's wall time: alone through each gateway,
then while ``--load`` clients keep parallel K=4 rehearsals in flight through the same gateway
(``benchmarks/rehearsal_vllm.py``'s requests, under ``--commit``: the gateway's default rule,
``anchored``, or ``reflect``, which adds K candidates and a commit call on the main set). It
prints, per gateway, plain p50 and p99 as a multiple of that gateway's own alone figure, and the
load's rehearsals: how many ran, their median wall time, how many degraded.

    python -m benchmarks.split_vllm [--rounds 2] [--plain 24] [--load 4] [--cores 0,1]
                                    [--gateway-cores CPUS] [--commit anchored|reflect]
                                    [--gap-ms 500] [--deadline-ms 60000]

The two engines need a core each and the gateways, clients and the machine's other work share
whatever is left, so run it on an otherwise quiet host with at least three cores; on a busy one
read the ratios within the run, not the milliseconds. The gateways and this process's clients
are pinned to ``--gateway-cores`` (a comma-separated CPU list); by default the CPUs the engines
leave, or on a two-core host the second engine's, so the main engine has its core to itself in
both setups. Where they share an engine's core, the engines run at ``--engine-nice`` 10 (else 0)
so that the gateways take the CPU first when they need it, as on a core of their own.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.rehearsal_vllm import plain_latencies, under_load  # noqa: E402
from tests.support.procs import Proc, cli_argv, free_port, start_http_server  # noqa: E402
from tests.support.vllm import (  # noqa: E402
    START_TIMEOUT_S,
    VLLM_ENV,
    check_vllm_env,
    vllm_argv,
)

SETUPS = ("shared", "split")


def start_engine(core: str, workdir: Path, args: argparse.Namespace) -> Proc:
    """One vLLM on ``core`` alone."""
    check_vllm_env()
    port = free_port()
    flags = ["--max-num-seqs", str(args.max_num_seqs), "--max-model-len", str(args.max_model_len)]
    return start_http_server(
        ["nice", "-n", str(args.engine_nice), *pinned(vllm_argv(port, *flags), core)],
        port=port,
        log_path=workdir / f"vllm-core{core}.log",
        env={**VLLM_ENV, "VLLM_CPU_OMP_THREADS_BIND": core},
        timeout=START_TIMEOUT_S,
    )


def gateway_cpus(engine_cores: list[str]) -> str:
    """The CPUs the engines leave, or the last engine's when they leave none."""
    left = sorted(os.sched_getaffinity(0) - {int(core) for core in engine_cores})
    return ",".join(str(cpu) for cpu in left) if left else engine_cores[-1]


def pinned(argv: list[str], cpus: str) -> list[str]:
    """``argv`` run on ``cpus`` (a ``taskset`` CPU list)."""
    return ["taskset", "-c", cpus, *argv]


def start_gateway(setup: str, engines: list[Proc], workdir: Path, args: argparse.Namespace) -> Proc:
    main, other = (engine.url + "/v1" for engine in engines)
    flags = ["--engine", main, "--engine" if setup == "shared" else "--rehearsal-engine", other]
    port = free_port()
    env = {
        "RGW_REHEARSAL_ENGINE_SHARE": str(args.share),
        "RGW_ENGINE_MAX_CONCURRENCY": str(args.max_num_seqs),
        "RGW_REHEARSAL_DEADLINE_MS": str(args.deadline_ms),
    }
    return start_http_server(
        pinned(cli_argv("serve", "--port", str(port), *flags, "--log-level", "warning"),
               args.gateway_cores),
        port=port, log_path=workdir / f"gateway-{setup}.log", env=env,
    )  # fmt: skip


def quantile(values: list[float], q: int) -> float:
    """The ``q``-th percentile (the largest value when there are too few for it)."""
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]


async def measure(gateways: dict[str, Proc], engine: Proc, args: argparse.Namespace) -> Any:
    alone: dict[str, list[float]] = {setup: [] for setup in SETUPS}
    loaded: dict[str, list[float]] = {setup: [] for setup in SETUPS}
    load: dict[str, list[Any]] = {setup: [] for setup in SETUPS}
    gap_s = args.gap_ms / 1000
    for round_ in range(args.rounds):
        seed = 7000 + 100 * round_
        order = SETUPS if round_ % 2 == 0 else SETUPS[::-1]
        for setup in order:
            url = gateways[setup].url
            alone[setup] += (await plain_latencies(url, args.plain, seed, engine, gap_s))[0]
        for setup in order:
            times, _, rehearsals = await under_load(
                gateways[setup].url, args.plain, args.load, seed, engine, args.commit, gap_s
            )
            loaded[setup] += times
            load[setup] += rehearsals
    figures = {}
    for setup in SETUPS:
        base_p50, base_p99 = statistics.median(alone[setup]), quantile(alone[setup], 99)
        p50, p99 = statistics.median(loaded[setup]), quantile(loaded[setup], 99)
        walls = [wall for wall, _ in load[setup]]
        figures[setup] = {
            "alone_p50_ms": base_p50 * 1000, "alone_p99_ms": base_p99 * 1000,
            "loaded_p50_ms": p50 * 1000, "loaded_p99_ms": p99 * 1000,
            "p50_vs_alone": p50 / base_p50, "p99_vs_alone": p99 / base_p99,
            "plain": len(loaded[setup]), "rehearsals": len(walls),
            "rehearsal_p50_s": statistics.median(walls) if walls else 0.0,
            "degraded": sum(degraded for _, degraded in load[setup]),
        }  # fmt: skip
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--plain", type=int, default=24, help="plain requests per phase and round")
    parser.add_argument("--load", type=int, default=4, help="concurrent rehearsal clients")
    parser.add_argument("--max-num-seqs", type=int, default=8)
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--share", type=float, default=0.5)
    # A one-core engine takes longer than the gateway's default 20 s for a K=4 rehearsal under
    # load; a rehearsal cut by its deadline is load that stopped early.
    parser.add_argument("--deadline-ms", type=int, default=60_000)
    parser.add_argument("--cores", default="0,1", help="the two engines' cores")
    parser.add_argument(
        "--gateway-cores",
        help="the gateways' and clients' CPUs (default: those the engines leave, else the last "
        "engine's)",
    )
    parser.add_argument(
        "--engine-nice",
        type=int,
        help="the engines' niceness (default: 10 if the gateways share an engine's core, else 0)",
    )
    parser.add_argument("--commit", choices=("anchored", "reflect"), default="anchored")
    # Spread over about one rehearsal's wall time, the plain requests meet its acting call and
    # its imaginations alike, not just whichever phase follows the load's start.
    parser.add_argument("--gap-ms", type=int, default=500, help="between plain requests")
    parser.add_argument("--json", help="also write the figures as JSON to this path")
    args = parser.parse_args(argv)
    cores = args.cores.split(",")
    args.gateway_cores = args.gateway_cores or gateway_cpus(cores)
    shared_core = set(args.gateway_cores.split(",")) & set(cores)
    args.engine_nice = (10 if shared_core else 0) if args.engine_nice is None else args.engine_nice
    os.sched_setaffinity(0, {int(cpu) for cpu in args.gateway_cores.split(",")})
    with tempfile.TemporaryDirectory(prefix="rgw-split-vllm-") as tmp:
        workdir = Path(tmp)
        engines: list[Proc] = []
        gateways: dict[str, Proc] = {}
        try:
            for core in cores:
                engines.append(start_engine(core, workdir, args))
            for setup in SETUPS:
                gateways[setup] = start_gateway(setup, engines, workdir, args)
            figures = asyncio.run(measure(gateways, engines[0], args))
        finally:
            for proc in [*gateways.values(), *engines]:
                proc.stop()
    print(f"real vLLM x2 (CPU build, tiny random Qwen3, one core each: {args.cores}; "
          f"--max-num-seqs {args.max_num_seqs}; rehearsal share {args.share:g}; "
          f"deadline {args.deadline_ms} ms; plain requests {args.gap_ms} ms apart; "
          f"engines at nice {args.engine_nice}; gateways and clients on "
          f"{args.gateway_cores}); {args.load} clients of parallel K=4 "
          f"rehearsals ({args.commit}); {args.rounds} rounds")  # fmt: skip
    print("\n| engines | plain alone p50 / p99 ms | under load p50 / p99 ms | p50 × alone "
          "| p99 × alone | load: rehearsals, p50 wall s, degraded |\n"
          "|---|---:|---:|---:|---:|---:|")  # fmt: skip
    for setup, row in figures.items():
        print(f"| {setup} | {row['alone_p50_ms']:.0f} / {row['alone_p99_ms']:.0f} "
              f"| {row['loaded_p50_ms']:.0f} / {row['loaded_p99_ms']:.0f} "
              f"| {row['p50_vs_alone']:.2f} | {row['p99_vs_alone']:.2f} "
              f"| {row['rehearsals']}, {row['rehearsal_p50_s']:.1f}, "
              f"{row['degraded']} |")  # fmt: skip
    if args.json:
        Path(args.json).write_bytes(orjson.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
