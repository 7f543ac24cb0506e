"""Rehearsal batching on the real engine: K imaginations as one vLLM batch call, or K calls.

Starts one real vLLM (``tests/support/vllm.py``: the tiny random Qwen3 of ``make vllm-env``) and
two gateways in front of it, ``RGW_REHEARSAL_BATCH=true`` (what ships) and ``false``, then sends
the same parallel K = 4 rehearsals (depth 1, ``reflect``, no early exit; the random model's tool
calls forced to four distinct cities as in ``benchmarks/rehearsal_vllm.py``) to each in turn,
alternating which goes first. Per rehearsal: wall time, the gateway's CPU, the CPU of vLLM's API
server (the ``vllm serve`` process alone, where per-HTTP-request work happens; its engine-core
process spins on the CPU build whatever it serves) and the HTTP requests vLLM counted
(``http_requests_total`` on its ``/metrics``). Medians over rounds, and batched / one-by-one.

The rehearsal's wall time is mostly how long its longest imagination runs (the random model
writes up to the rehearsal role's 2048 tokens), which moves with the seed. So the engine is also
measured alone: four imagination-sized conversations (128 tokens each, every one run to its end)
as one batch call against four concurrent calls, with the batch's one seed and with a seed each,
interleaved over ``--engine-rounds``.

    python -m benchmarks.batching_vllm [--rounds 10] [--json PATH]
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

from benchmarks.gateway_cpu import cpu_seconds  # noqa: E402
from benchmarks.rehearsal_vllm import (  # noqa: E402
    CITIES,
    SYSTEM,
    post,
    rehearsal_body,
    start_gateway,
)
from rehearsal_gateway.server.rehearse.batching import BATCH_PATH  # noqa: E402
from tests.support.procs import Proc  # noqa: E402
from tests.support.vllm import start_vllm  # noqa: E402

MODES = {"batched": "true", "one by one": "false"}


def http_requests(engine: Proc) -> float:
    """The POSTs vLLM's API server has answered so far (its ``http_requests_total``): the
    gateways' health probes are GETs."""
    total = 0.0
    for line in httpx.get(engine.url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("http_requests_total{") and 'method="POST"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


async def compare(gateways: dict[str, Proc], engine: Proc, rounds: int) -> dict[str, Any]:
    """Interleaved K=4 rehearsals through each gateway; per mode, the per-rehearsal samples."""
    samples: dict[str, dict[str, list[float]]] = {
        mode: {"wall_s": [], "gateway_ms": [], "api_server_ms": [], "http": [], "imagined": []}
        for mode in gateways
    }
    clients = {m: httpx.AsyncClient(base_url=g.url, timeout=300) for m, g in gateways.items()}
    try:
        for client in clients.values():  # warm-up: grammar compile, first prefill
            await post(client, rehearsal_body(4, 0))
        for round_ in range(rounds):
            order = list(gateways) if round_ % 2 == 0 else list(gateways)[::-1]
            for mode in order:
                gateway_cpu0 = cpu_seconds(gateways[mode].popen.pid)
                server_cpu0 = cpu_seconds(engine.popen.pid)
                http0 = http_requests(engine)
                elapsed, answer = await post(clients[mode], rehearsal_body(4, 200 + round_))
                row = samples[mode]
                row["http"].append(http_requests(engine) - http0)
                row["api_server_ms"].append((cpu_seconds(engine.popen.pid) - server_cpu0) * 1e3)
                row["gateway_ms"].append(
                    (cpu_seconds(gateways[mode].popen.pid) - gateway_cpu0) * 1e3
                )
                row["wall_s"].append(elapsed)
                row["imagined"].append(answer["rehearsal"]["distinct_actions"])
    finally:
        for client in clients.values():
            await client.aclose()
    return {
        mode: {k: statistics.median(v) for k, v in rows.items()} for mode, rows in samples.items()
    }


def _conversation(city: str, round_: int) -> list[dict[str, str]]:
    ask = f"Imagine what get_weather returns for {city} (round {round_}). "
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ask * 5}]


async def _four(client: httpx.AsyncClient, common: dict[str, Any], way: str, seed: int,
                conversations: list[list[dict[str, str]]]) -> None:  # fmt: skip
    """Four conversations sent ``way``: one batch call, or four concurrent calls."""
    if way == "batch":
        bodies = [({**common, "seed": seed, "messages": conversations}, BATCH_PATH)]
    else:
        step = 1 if way == "calls, a seed each" else 0
        bodies = [({**common, "seed": seed + i * step, "messages": c}, "/v1/chat/completions")
                  for i, c in enumerate(conversations)]  # fmt: skip
    answers = await asyncio.gather(*(client.post(path, json=body) for body, path in bodies))
    for answer in answers:
        answer.raise_for_status()


async def engine_alone(engine: Proc, rounds: int) -> dict[str, float]:
    """Median wall seconds of four conversations: one batch call, or four concurrent calls."""
    ways = ("batch", "calls, one seed", "calls, a seed each")
    walls: dict[str, list[float]] = {way: [] for way in ways}
    async with httpx.AsyncClient(base_url=engine.url, timeout=300) as client:
        model = (await client.get("/v1/models")).json()["data"][0]["id"]
        common = {"model": model, "max_tokens": 128, "temperature": 0.6, "top_p": 0.95,
                  "top_k": 20, "ignore_eos": True}  # fmt: skip
        for round_ in range(rounds + 1):  # the first round warms up
            conversations = [_conversation(city, round_) for city in CITIES[:4]]
            for way in ways if round_ % 2 == 0 else ways[::-1]:
                started = time.perf_counter()
                await _four(client, common, way, 1000 + round_, conversations)
                if round_:
                    walls[way].append(time.perf_counter() - started)
    return {way: statistics.median(values) for way, values in walls.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="rehearsals per gateway")
    parser.add_argument("--engine-rounds", type=int, default=16, help="engine-alone rounds")
    parser.add_argument("--json", help="also write the figures as JSON to this path")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rgw-batching-vllm-") as tmp:
        workdir = Path(tmp)
        engine = start_vllm(
            workdir / "vllm.log", ["--max-num-seqs", "8", "--max-model-len", "2048"]
        )
        gateways: dict[str, Proc] = {}
        try:
            for mode, flag in MODES.items():
                env = {"RGW_REHEARSAL_BATCH": flag}
                gateways[mode] = start_gateway(engine, mode.replace(" ", "-"), workdir,
                                               scheduling="fcfs", env=env)  # fmt: skip
            figures = asyncio.run(compare(gateways, engine, args.rounds))
            alone = asyncio.run(engine_alone(engine, args.engine_rounds))
        finally:
            for gateway in gateways.values():
                gateway.stop()
            engine.stop()
    print(f"real vLLM (CPU build, tiny random Qwen3), parallel K=4, depth 1, reflect; "
          f"medians of {args.rounds} rehearsals per gateway, interleaved")  # fmt: skip
    print("\n| per rehearsal | batched | one by one | batched / one by one |\n|---|---:|---:|---:|")
    batched, single = figures["batched"], figures["one by one"]
    for key, label, unit in (
        ("http", "HTTP requests vLLM answered", ""),
        ("wall_s", "wall time", " s"),
        ("gateway_ms", "gateway CPU", " ms"),
        ("api_server_ms", "vLLM API-server CPU", " ms"),
        ("imagined", "distinct actions imagined", ""),
    ):
        ratio = batched[key] / single[key] if single[key] else float("nan")
        print(f"| {label} | {batched[key]:.3g}{unit} | {single[key]:.3g}{unit} | {ratio:.2f} |")
    print(f"\nvLLM alone, four conversations of 128 tokens each, median of {args.engine_rounds} "
          "interleaved rounds:\n\n| sent as | wall time | / batch |\n|---|---:|---:|")  # fmt: skip
    for name, wall in alone.items():
        print(f"| {name} | {wall * 1000:.0f} ms | {wall / alone['batch']:.2f} |")
    if args.json:
        Path(args.json).write_bytes(orjson.dumps({**figures, "engine_alone": alone}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
