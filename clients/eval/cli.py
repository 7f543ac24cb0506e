"""``rehearsal-gateway eval``: does rehearsal pay, at which mode and budget, on these tasks?

It runs a suite's tasks through a gateway for a grid of modes × budgets (off once), executes
every committed call in the suite's real environment, scores each task with the suite's own
checker and prints two tables (outcomes; cost per turn), writing JSON and CSV beside the
resumable episode log in ``--out`` (``clients/eval/results.py``). With ``--gateway URL`` it talks
to that gateway, whatever serves behind it; without, it starts an engine twin and a gateway on
loopback — a **simulation**, and the output says so on every table.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rehearsal_gateway.rehearsal.budget import COMMIT_RULES

from ..stack import add_port_options
from . import UsageError, tau_cli

MODES = ("off", "parallel", "sequential")
SIMULATION = (
    "SIMULATION: the engine is the twin (a scripted policy, no model), so these figures test the "
    "gateway and this harness, not EnvACE; see docs/evaluation.md"
)


def register(subparsers: Any) -> None:
    """Add ``eval`` to the top-level CLI."""
    p = subparsers.add_parser(
        "eval",
        help="score rehearsal modes × budgets on BFCL multi-turn, τ²-Bench (or the twin's worlds)",
        description="Run a suite's tasks through the gateway for each mode and budget, execute "
        "every committed call for real, score with the suite's checker, print a table.",
        epilog="examples:\n"
        "  rehearsal-gateway eval --suite worlds --limit 6 --modes off,parallel --budgets 2,4\n"
        "  rehearsal-gateway eval --gateway http://127.0.0.1:8000 --limit 20 --out runs/bfcl",
    )
    p.add_argument(
        "--suite",
        choices=["bfcl-multi-turn", "worlds", "tau2", "paper"],
        default="bfcl-multi-turn",
        help="the tasks: BFCL multi-turn, the twin's worlds, τ²-Bench (--domain), or the paper's "
        "table (BFCL multi-turn base and the τ² domains)",
    )
    p.add_argument("--gateway", metavar="URL", help="a running gateway (default: start a twin)")
    p.add_argument("--api-key", help="the gateway's API key, when it requires one (default: none)")
    p.add_argument("--model", help="model to ask for (default: the gateway's first model)")
    p.add_argument("--modes", default="off,parallel,sequential", help="comma-separated")
    p.add_argument("--budgets", default="4", help="comma-separated K for the rehearsed modes")
    p.add_argument(
        "--commit", choices=COMMIT_RULES, help="the commit rule (default: the gateway's)"
    )
    p.add_argument("--depth", type=int, help="imagined steps per trajectory (gateway default)")
    p.add_argument("--temperature", type=float, default=0.6, help="EnvACE's evaluation sampling")
    p.add_argument("--top-p", type=float, default=0.95, help="EnvACE's evaluation sampling")
    p.add_argument("--seeds", default="0", help="comma-separated; each seed reruns every task")
    p.add_argument(
        "--tasks", default="", metavar="GLOB[,GLOB]", help="task ids to keep (default: all)"
    )
    p.add_argument(
        "--limit", type=int,
        help="the first N tasks (after --tasks; the paper suite: of each benchmark; default: all)",
    )  # fmt: skip
    p.add_argument("--category", default="base", help="BFCL multi-turn category (bfcl only)")
    p.add_argument("--worlds", default="airline,retail,bank", help="worlds suite only")
    p.add_argument("--max-steps", type=int, default=12, help="worlds suite: steps per task")
    p.add_argument("--concurrency", type=int, default=4, help="tasks in flight")
    p.add_argument(
        "--out",
        metavar="DIR",
        help="run directory; rerun with it to resume (default: rgw-eval/SUITE-TIME)",
    )
    p.add_argument(
        "--plot", action="store_true",
        help="insist on DIR/plot.png (written anyway when matplotlib is installed)",
    )  # fmt: skip
    p.add_argument("--twin-skill", type=float, default=0.5, help="local twin only")
    p.add_argument("--twin-fidelity", type=float, default=0.95, help="local twin only")
    p.add_argument("--twin-latency-scale", type=float, default=0.05, help="scales h100 latency")
    p.add_argument("--redis", default="auto", metavar="URL|auto|none", help="local gateway's store")
    add_port_options(p)
    tau_cli.add_arguments(p)
    p.set_defaults(func=run)


def _list(text: str, what: str, kind: type = str) -> list[Any]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    try:
        values = [kind(item) for item in items]
    except ValueError:
        raise UsageError(
            f"--{what} must be comma-separated {kind.__name__}s, got {text!r}"
        ) from None
    if not values and what != "tasks":
        raise UsageError(f"--{what} is empty")
    return values


def grid_cells(args: argparse.Namespace) -> list[Any]:
    from .episode import Cell

    modes = _list(args.modes, "modes")
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        raise UsageError(f"--modes: unknown {', '.join(unknown)} (choose from {', '.join(MODES)})")
    budgets = _list(args.budgets, "budgets", int)
    if any(b < 1 for b in budgets):
        raise UsageError("--budgets must be at least 1 (off is its own mode)")
    cells = [Cell("off")] if "off" in modes else []
    cells += [Cell(mode, b) for mode in MODES[1:] if mode in modes for b in sorted(set(budgets))]
    return cells


def _suite(args: argparse.Namespace, workdir: Path) -> Any:
    if args.suite in ("tau2", "paper"):
        return tau_cli.build_suite(args, workdir)
    if args.suite == "worlds":
        from rehearsal_gateway.twin.worlds import WORLD_NAMES

        from .worlds import WorldsSuite

        worlds = _list(args.worlds, "worlds")
        if set(worlds) - set(WORLD_NAMES):
            raise UsageError(f"--worlds: choose from {', '.join(WORLD_NAMES)}")
        return WorldsSuite(worlds, max_steps=args.max_steps)
    from .bfcl import BfclSuite, SuiteUnavailable

    try:
        return BfclSuite(workdir / "bfcl", args.category)
    except (SuiteUnavailable, ValueError) as exc:
        raise UsageError(str(exc)) from None


def _base(url: str) -> str:
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def gateway_models(base: str, api_key: str | None) -> list[str]:
    """The gateway's model ids; ``UsageError`` saying what is wrong when it cannot answer."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = httpx.get(f"{base}/v1/models", headers=headers, timeout=5.0)
    except httpx.HTTPError as exc:
        raise UsageError(
            f"cannot reach the gateway at {base} ({type(exc).__name__}: {exc}). Start one "
            "(`rehearsal-gateway serve --engine URL`, or `up` on a GPU host), or leave out "
            "--gateway to run against a local engine twin"
        ) from None
    if response.status_code in (401, 403):
        raise UsageError(f"the gateway at {base} refused the API key (pass --api-key)")
    if response.status_code != 200:
        raise UsageError(f"{base}/v1/models answered HTTP {response.status_code}: is it a gateway?")
    return [str(m.get("id")) for m in response.json().get("data", [])]


@contextlib.contextmanager
def local_stack(args: argparse.Namespace, keys: list[str], workdir: Path) -> Iterator[str]:
    """An engine twin and a gateway on loopback, one API key per cell; the gateway's URL."""
    from ..stack import children, chosen_ports, spawn, store_settings, wait_ready

    twin_port, gateway_port = chosen_ports(args)
    cli = [sys.executable, "-m", "rehearsal_gateway.clients.cli"]
    with store_settings(args.redis, "eval") as store, children() as started:
        twin = spawn(started, "twin", [
            *cli, "twin", "--port", str(twin_port), "--world", "auto",
            "--skill", str(args.twin_skill), "--fidelity", str(args.twin_fidelity),
            "--latency", "h100", "--latency-scale", str(args.twin_latency_scale),
        ], workdir, env={})  # fmt: skip
        wait_ready(twin, f"http://127.0.0.1:{twin_port}/health")
        gateway = spawn(started, "gateway", [
            *cli, "serve", "--engine", f"http://127.0.0.1:{twin_port}/v1",
            "--port", str(gateway_port), "--log-level", "warning",
        ], workdir, env={"RGW_API_KEYS": ",".join(keys), **store})  # fmt: skip
        url = f"http://127.0.0.1:{gateway_port}"
        wait_ready(gateway, url + "/ready")
        yield url


def _manifest(args: argparse.Namespace, suite: Any, model: str) -> dict[str, Any]:
    engine: dict[str, Any] = {"gateway": _base(args.gateway)} if args.gateway else {
        "twin": {"skill": args.twin_skill, "fidelity": args.twin_fidelity,
                 "latency": f"h100 x {args.twin_latency_scale}"},
    }  # fmt: skip
    sampling = {"model": model, "temperature": args.temperature, "top_p": args.top_p,
                "commit": args.commit, "depth": args.depth}  # fmt: skip
    return {**suite.manifest(), "engine": engine, "sampling": sampling}


def _exit_on_signal(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def run(args: argparse.Namespace) -> int:
    """Check everything that can be checked up front, then run the grid (see ``execute``)."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal:  # a log or a pipe: keep the tables' columns readable
        console = Console(width=150)
    err = Console(stderr=True)
    # The twin and gateway run in their own sessions: SIGTERM must unwind through local_stack.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        return execute(args, console)
    except UsageError as exc:
        err.print(f"[red]eval:[/red] {exc}", highlight=False, soft_wrap=True)
        return 2


def execute(args: argparse.Namespace, console: Any) -> int:
    began = time.perf_counter()
    cells = grid_cells(args)
    seeds = tau_cli.trial_seeds(args, _list(args.seeds, "seeds", int))
    if args.concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UsageError(
                "--plot needs matplotlib: pip install 'rehearsal-gateway[plot]'"
            ) from None
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = Path(args.out or f"rgw-eval/{args.suite}-{stamp}")
    suite = _suite(args, out)
    limit = None if args.suite == "paper" else args.limit  # the paper suite's is per benchmark
    tasks = suite.task_ids(_list(args.tasks, "tasks"))[:limit]
    if not tasks:
        raise UsageError(f"no {suite.name} task matches --tasks {args.tasks!r}")
    keys = [f"eval-{cell.name}" for cell in cells]
    with contextlib.ExitStack() as stack:
        if args.gateway:
            base = _base(args.gateway)
            api_keys = {cell.name: args.api_key for cell in cells}
            console.print(
                f"gateway {base}: whatever engine it fronts (a twin would be a simulation)"
            )
        else:
            console.print(f"[bold yellow]{SIMULATION}[/bold yellow]")
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rgw-eval-")))
            base = stack.enter_context(local_stack(args, keys, workdir))
            api_keys = {cell.name: key for cell, key in zip(cells, keys, strict=True)}
            console.print(f"started an engine twin and a gateway at {base} (one API key per cell)")
        models = gateway_models(base, next(iter(api_keys.values())))
        tau_cli.check_engine(base, next(iter(api_keys.values())))
        model = args.model or (models[0] if models else "")
        from .paper import PaperRun
        from .run import GridRun

        grid = (PaperRun if args.suite == "paper" else GridRun)(
            suite=suite, cells=cells, seeds=seeds, tasks=tasks, out=out, base=base,
            api_keys=api_keys, manifest=_manifest(args, suite, model),
            simulation=not args.gateway,
        )  # fmt: skip
        code = grid.run(console, concurrency=args.concurrency, plot=args.plot)
    console.print(f"eval finished in {time.perf_counter() - began:.1f}s; results in {out}")
    return code
