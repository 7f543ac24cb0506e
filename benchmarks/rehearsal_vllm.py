"""Rehearsal on the real engine: vLLM (CPU build, tiny local Qwen3), its own counters, priorities.

Starts one real vLLM (``tests/support/vllm.py``: the tiny random Qwen3 of ``make vllm-env``) with
``--scheduling-policy priority`` and ``--max-num-seqs`` small enough that rehearsal traffic
queues, and two gateways in front of it: one with ``RGW_ENGINE_SCHEDULING=priority`` (rehearsal
calls carry vLLM ``priority`` 10), one with the default ``fcfs`` (no call carries a priority, so
the engine serves in arrival order). Then:

1. **Overlap** — parallel rehearsal wall time at K = 4 versus K = 1 (depth 1, ``reflect``, no
   early exit), rounds interleaved. The random model's tool calls are forced to the weather tool
   with a city chosen by the model (``structured_outputs`` regex, the trick of
   ``tests/contract/wire.py``), so K candidates are up to K distinct actions, each imagined.
2. **Prefix cache** — vLLM's own ``vllm:prefix_cache_hits`` / ``vllm:prefix_cache_queries``
   read from its ``/metrics`` before and after the overlap rounds (every prompt token the engine
   saw, all roles), and the gateway's per-role figure for the rehearsal role (vLLM's
   ``usage.prompt_tokens_details.cached_tokens`` summed over imagination calls).
3. **Priorities and the reservation** — p50 latency of plain pass-through requests sent one at a
   time: alone, then under concurrent K = 4 rehearsal traffic through each gateway in turn,
   phases interleaved: ``fcfs`` and ``priority`` with every engine slot open to rehearsal
   (``RGW_REHEARSAL_ENGINE_SHARE=1``), then ``yield`` (``fcfs`` with ``RGW_REHEARSAL_YIELD=1``:
   real work cancels the imaginations on its engine, which start again once it is done), and
   all three again for each ``--share`` that rehearsal-role calls are held to
   (``RGW_ENGINE_MAX_CONCURRENCY`` set to ``--max-num-seqs``, so the share is a share of vLLM's
   batch). Beside each: how many requests vLLM was running as each plain request was sent
   (``vllm:num_requests_running``, the median; with yielding, mostly the load's own acting
   calls, real work that nothing preempts), what it cost the load's own rehearsals (how many
   ran, their median wall time, how many degraded), how many requests vLLM preempted meanwhile
   (``vllm:num_preemptions``) and how many imaginations the gateway cancelled for real work
   (``rehearsal_gateway_rehearsal_preemptions_total``).

    python -m benchmarks.rehearsal_vllm [--rounds 3] [--plain 16] [--load 4]
                                        [--share 0.5 [--share 0.25 …]] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.contract.wire import THINKING_OFF, USER_ASKS, WEATHER_TOOL  # noqa: E402
from tests.support.procs import Proc, cli_argv, free_port, start_http_server  # noqa: E402
from tests.support.vllm import SERVED_MODEL_NAME, start_vllm  # noqa: E402

CITIES = ("Paris", "Rome", "Oslo", "Lima", "Cairo", "Quito", "Hanoi", "Dakar", "Perth", "Porto",
          "Seoul", "Sofia", "Tunis", "Turin", "Vaduz", "Zagreb")  # fmt: skip
FORCED_CALL = {
    "regex": '<tool_call>\\n\\{"name": "get_weather", "arguments": \\{"city": "('
    + "|".join(CITIES)
    + ')"\\}\\}\\n</tool_call>'
}
SYSTEM = (
    "You are a travel assistant. Look up the weather with the get_weather tool before you "
    "answer, one call at a time, and say which city you looked up."
)


def rehearsal_body(k: int, seed: int, commit: str = "reflect") -> dict[str, Any]:
    """A tool-using turn to rehearse at budget ``k`` (parallel, depth 1, no early exit); the
    ``reflect`` rule by default, the one that asks the most of the main engine."""
    return {
        "model": SERVED_MODEL_NAME,
        "messages": [{"role": "system", "content": SYSTEM}, *USER_ASKS],
        "tools": [WEATHER_TOOL],
        "seed": seed,
        "max_tokens": 48,
        "temperature": 1.0,
        **THINKING_OFF,
        "structured_outputs": FORCED_CALL,
        "rehearsal": {"mode": "parallel", "budget": k, "depth": 1, "commit": commit,
                      "early_exit": False},
    }  # fmt: skip


def plain_body(seed: int) -> dict[str, Any]:
    """A short pass-through request: what real work looks like next to rehearsal."""
    return {"model": SERVED_MODEL_NAME, "messages": [{"role": "user", "content": f"Hi #{seed}"}],
            "max_tokens": 16, "seed": seed, **THINKING_OFF}  # fmt: skip


def prefix_counters(engine: Proc) -> tuple[float, float]:
    """(hits, queries) of vLLM's prefix cache so far, from its own ``/metrics``."""
    hits = queries = 0.0
    for line in httpx.get(engine.url + "/metrics", timeout=10).text.splitlines():
        name, _, value = line.partition(" ")
        base = name.split("{", 1)[0]
        if base in ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits"):
            hits += float(value.rsplit(" ", 1)[-1])
        elif base in ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries"):
            queries += float(value.rsplit(" ", 1)[-1])
    return hits, queries


async def post(client: httpx.AsyncClient, body: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    response = await client.post("/v1/chat/completions", json=body)
    elapsed = time.perf_counter() - started
    if response.status_code != 200:
        raise RuntimeError(f"HTTP {response.status_code}: {response.text[:300]}")
    answer: dict[str, Any] = orjson.loads(response.content)
    return elapsed, answer


async def overlap(gateway: Proc, engine: Proc, rounds: int) -> dict[str, Any]:
    """K=1 vs K=4 wall time, interleaved; vLLM's prefix-cache share around the rounds."""
    times: dict[int, list[float]] = {1: [], 4: []}
    imagined: dict[int, list[int]] = {1: [], 4: []}
    cached = prompt = degraded = 0
    async with httpx.AsyncClient(base_url=gateway.url, timeout=300) as client:
        await post(client, rehearsal_body(4, 0))  # warm-up: grammar compile, first prefill
        hits0, queries0 = prefix_counters(engine)
        for round_ in range(rounds):
            for k in (1, 4) if round_ % 2 == 0 else (4, 1):
                elapsed, answer = await post(client, rehearsal_body(k, 100 + round_))
                times[k].append(elapsed)
                summary = answer["rehearsal"]
                imagined[k].append(summary["distinct_actions"])
                degraded += bool(summary["degraded"])
                rehearse = summary["tokens"].get("rehearse", {})
                cached += rehearse.get("cached", 0)
                prompt += rehearse.get("prompt", 0)
        hits1, queries1 = prefix_counters(engine)
    k1, k4 = statistics.median(times[1]), statistics.median(times[4])
    return {
        "k1_s": k1,
        "k4_s": k4,
        "ratio": k4 / k1,
        "imagined_k1": statistics.median(imagined[1]),
        "imagined_k4": statistics.median(imagined[4]),
        "vllm_prefix_share": (hits1 - hits0) / max(queries1 - queries0, 1),
        "vllm_prefix_queries": queries1 - queries0,
        "rehearse_cached_share": cached / max(prompt, 1),
        "degraded": degraded,
    }


async def plain_latencies(
    url: str, count: int, seed: int, engine: Proc, gap_s: float = 0.0
) -> tuple[list[float], list[float]]:
    """Each plain request's latency, and how many requests vLLM was running when it was sent
    (``vllm:num_requests_running``, read just before): with imagination yielding, what a plain
    request still shares the engine with is the load's own acting calls, real work that is
    never preempted. ``gap_s`` between requests spreads them over a window as long as the
    load's rehearsals, so they meet every phase of one."""
    times: list[float] = []
    beside: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=300) as client:
        for i in range(count):
            if i and gap_s:
                await asyncio.sleep(gap_s)
            beside.append(await running(client, engine))
            times.append((await post(client, plain_body(seed + i)))[0])
    return times, beside


async def running(client: httpx.AsyncClient, engine: Proc) -> float:
    """vLLM's ``vllm:num_requests_running`` now (the requests in its running batch)."""
    text = (await client.get(engine.url + "/metrics")).text
    return sum(
        float(line.rsplit(" ", 1)[-1])
        for line in text.splitlines()
        if line.split("{", 1)[0].split(" ", 1)[0] == "vllm:num_requests_running"
    )


def preemptions(engine: Proc) -> float:
    """vLLM's ``vllm:num_preemptions`` so far (requests pushed out of its running batch)."""
    total = 0.0
    for line in httpx.get(engine.url + "/metrics", timeout=10).text.splitlines():
        if line.split("{", 1)[0].split(" ", 1)[0] in ("vllm:num_preemptions_total",
                                                      "vllm:num_preemptions"):  # fmt: skip
            total += float(line.rsplit(" ", 1)[-1])
    return total


def gateway_preemptions(gateway: Proc) -> float:
    """Imaginations the gateway cancelled for real work so far (``RGW_REHEARSAL_YIELD``)."""
    total = 0.0
    for line in httpx.get(gateway.url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("rehearsal_gateway_rehearsal_preemptions_total{"):
            total += float(line.rsplit(" ", 1)[-1])
    return total


async def under_load(
    url: str,
    plain: int,
    load: int,
    seed: int,
    engine: Proc,
    commit: str = "reflect",
    gap_s: float = 0.0,
) -> tuple[list[float], list[float], list[Any]]:
    """Plain requests one at a time while ``load`` clients keep K=4 rehearsals in flight.

    Returns the plain latencies, what vLLM was running as each was sent, and, per rehearsal of
    the load (those in flight when the plain requests are done finish too), its wall time and
    whether it degraded.
    """
    stop = asyncio.Event()
    rehearsals: list[Any] = []

    async def rehearse_forever(worker: int) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=300) as client:
            i = 0
            while not stop.is_set():
                body = rehearsal_body(4, seed + 1000 * worker + i, commit)
                elapsed, answer = await post(client, body)
                rehearsals.append((elapsed, bool(answer["rehearsal"]["degraded"])))
                i += 1

    workers = [asyncio.create_task(rehearse_forever(w)) for w in range(load)]
    await asyncio.sleep(1.0)  # let the rehearsal traffic fill the engine's queue
    try:
        times, beside = await plain_latencies(url, plain, seed, engine, gap_s)
    finally:
        stop.set()
        await asyncio.gather(*workers)
    return times, beside, rehearsals


def loaded_phases(shares: list[float]) -> list[str]:
    """The gateways the load runs through: every slot open to rehearsal, then each share."""
    names = ["fcfs", "priority", "yield"]
    for share in shares:
        names += [f"fcfs@{share:g}", f"priority@{share:g}", f"yield@{share:g}"]
    return names


async def priorities(gateways: dict[str, Proc], engine: Proc, args: argparse.Namespace) -> Any:
    loaded = loaded_phases(args.share)
    samples: dict[str, list[float]] = {"alone": [], **{name: [] for name in loaded}}
    beside: dict[str, list[float]] = {name: [] for name in samples}
    load: dict[str, list[Any]] = {name: [] for name in samples}
    pushed: dict[str, float] = dict.fromkeys(samples, 0.0)
    yielded: dict[str, float] = dict.fromkeys(samples, 0.0)
    for round_ in range(args.priority_rounds):
        seed = 5000 + 100 * round_
        times, running_then = await plain_latencies(
            gateways["priority"].url, args.plain, seed, engine
        )
        samples["alone"] += times
        beside["alone"] += running_then
        shift = round_ % len(loaded)  # each round starts the rotation one phase later
        for name in loaded[shift:] + loaded[:shift]:
            before = preemptions(engine), gateway_preemptions(gateways[name])
            times, running_then, rehearsals = await under_load(
                gateways[name].url, args.plain, args.load, seed, engine
            )
            beside[name] += running_then
            pushed[name] += preemptions(engine) - before[0]
            yielded[name] += gateway_preemptions(gateways[name]) - before[1]
            samples[name] += times
            load[name] += rehearsals
    alone = statistics.median(samples["alone"])
    return {
        name: {
            "p50_ms": statistics.median(values) * 1000,
            "p90_ms": (statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0])
            * 1000,
            "vs_alone": statistics.median(values) / alone,
            "n": len(values),
            "running_at_send": statistics.median(beside[name]),
            "load_rehearsals": len(load[name]),
            "load_p50_s": statistics.median([t for t, _ in load[name]]) if load[name] else 0.0,
            "load_degraded": sum(degraded for _, degraded in load[name]),
            "vllm_preemptions": pushed[name],
            "gateway_preemptions": yielded[name],
        }
        for name, values in samples.items()
    }


def start_gateway(
    engine: Proc, name: str, workdir: Path, *, scheduling: str, env: dict[str, str]
) -> Proc:
    port = free_port()
    return start_http_server(
        cli_argv("serve", "--port", str(port), "--engine", engine.url + "/v1",
                 "--engine-scheduling", scheduling, "--log-level", "warning"),
        port=port, log_path=workdir / f"gateway-{name.replace('@', '-')}.log", env=env,
    )  # fmt: skip


def gateway_configs(args: argparse.Namespace) -> dict[str, tuple[str, dict[str, str]]]:
    """Each gateway's scheduling and settings: ``fcfs``/``priority``/``yield``, then ``…@share``.

    ``yield``: fcfs, imaginations preempted by real work (``RGW_REHEARSAL_YIELD``).
    """
    every = {"RGW_REHEARSAL_ENGINE_SHARE": "1"}
    configs = {name: (name, every) for name in ("priority", "fcfs")}
    configs["yield"] = ("fcfs", {**every, "RGW_REHEARSAL_YIELD": "1"})
    for share in args.share:
        held = {"RGW_REHEARSAL_ENGINE_SHARE": str(share),
                "RGW_ENGINE_MAX_CONCURRENCY": str(args.max_num_seqs)}  # fmt: skip
        for scheduling in ("fcfs", "priority"):
            configs[f"{scheduling}@{share:g}"] = (scheduling, held)
        configs[f"yield@{share:g}"] = ("fcfs", {**held, "RGW_REHEARSAL_YIELD": "1"})
    return configs


def phase_label(name: str, max_num_seqs: int) -> str:
    if name == "alone":
        return "alone"
    scheduling, _, share = name.partition("@")
    label = {
        "fcfs": "no priorities",
        "priority": "rehearsal at priority 10",
        "yield": "imagination yields to real work",
    }[scheduling]
    if not share:
        return f"under rehearsal load, {label}"
    held = int(max_num_seqs * float(share) + 1e-9)
    return f"same load, rehearsal held to {held} of {max_num_seqs} slots, {label}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="K=1 and K=4 rounds each")
    parser.add_argument("--plain", type=int, default=16, help="plain requests per phase and round")
    parser.add_argument("--load", type=int, default=4, help="concurrent rehearsal clients")
    parser.add_argument("--priority-rounds", type=int, default=2)
    parser.add_argument("--max-num-seqs", type=int, default=8)
    parser.add_argument(
        "--share", type=float, action="append",
        help="rehearsal's share of the engine's slots, one loaded phase pair each (default 0.5)",
    )  # fmt: skip
    # The rehearsal role asks for up to 2048 tokens, cut at the context's end. A context much
    # shorter than 2048 no longer holds the imagination prompt: those calls fail and degrade.
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--json", help="also write the figures as JSON to this path")
    args = parser.parse_args(argv)
    args.share = args.share or [0.5]
    with tempfile.TemporaryDirectory(prefix="rgw-rehearsal-vllm-") as tmp:
        workdir = Path(tmp)
        flags = ["--scheduling-policy", "priority", "--max-num-seqs", str(args.max_num_seqs),
                 "--max-model-len", str(args.max_model_len)]  # fmt: skip
        engine = start_vllm(workdir / "vllm.log", flags)
        gateways: dict[str, Proc] = {}
        try:
            for name, (scheduling, env) in gateway_configs(args).items():
                gateways[name] = start_gateway(
                    engine, name, workdir, scheduling=scheduling, env=env
                )
            lap = asyncio.run(overlap(gateways["priority"], engine, args.rounds))
            waits = asyncio.run(priorities(gateways, engine, args))
        finally:
            for gateway in gateways.values():
                gateway.stop()
            engine.stop()
    print(f"real vLLM (CPU build, tiny random Qwen3, --scheduling-policy priority, "
          f"--max-num-seqs {args.max_num_seqs}, --max-model-len {args.max_model_len}); "
          f"{args.rounds} rounds per K")  # fmt: skip
    print("\n| parallel, depth 1, reflect | K=1 | K=4 | K=4 / K=1 |\n|---|---:|---:|---:|")
    print(f"| median wall time | {lap['k1_s'] * 1000:.0f} ms | {lap['k4_s'] * 1000:.0f} ms "
          f"| {lap['ratio']:.2f} (target ≤ 1.3) |")  # fmt: skip
    print(f"| distinct actions imagined per request (median) | {lap['imagined_k1']:.0f} "
          f"| {lap['imagined_k4']:.0f} | |")  # fmt: skip
    print(f"| degraded rehearsals (a failed call) | {lap['degraded']} of {2 * args.rounds} | | |")
    print(f"\nvLLM prefix cache around the rounds: {lap['vllm_prefix_share']:.1%} of "
          f"{lap['vllm_prefix_queries']:.0f} prompt tokens (vllm:prefix_cache_hits / queries; "
          "target ≥ 80%); rehearsal-role calls alone: "
          f"{lap['rehearse_cached_share']:.1%}")  # fmt: skip
    print("\n| plain pass-through requests (max_tokens 16), one at a time | p50 ms | p90 ms "
          "| × alone | requests | vLLM running at send (median) "
          "| load: rehearsals, p50 s, degraded | vLLM preemptions "
          "| imaginations cancelled |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|")  # fmt: skip
    for name, row in waits.items():
        tally = ""
        if name != "alone":
            tally = (f"{row['load_rehearsals']}, {row['load_p50_s']:.1f} s, "
                     f"{row['load_degraded']}")  # fmt: skip
        print(f"| {phase_label(name, args.max_num_seqs)} | {row['p50_ms']:.0f} "
              f"| {row['p90_ms']:.0f} | {row['vs_alone']:.2f} | {row['n']} "
              f"| {row['running_at_send']:g} | {tally} "
              f"| {row['vllm_preemptions']:.0f} | {row['gateway_preemptions']:.0f} |")  # fmt: skip
    if args.json:
        Path(args.json).write_bytes(orjson.dumps({"overlap": lap, "priorities": waits}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
