"""``rehearsal-gateway demo``: the main job on a laptop, end to end, in well under two minutes.

It starts an engine twin (a labelled simulation of vLLM serving EnvACE, with the ``h100``
latency profile scaled down), the gateway on its embedded defaults (the in-process store, or
Redis when one answers on 127.0.0.1:6379, under a key prefix of this run's own that is dropped at
the end), and the example agent, which works through the worlds' tasks for real three times:
rehearsal off, parallel K=4 and sequential K=4. Each configuration runs under its own API key,
so the gateway keeps their memory and grounding apart (tenants) and the three can run side by
side without influencing each other; within a configuration tasks run one after another, so the
outcomes are the same for the same seed.

It ends with a table of outcomes (reproducible for a fixed seed) and one of cost (tokens are
reproducible, latencies are measured and vary), cleans up every process it started, and exits
non-zero when anything failed. ``--json PATH`` writes the same numbers for machines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import fmean
from typing import Any

from rehearsal_gateway.rehearsal.budget import COMMIT_RULES

from . import stack
from .stack import Child, add_port_options, chosen_ports, spawn, store_settings, wait_ready

DEMO_KEYS = {"off": "demo-off-key", "parallel": "demo-parallel-key", "sequential": "demo-seq-key"}
MODEL = "EnvACE-Qwen3-8B"
SHORT_WORLD, SHORT_TASKS = "retail", 4


def register(subparsers: Any) -> None:
    """Add ``demo`` to the top-level CLI."""
    parser = subparsers.add_parser(
        "demo",
        help="run twin + gateway + example agent: rehearsal off vs parallel vs sequential",
        description="Start an engine twin and the gateway, run the example agent, print a table.",
        epilog="examples:\n  rehearsal-gateway demo --short\n"
        "  rehearsal-gateway demo --seed 3 --worlds airline --tasks 6 --json out.json",
    )
    parser.add_argument(
        "--worlds", default="retail,bank", help="comma-separated: airline, retail, bank"
    )
    parser.add_argument("--tasks", type=int, default=12, help="tasks per world (at most 12)")
    parser.add_argument(
        "--short", action="store_true", help=f"{SHORT_TASKS} tasks of {SHORT_WORLD} only (tests)"
    )
    parser.add_argument("--budget", type=int, default=4, help="K for the rehearsed runs")
    parser.add_argument(
        "--commit", default="anchored", choices=COMMIT_RULES, help="the rehearsed runs' rule"
    )
    parser.add_argument("--skill", type=float, default=0.5, help="the twin's policy accuracy")
    parser.add_argument("--fidelity", type=float, default=0.95, help="the twin's imagination")
    parser.add_argument("--latency-scale", type=float, default=0.05, help="scales the h100 profile")
    parser.add_argument("--tool-scale", type=float, default=0.5, help="scales real tool latency")
    parser.add_argument("--max-turns", type=int, default=6, help="the agent's turn limit per task")
    parser.add_argument("--seed", type=int, default=7, help="the run's seed (outcomes repeat)")
    parser.add_argument(
        "--redis",
        default="auto",
        metavar="URL|auto|none",
        help="the gateway's store: auto = Redis on 127.0.0.1:6379 if it answers, else in-process",
    )
    parser.add_argument(
        "--json", metavar="PATH", help="also write the results as JSON (default: no file)"
    )
    add_port_options(parser)
    parser.set_defaults(func=run)


@dataclass
class Outcome:
    """One configuration's totals across its tasks."""

    name: str
    tasks: int = 0
    successes: int = 0
    tool_errors: int = 0
    real_calls: int = 0
    turns: int = 0
    vetoes: int = 0
    degraded: dict[str, int] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)
    fidelities: list[float] = field(default_factory=list)
    model_ms: list[float] = field(default_factory=list)
    rehearsal_ms: list[float] = field(default_factory=list)
    real_call_ms: list[float] = field(default_factory=list)
    task_s: list[float] = field(default_factory=list)

    @property
    def fidelity(self) -> float | None:
        return round(fmean(self.fidelities), 3) if self.fidelities else None

    def row(self) -> dict[str, Any]:
        """The reproducible numbers (what the outcome table shows) plus the measured means."""
        data = asdict(self)
        for name in ("fidelities", "model_ms", "rehearsal_ms", "real_call_ms", "task_s"):
            values = data.pop(name)
            if name != "fidelities":
                data[f"mean_{name}"] = round(fmean(values), 1) if values else None
        data["fidelity"] = self.fidelity
        data["fidelity_samples"] = len(self.fidelities)
        return data


def _configurations(budget: int, commit: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("off", {"mode": "off"}),
        ("parallel", {"mode": "parallel", "budget": budget, "commit": commit}),
        ("sequential", {"mode": "sequential", "budget": budget, "commit": commit}),
    ]


def _worlds(args: argparse.Namespace) -> list[str]:
    if args.short:
        return [SHORT_WORLD]
    return [name.strip() for name in args.worlds.split(",") if name.strip()]


def _task_count(args: argparse.Namespace) -> int:
    return SHORT_TASKS if args.short else args.tasks


async def _run_configuration(
    name: str, knobs: dict[str, Any], gateway: str, args: argparse.Namespace, progress: Any
) -> Outcome:
    from rehearsal_gateway.twin.worlds import load_world

    from .agent import ExampleAgent, ToolLatency
    from .client import AsyncRehearsalClient, Rehearsal

    worlds = [load_world(world) for world in _worlds(args)]
    count = _task_count(args)
    client = AsyncRehearsalClient(gateway + "/v1", api_key=DEMO_KEYS[name])
    latency = ToolLatency(read_s=0.12 * args.tool_scale, write_s=0.35 * args.tool_scale)
    outcome = Outcome(name)
    bar = progress.add_task(f"{name:>10}", total=sum(len(w.tasks[:count]) for w in worlds))
    try:
        for world in worlds:
            agent = ExampleAgent(
                client, world, model=MODEL, rehearsal=Rehearsal(**knobs),
                latency=latency, max_turns=args.max_turns, seed=args.seed,
            )  # fmt: skip
            for task in world.tasks[:count]:
                episode = await agent.run(task, session_id=f"demo-{args.seed}-{name}-{task.id}")
                outcome.tasks += 1
                outcome.successes += int(episode.success)
                outcome.tool_errors += episode.tool_errors
                outcome.real_calls += episode.real_calls
                outcome.turns += episode.turns
                outcome.vetoes += episode.vetoes
                for reason, times in episode.degraded.items():
                    outcome.degraded[reason] = outcome.degraded.get(reason, 0) + times
                for role, tokens in episode.tokens.items():
                    outcome.tokens[role] = outcome.tokens.get(role, 0) + tokens
                outcome.fidelities.extend(episode.fidelities)
                outcome.model_ms.append(episode.model_ms / max(episode.turns, 1))
                outcome.rehearsal_ms.append(episode.rehearsal_ms / max(episode.turns, 1))
                if episode.real_calls:
                    outcome.real_call_ms.append(episode.real_call_ms / episode.real_calls)
                outcome.task_s.append(episode.total_ms / 1000)
                progress.advance(bar)
    finally:
        await client.close()
    return outcome


def _mean(values: list[float], digits: int = 0) -> str:
    return f"{fmean(values):.{digits}f}" if values else "-"


def tables(outcomes: list[Outcome], seed: int) -> tuple[Any, Any]:
    """The outcome table (reproducible for the seed) and the cost table (tokens and latency)."""
    from rich.table import Table

    results = Table(title=f"Outcomes (seed {seed}; the same on every run)")
    for column in ("run", "success", "tool errors", "real calls", "turns", "vetoes", "fidelity"):
        results.add_column(column, justify="right")
    cost = Table(title="Cost per turn (tokens reproducible; milliseconds measured)")
    for column in ("run", "act tok", "rehearse tok", "model ms", "rehearsal ms", "tool ms"):
        cost.add_column(column, justify="right")
    for o in outcomes:
        results.add_row(
            o.name,
            f"{o.successes}/{o.tasks} {o.successes / max(o.tasks, 1):.0%}",
            str(o.tool_errors),
            str(o.real_calls),
            str(o.turns),
            str(o.vetoes),
            "-" if o.fidelity is None else f"{o.fidelity:.3f}",
        )
        turns = max(o.turns, 1)
        rehearse = o.tokens.get("rehearse", 0) + o.tokens.get("commit", 0)
        cost.add_row(
            o.name,
            str(round(o.tokens.get("act", 0) / turns)),
            str(round(rehearse / turns)),
            _mean(o.model_ms),
            _mean(o.rehearsal_ms),
            _mean(o.real_call_ms),
        )
    return results, cost


async def _run_all(gateway: str, args: argparse.Namespace, console: Any) -> list[Outcome]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    # While the agents run, SIGTERM cancels them: an exception raised from a signal handler at an
    # arbitrary point could leave the progress display's lock held and hang the exit.
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None
    loop.add_signal_handler(signal.SIGTERM, main.cancel)
    columns = (BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    try:
        with Progress("[progress.description]{task.description}", *columns, console=console) as bar:
            runs = [
                _run_configuration(name, knobs, gateway, args, bar)
                for name, knobs in _configurations(args.budget, args.commit)
            ]
            return list(await asyncio.gather(*runs))
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def _start_stack(
    children: list[Child], workdir: Path, args: argparse.Namespace, store: dict[str, str]
) -> str:
    """Start the twin and the gateway; the gateway's base URL once both answer."""
    twin_port, gateway_port = chosen_ports(args)
    cli = [sys.executable, "-m", "rehearsal_gateway.clients.cli"]
    worlds = _worlds(args)
    twin = spawn(children, "twin", [
        *cli, "twin", "--port", str(twin_port),
        "--world", worlds[0] if len(worlds) == 1 else "auto",
        "--skill", str(args.skill), "--fidelity", str(args.fidelity),
        "--latency", "h100", "--latency-scale", str(args.latency_scale),
        "--seed", str(args.seed),
    ], workdir, env={})  # fmt: skip
    wait_ready(twin, f"http://127.0.0.1:{twin_port}/health")
    gateway = spawn(children, "gateway", [
        *cli, "serve", "--engine", f"http://127.0.0.1:{twin_port}/v1",
        "--port", str(gateway_port), "--log-level", "warning",
    ], workdir, env={"RGW_API_KEYS": ",".join(DEMO_KEYS.values()), **store})  # fmt: skip
    url = f"http://127.0.0.1:{gateway_port}"
    wait_ready(gateway, url + "/ready")
    return url


def _problems(outcomes: list[Outcome], children: list[Child]) -> list[str]:
    """What makes the run a failure even though every task finished."""
    found = [f"{c.name} exited with {c.popen.returncode}" for c in children if c.popen.poll()]
    for o in outcomes:
        if o.name != "off" and o.real_calls and not o.fidelities:
            found.append(f"{o.name}: no fidelity was measured (the feedback loop is silent)")
    return found


def _exit_on_signal(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def run(args: argparse.Namespace) -> int:
    """Start everything, run the three configurations, print the tables, clean up."""
    from rich.console import Console

    console = Console()
    began = time.perf_counter()
    # The children run in their own sessions, so a SIGTERM to the demo reaches only the demo:
    # turn it into an exit that unwinds through _children(), or twin and gateway outlive it.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    with (
        tempfile.TemporaryDirectory(prefix="rgw-demo-") as tmp,
        store_settings(args.redis, "demo") as store,
        stack.children() as children,
    ):
        console.print(
            "[bold]Engine twin[/bold]: a SIMULATION of vLLM serving EnvACE-Qwen3-8B "
            f"(skill {args.skill}, fidelity {args.fidelity}, h100 latency × {args.latency_scale})"
        )
        try:
            gateway_url = _start_stack(children, Path(tmp), args, store)
            kind = "Redis, a key prefix of this run's own" if store else "in-process store"
            console.print(
                f"gateway on {gateway_url} (embedded defaults: {kind}); "
                f"worlds {', '.join(_worlds(args))}, {_task_count(args)} tasks each; "
                f"real tools {120 * args.tool_scale:.0f} ms reads, {350 * args.tool_scale:.0f} ms "
                "writes"
            )
            outcomes = asyncio.run(_run_all(gateway_url, args, console))
            problems = _problems(outcomes, children)
        except asyncio.CancelledError:
            console.print("demo interrupted (SIGTERM): stopping the twin and the gateway")
            return 128 + signal.SIGTERM
        except Exception as exc:
            console.print(f"[red]demo failed:[/red] {type(exc).__name__}: {exc}")
            for child in children:
                console.print(f"--- {child.name} log (tail) ---\n{child.tail()}")
            return 1
    results, cost = tables(outcomes, args.seed)
    console.print(results)
    console.print(cost)
    if args.json:
        document = {"seed": args.seed, "worlds": _worlds(args), "runs": [o.row() for o in outcomes]}
        Path(args.json).write_text(json.dumps(document, indent=2) + "\n")
    for problem in problems:
        console.print(f"[red]problem:[/red] {problem}")
    console.print(f"demo finished in {time.perf_counter() - began:.1f}s; every process stopped")
    return 1 if problems else 0
