"""What rehearsal costs and buys, measured against the engine twin in one run.

Starts a twin with the ``h100`` latency profile (an 8B model on one H100, see docs/twin.md),
scaled by ``--latency-scale``, and a gateway in front of it, then:

1. **Overlap** — parallel rehearsal wall time at K = 4 versus K = 1 (depth 1, ``reflect``, no
   early exit: the same three phases whatever K is), rounds interleaved so drift hits both;
   DESIGN §10 targets a ratio ≤ 1.25.
2. **Prefix cache** — the share of rehearsal-role prompt tokens served from the engine's prefix
   cache (``tokens.rehearse.cached / tokens.rehearse.prompt``); target ≥ 80 %.
3. **Errors** — over every task of a world, the first committed action executed on the real
   world: how often it errs with rehearsal off, parallel K = 4 and sequential K = 4
   (``select``), for a weak policy (``--skill``) and a faithful imagination (``--fidelity``).

    python -m benchmarks.rehearsal [--rounds 5] [--latency-scale 0.25] [--skill 0.5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rehearsal_gateway.twin.worlds import World, load_world  # noqa: E402
from tests.support.procs import Proc, cli_argv, free_port, start_http_server  # noqa: E402

MODEL = "EnvACE-Qwen3-8B"


def _start(workdir: Path, args: argparse.Namespace) -> tuple[Proc, Proc]:
    twin_port, gateway_port = free_port(), free_port()
    twin = start_http_server(
        cli_argv("twin", "--port", str(twin_port), "--world", args.world, "--latency", "h100",
                 "--latency-scale", str(args.latency_scale), "--skill", str(args.skill),
                 "--fidelity", str(args.fidelity), "--seed", "1"),
        port=twin_port, log_path=workdir / "twin.log",
    )  # fmt: skip
    gateway = start_http_server(
        cli_argv("serve", "--port", str(gateway_port), "--engine", twin.url + "/v1"),
        port=gateway_port, log_path=workdir / "gateway.log",
    )  # fmt: skip
    return twin, gateway


def world_request(
    world: World, task_index: int, seed: int, knobs: dict[str, Any] | None
) -> dict[str, Any]:
    """A world task's first turn with the world's tools; ``knobs=None`` sends no rehearsal field."""
    task = world.tasks[task_index % len(world.tasks)]
    request: dict[str, Any] = {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": world.system_prompt},
            {"role": "user", "content": task.instruction},
        ],
        "tools": world.tool_schemas(),
        "seed": seed,
    }
    if knobs is not None:
        request["rehearsal"] = knobs
    return request


def _post(client: httpx.Client, body: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    response = client.post("/v1/chat/completions", json=body)
    elapsed = time.perf_counter() - started
    response.raise_for_status()
    answer: dict[str, Any] = response.json()
    return elapsed, answer


def overlap(client: httpx.Client, world: World, rounds: int) -> dict[str, Any]:
    """Wall time of parallel K=4 vs K=1 (depth 1, reflect), interleaved; prefix-cache share."""
    times: dict[int, list[float]] = {1: [], 4: []}
    cached = prompt = 0
    for round_ in range(rounds):
        order = (1, 4) if round_ % 2 == 0 else (4, 1)
        for k in order:
            # reflect: one act, K concurrent imaginations, one commit, whatever was vetoed
            knobs = {"mode": "parallel", "budget": k, "commit": "reflect", "early_exit": False}
            elapsed, answer = _post(client, world_request(world, round_, 100 + round_, knobs))
            times[k].append(elapsed)
            rehearse = answer["rehearsal"]["tokens"].get("rehearse", {})
            cached += rehearse.get("cached", 0)
            prompt += rehearse.get("prompt", 0)
    k1, k4 = statistics.median(times[1]), statistics.median(times[4])
    return {"k1_s": k1, "k4_s": k4, "ratio": k4 / k1, "cached_share": cached / max(prompt, 1)}


def errors(client: httpx.Client, world: World, seeds: int) -> dict[str, dict[str, float]]:
    """First committed action of every task, executed on the world: error counts per mode."""
    modes: dict[str, dict[str, Any]] = {
        "off": {"mode": "off"},
        "parallel K=4": {"mode": "parallel", "budget": 4, "commit": "select"},
        "sequential K=4": {"mode": "sequential", "budget": 4, "commit": "select"},
    }
    table: dict[str, dict[str, float]] = {}
    for name, knobs in modes.items():
        erred = total = 0
        wall: list[float] = []
        for seed in range(seeds):
            for index, task in enumerate(world.tasks):
                elapsed, answer = _post(client, world_request(world, index, seed, knobs))
                wall.append(elapsed)
                for call in answer["choices"][0]["message"].get("tool_calls") or []:
                    arguments = json.loads(call["function"]["arguments"] or "{}")
                    result = world.call(world.new_state(task), call["function"]["name"], arguments)
                    erred += isinstance(result, dict) and "error" in result
                    total += 1
        table[name] = {"calls": total, "errors": erred, "median_s": statistics.median(wall)}
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world", default="retail")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--latency-scale", type=float, default=0.25)
    parser.add_argument("--skill", type=float, default=0.5)
    parser.add_argument("--fidelity", type=float, default=0.95)
    args = parser.parse_args()
    world = load_world(args.world)
    with tempfile.TemporaryDirectory(prefix="rgw-bench-") as tmp:
        twin, gateway = _start(Path(tmp), args)
        try:
            with httpx.Client(base_url=gateway.url, timeout=300) as client:
                lap = overlap(client, world, args.rounds)
                table = errors(client, world, args.seeds)
        finally:
            gateway.stop()
            twin.stop()
    print(f"twin: h100 profile x{args.latency_scale}, skill {args.skill}, "
          f"fidelity {args.fidelity}, world {args.world}")  # fmt: skip
    print("\n| parallel, depth 1, reflect | K=1 | K=4 | K=4 / K=1 |\n|---|---:|---:|---:|")
    print(f"| median wall time | {lap['k1_s'] * 1000:.0f} ms | {lap['k4_s'] * 1000:.0f} ms "
          f"| {lap['ratio']:.2f} (target ≤ 1.25) |")  # fmt: skip
    print(f"\nrehearsal prompt tokens served from the prefix cache: {lap['cached_share']:.1%} "
          "(target ≥ 80%)")  # fmt: skip
    print("\n| first committed action | calls | real errors | error rate | median wall |")
    print("|---|---:|---:|---:|---:|")
    for name, row in table.items():
        rate = row["errors"] / max(row["calls"], 1)
        print(f"| {name} | {row['calls']:.0f} | {row['errors']:.0f} | {rate:.1%} "
              f"| {row['median_s'] * 1000:.0f} ms |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
