"""``rehearsal-gateway demo``: the main job on a laptop, end to end, in about a minute.

It starts an engine twin (a labelled simulation of vLLM serving EnvACE, with the ``h100`` latency
profile scaled down), the gateway on its embedded defaults (in-process store), and the example
agent, which works through a world's tasks for real three times: rehearsal off, parallel K=4 and
sequential K=4. Each configuration runs under its own API key, so the gateway keeps their memory
and grounding apart (tenants) and the three can run side by side without influencing each other;
within a configuration tasks run one after another, so the table is the same for the same seed.

It ends with a table of outcomes (reproducible for a fixed seed) and one of latencies (measured,
so they vary from run to run), cleans up every process it started, and exits non-zero when
anything failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean
from typing import Any

import httpx

DEMO_KEYS = {"off": "demo-off-key", "parallel": "demo-parallel-key", "sequential": "demo-seq-key"}


def register(subparsers: Any) -> None:
    """Add ``demo`` to the top-level CLI."""
    parser = subparsers.add_parser(
        "demo",
        help="run twin + gateway + example agent: rehearsal off vs parallel vs sequential",
        description="Start an engine twin and the gateway, run the example agent, print a table.",
    )
    parser.add_argument("--world", default="retail", choices=["airline", "retail", "bank"])
    parser.add_argument("--tasks", type=int, default=12, help="tasks of the world to run")
    parser.add_argument("--budget", type=int, default=4, help="K for the rehearsed runs")
    parser.add_argument("--skill", type=float, default=0.6, help="the twin's policy accuracy")
    parser.add_argument("--fidelity", type=float, default=0.95, help="the twin's imagination")
    parser.add_argument("--latency-scale", type=float, default=0.05, help="scales the h100 profile")
    parser.add_argument("--tool-scale", type=float, default=0.5, help="scales real tool latency")
    parser.add_argument("--seed", type=int, default=7)
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
    rehearsal_ms: list[float] = field(default_factory=list)
    real_call_ms: list[float] = field(default_factory=list)
    tokens: dict[str, int] = field(default_factory=dict)
    fidelities: list[float] = field(default_factory=list)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class _Child:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path


@contextlib.contextmanager
def _children() -> Iterator[list[_Child]]:
    """Every process the demo starts, stopped (with their process groups) however it ends."""
    started: list[_Child] = []
    try:
        yield started
    finally:
        for child in reversed(started):
            if child.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.popen.pid, signal.SIGTERM)
                try:
                    child.popen.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(child.popen.pid, signal.SIGKILL)
                    child.popen.wait(timeout=5)


def _spawn(
    children: list[_Child],
    name: str,
    argv: list[str],
    workdir: Path,
    env: dict[str, str] | None = None,
) -> _Child:
    log = workdir / f"{name}.log"
    with log.open("wb") as sink:
        popen = subprocess.Popen(
            argv,
            env={**os.environ, **(env or {})},
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    child = _Child(name, popen, log)
    children.append(child)
    return child


def _wait_ready(child: _Child, url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.popen.poll() is not None:
            raise RuntimeError(f"{child.name} exited early:\n{child.log.read_text()[-2000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{child.name} did not become ready at {url}")


def _configurations(budget: int) -> list[tuple[str, dict[str, Any] | None]]:
    return [
        ("off", {"mode": "off"}),
        ("parallel", {"mode": "parallel", "budget": budget, "commit": "select"}),
        ("sequential", {"mode": "sequential", "budget": budget, "commit": "select"}),
    ]


async def _run_configuration(
    name: str, knobs: dict[str, Any] | None, gateway: str, args: argparse.Namespace, progress: Any
) -> Outcome:
    from clients.agent import ExampleAgent, ToolLatency
    from clients.client import AsyncRehearsalClient, Rehearsal
    from twin.worlds import load_world

    world = load_world(args.world)
    client = AsyncRehearsalClient(gateway + "/v1", api_key=DEMO_KEYS[name])
    agent = ExampleAgent(
        client,
        world,
        model="EnvACE-Qwen3-8B",
        rehearsal=Rehearsal(**knobs) if knobs else None,
        latency=ToolLatency(read_s=0.12 * args.tool_scale, write_s=0.35 * args.tool_scale),
        seed=args.seed,
    )
    outcome = Outcome(name)
    task_bar = progress.add_task(f"{name:>10}", total=min(args.tasks, len(world.tasks)))
    try:
        for index, task in enumerate(world.tasks[: args.tasks]):
            episode = await agent.run(task, session_id=f"demo-{args.seed}-{name}-{index}")
            outcome.tasks += 1
            outcome.successes += int(episode.success)
            outcome.tool_errors += episode.tool_errors
            outcome.real_calls += episode.real_calls
            outcome.turns += episode.turns
            outcome.rehearsal_ms.append(episode.rehearsal_ms / max(episode.turns, 1))
            if episode.real_calls:
                outcome.real_call_ms.append(episode.real_call_ms / episode.real_calls)
            for role, count in episode.tokens.items():
                outcome.tokens[role] = outcome.tokens.get(role, 0) + count
            outcome.fidelities.extend(episode.fidelities)
            progress.advance(task_bar)
    finally:
        await client.close()
    return outcome


def _tables(outcomes: list[Outcome]) -> tuple[Any, Any]:
    from rich.table import Table

    results = Table(title="Outcomes (reproducible for a fixed seed)")
    for column in ("run", "success", "tool errors", "real calls", "turns"):
        results.add_column(column, justify="right")
    for column in ("tokens act", "tokens rehearse", "tokens commit", "fidelity"):
        results.add_column(column, justify="right")
    timing = Table(title="Latency (measured; varies run to run)")
    for column in ("run", "rehearsal ms / turn", "real call ms / call"):
        timing.add_column(column, justify="right")
    for o in outcomes:
        fidelity = f"{fmean(o.fidelities):.3f}" if o.fidelities else "-"
        results.add_row(
            o.name,
            f"{o.successes}/{o.tasks} ({o.successes / max(o.tasks, 1):.0%})",
            str(o.tool_errors),
            str(o.real_calls),
            str(o.turns),
            str(o.tokens.get("act", 0)),
            str(o.tokens.get("rehearse", 0)),
            str(o.tokens.get("commit", 0)),
            fidelity,
        )
        timing.add_row(
            o.name,
            f"{fmean(o.rehearsal_ms):.0f}" if o.rehearsal_ms else "-",
            f"{fmean(o.real_call_ms):.0f}" if o.real_call_ms else "-",
        )
    return results, timing


async def _run_all(gateway: str, args: argparse.Namespace, console: Any) -> list[Outcome]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    columns = (BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress("[progress.description]{task.description}", *columns, console=console) as bar:
        runs = [
            _run_configuration(name, knobs, gateway, args, bar)
            for name, knobs in _configurations(args.budget)
        ]
        return list(await asyncio.gather(*runs))


def run(args: argparse.Namespace) -> int:
    """Start everything, run the three configurations, print the tables, clean up."""
    from rich.console import Console

    console = Console()
    twin_port, gateway_port = _free_port(), _free_port()
    cli = [sys.executable, "-m", "clients.cli"]
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rgw-demo-") as tmp, _children() as children:
        workdir = Path(tmp)
        console.print("[bold]Engine twin[/bold]: a SIMULATION of vLLM serving EnvACE-Qwen3-8B")
        twin = _spawn(children, "twin", [
            *cli, "twin", "--port", str(twin_port), "--world", args.world,
            "--skill", str(args.skill), "--fidelity", str(args.fidelity),
            "--latency", "h100", "--latency-scale", str(args.latency_scale),
            "--seed", str(args.seed),
        ], workdir)  # fmt: skip
        _wait_ready(twin, f"http://127.0.0.1:{twin_port}/health")
        gateway = _spawn(children, "gateway", [
            *cli, "serve", "--engine", f"http://127.0.0.1:{twin_port}/v1",
            "--port", str(gateway_port),
        ], workdir, env={"RGW_API_KEYS": ",".join(DEMO_KEYS.values())})  # fmt: skip
        gateway_url = f"http://127.0.0.1:{gateway_port}"
        _wait_ready(gateway, gateway_url + "/ready")
        console.print(f"gateway on {gateway_url} (embedded defaults: in-process store)")
        try:
            outcomes = asyncio.run(_run_all(gateway_url, args, console))
        except Exception as exc:
            console.print(f"[red]demo failed:[/red] {type(exc).__name__}: {exc}")
            for child in children:
                console.print(f"--- {child.name} log (tail) ---\n{child.log.read_text()[-1500:]}")
            return 1
    results, timing = _tables(outcomes)
    console.print(results)
    console.print(timing)
    console.print(f"demo finished in {time.perf_counter() - began:.1f}s; every process stopped")
    return 0
