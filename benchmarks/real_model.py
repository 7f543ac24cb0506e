"""Rehearsal with a real language model: does it help or harm when the imagination is real text?

One real vLLM (CPU build) serves Qwen2.5-Coder-0.5B-Instruct (``make real-model``,
docs/real-model.md), one gateway (``rehearsal-gateway serve``) sits in front of it, and the example
agent (clients/agent.py) works through tasks of the twin's worlds used as *real* tools: every
committed call is executed on the world and its result goes back. The same model acts and
imagines. Configurations, each a tenant of its own so memory, grounding and trust never mix:
rehearsal off, parallel K = 2 and K = 4, sequential K = 2 (the gateway's default ``anchored``
commit). Every configuration runs the same (seed, world, task) list in the same order, paired
against off; the configurations run side by side, so vLLM batches their calls.

Per configuration: tasks succeeded, real tool errors, outcome agreement (the gateway's feedback:
did imagination predict error vs success of the committed call), the share of imagined answers in
each parse class (rehearsal.parsing), engine calls, prompt / cached / completion tokens and wall
time per turn, tasks worse / better than off, the first turn at which the gateway reports low
trust, and any request the gateway failed. Then a BFCL multi-turn slice through
``rehearsal-gateway eval`` against the same gateway.

    python -m benchmarks.real_model [--seeds 2] [--tasks 3] [--stride 4] [--worlds retail,bank]
                                    [--max-turns 4] [--bfcl 1] [--engine URL] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.decision_facts import LOW_TRUST  # noqa: E402
from benchmarks.decisions import RecordingClient, play  # noqa: E402
from benchmarks.real_model_report import (  # noqa: E402
    CONFIGS,
    DEADLINE_MS,
    Config,
    Episode,
    TurnFigures,
    print_report,
    summarise,
)
from rehearsal_gateway.clients.agent import ExampleAgent, ToolLatency  # noqa: E402
from rehearsal_gateway.twin.worlds import load_world  # noqa: E402
from tests.support.procs import Proc, cli_argv, free_port, start_http_server  # noqa: E402
from tests.support.vllm import REAL_MODEL_NAME, start_real_vllm  # noqa: E402

# One acting turn: a tool call or a short answer. Unbounded, the small model sometimes repeats
# itself to the end of its context (minutes at ~4 tokens/s), on every configuration alike.
ACT_MAX_TOKENS = 256
# BFCL's multi-turn prompts (every function of a class, described) outgrow 4,096 tokens. One
# prompt must also fit one engine step: vLLM 0.32's CPU build dies when it splits the prefill of a
# seeded request ("CPU Generator does not use offset"), and the agent sends seeds.
BFCL_CONTEXT = ("--max-model-len", "16384", "--max-num-batched-tokens", "16384")
# The gateway waits as long as the engine needs: one busy 2-core machine, one slow model (a
# 1,500-token prefill alone takes about a minute).
PATIENT = {
    "RGW_HEALTH_TIMEOUT": "60",
    "RGW_CONNECT_TIMEOUT": "60",
    "RGW_MAX_DEADLINE_MS": str(DEADLINE_MS),
    "RGW_COMMIT_TIMEOUT": "900",
    "RGW_FIRST_BYTE_TIMEOUT": "900",
    "RGW_CHUNK_TIMEOUT": "600",
    "RGW_QUEUE_TIMEOUT": "900",
    "RGW_REQUEST_TIMEOUT": "1800",
    # An imagined result is a JSON object of a few lines; a longer answer is cut and classified.
    "RGW_REHEARSE_MAX_TOKENS": "160",
}


class TimedClient(RecordingClient):
    """The recording client, also timing each request the agent makes."""

    def __init__(self, base_url: str, api_key: str) -> None:
        super().__init__(base_url, api_key)
        self.walls: list[float] = []

    async def create(self, *, rehearsal: Any = None, **kwargs: Any) -> Any:
        began = time.perf_counter()
        completion = await super().create(rehearsal=rehearsal, **kwargs)
        self.walls.append(time.perf_counter() - began)
        return completion


def figures(completion: Any, wall_s: float) -> TurnFigures:
    """One response's figures, from its usage and its rehearsal summary."""
    usage = completion.usage
    details = getattr(usage, "prompt_tokens_details", None) if usage else None
    cached = getattr(details, "cached_tokens", None) or 0
    turn = TurnFigures(
        wall_s=wall_s,
        engine_calls=1,
        prompt=usage.prompt_tokens if usage else 0,
        cached=cached,
        completion=usage.completion_tokens if usage else 0,
    )
    raw = (completion.model_extra or {}).get("rehearsal")
    if not isinstance(raw, dict):
        return turn
    if isinstance(raw.get("engine_calls"), int):
        turn.engine_calls = raw["engine_calls"]
    turn.parse.update({k: v for k, v in (raw.get("parse_classes") or {}).items()})
    for trajectory in raw.get("trace") or []:
        for step in trajectory.get("steps") or []:
            for seen in step.get("observations") or []:
                if seen.get("source") == "imagined" and isinstance(seen.get("raw"), str):
                    turn.samples.setdefault(str(seen.get("parse")), seen["raw"])
    for item in raw.get("feedback") or []:
        if isinstance(item, dict) and isinstance(item.get("outcome_agreement"), bool):
            turn.agreements.append(item["outcome_agreement"])
    trust = raw.get("trust") or {}
    turn.low_trust = any(
        (v.get("policy") if isinstance(v, dict) else v) in LOW_TRUST for v in trust.values()
    )
    return turn


@dataclass
class Grid:
    """Which tasks: every ``stride``-th task of each world, the first ``tasks`` of those."""

    worlds: tuple[str, ...]
    tasks: int
    seeds: tuple[int, ...]
    max_turns: int
    stride: int = 1


class Progress:
    def __init__(self, total: int) -> None:
        self.total, self.done, self.began = total, 0, time.perf_counter()

    def tick(self, config: Config, episode: Episode) -> None:
        self.done += 1
        verdict = "failed" if episode.failed else ("success" if episode.success else "miss")
        print(
            f"  [{self.done}/{self.total}, {time.perf_counter() - self.began:.0f} s] "
            f"{config.name}: seed {episode.seed} {episode.world}/{episode.task} {verdict}, "
            f"{len(episode.turns)} turns, {episode.tool_errors} tool errors",
            flush=True,
        )


async def run_config(config: Config, url: str, grid: Grid, progress: Progress) -> list[Episode]:
    """Every (seed, world, task) of one configuration, in order, under its own API key."""
    client = TimedClient(url + "/v1", config.key)
    episodes: list[Episode] = []
    try:
        for seed in grid.seeds:
            for world_name in grid.worlds:
                world = load_world(world_name)
                agent = ExampleAgent(
                    client, world, model=REAL_MODEL_NAME, rehearsal=config.rehearsal(),
                    latency=ToolLatency(0.0, 0.0), max_turns=grid.max_turns, seed=seed,
                    max_tokens=ACT_MAX_TOKENS,
                )  # fmt: skip
                for task in world.tasks[:: grid.stride][: grid.tasks]:
                    episode = Episode(seed, world_name, task.id)
                    client.completions.clear()
                    client.walls.clear()
                    await play(agent, task, f"{config.key}-{seed}-{task.id}", episode)
                    walls = client.walls[: len(client.completions)]
                    pairs = zip(client.completions, walls, strict=True)
                    episode.turns = [figures(c, w) for c, w in pairs]
                    episodes.append(episode)
                    progress.tick(config, episode)
    finally:
        await client.close()
    return episodes


async def run_all(url: str, grid: Grid, configs: tuple[Config, ...]) -> dict[Config, list[Episode]]:
    progress = Progress(len(configs) * len(grid.seeds) * len(grid.worlds) * grid.tasks)
    runs = await asyncio.gather(*(run_config(c, url, grid, progress) for c in configs))
    return dict(zip(configs, runs, strict=True))


def start_gateway(engine_url: str, workdir: Path, keys: list[str]) -> Proc:
    port = free_port()
    argv = cli_argv(
        "serve", "--port", str(port), "--log-level", "warning",
        "--engine", f"{engine_url}/v1,name=real,model={REAL_MODEL_NAME}",
    )  # fmt: skip
    return start_http_server(
        argv,
        port=port,
        log_path=workdir / "gateway.log",
        ready_path="/ready",
        env={"RGW_API_KEYS": ",".join(keys), **PATIENT},
    )


def bfcl_slice(gateway: Proc, key: str, limit: int, out: Path) -> int:
    """The BFCL multi-turn slice, through ``rehearsal-gateway eval`` against the same gateway."""
    argv = cli_argv(
        "eval", "--suite", "bfcl-multi-turn", "--gateway", gateway.url, "--api-key", key,
        "--model", REAL_MODEL_NAME, "--modes", "off,parallel", "--budgets", "2",
        "--seeds", "0", "--limit", str(limit), "--concurrency", "2", "--out", str(out),
    )  # fmt: skip
    print(f"\nBFCL multi-turn slice: {' '.join(argv[2:])}", flush=True)
    return subprocess.run(argv, check=False, cwd=ROOT).returncode


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=2, help="seeds per task (paired across runs)")
    parser.add_argument("--tasks", type=int, default=3, help="tasks per world (0: BFCL only)")
    parser.add_argument(
        "--stride", type=int, default=4, help="every N-th task of a world (one of each kind)"
    )
    parser.add_argument("--worlds", default="retail,bank", help="comma-separated twin worlds")
    parser.add_argument("--max-turns", type=int, default=4, help="the agent's turn limit")
    parser.add_argument("--bfcl", type=int, default=1, help="BFCL tasks (0: skip the slice)")
    parser.add_argument("--json", metavar="PATH", help="also write every figure as JSON")
    parser.add_argument(
        "--engine", metavar="URL", help="a vLLM already serving the real model (else start one)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    grid = Grid(
        worlds=tuple(w.strip() for w in args.worlds.split(",")),
        tasks=args.tasks,
        seeds=tuple(range(args.seeds)),
        max_turns=args.max_turns,
        stride=args.stride,
    )
    began = time.perf_counter()
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"load average at start: {' '.join(load)}", flush=True)
    keys = [c.key for c in CONFIGS] + ["real-bfcl"]
    with tempfile.TemporaryDirectory(prefix="rgw-real-model-") as tmp:
        workdir = Path(tmp)
        engine = None if args.engine else start_real_vllm(workdir / "vllm.log", BFCL_CONTEXT)
        engine_url = args.engine or (engine.url if engine else "")
        gateway: Proc | None = None
        try:
            print(f"vLLM up in {time.perf_counter() - began:.0f} s", flush=True)
            gateway = start_gateway(engine_url, workdir, keys)
            results = asyncio.run(run_all(gateway.url, grid, CONFIGS))
            off = results[CONFIGS[0]]
            rows = [summarise(c, results[c], off) for c in CONFIGS]
            print_report(rows)
            episodes_s = time.perf_counter() - began
            bfcl_rc = (
                bfcl_slice(gateway, "real-bfcl", args.bfcl, workdir / "bfcl") if args.bfcl else 0
            )
        finally:
            if gateway is not None:
                gateway.stop()
            if engine is not None:
                engine.stop()
    wall = time.perf_counter() - began
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"\nwall time {wall:.0f} s (worlds {episodes_s:.0f} s); load average at end: "
          f"{' '.join(load)}")  # fmt: skip
    if args.json:
        document = {"grid": grid.__dict__, "rows": rows, "wall_s": round(wall, 1)}
        Path(args.json).write_text(json.dumps(document, indent=1, default=list) + "\n")
    failed = sum(r["failed_requests"] for r in rows)
    return 1 if failed or bfcl_rc else 0


if __name__ == "__main__":
    sys.exit(main())
