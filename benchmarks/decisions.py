"""Does rehearsal make an agent better or worse? The gateway's decisions across fidelity.

One real gateway (``rehearsal-gateway serve``, in-process store) in front of one engine twin per
fidelity × skill — fidelity 1.0, 0.8, 0.5, 0.3, 0.0 × skill 0.5, 0.8, each twin serving a model
name of its own that the gateway routes to — and the example agent (clients/agent.py) working
through every task of the airline, retail and bank worlds, executing each committed call on the
real world and sending the result back. Per twin: rehearsal off, and parallel and sequential
K = 4 under each commit policy (``select``, ``reflect``, and ``anchored`` when the gateway accepts
it: a probe request with ``commit: "anchored"`` gets 200, not 400), with ``trace: true``.

The twins run with ``--grounding-gain 1``: the gateway's grounding still reaches them (an example
for exactly the same arguments is copied, docs/twin.md), but examples of other calls do not
lift their fidelity, so the fidelity column is the fidelity the gateway faces. At the twin's
default gain (0.5) three examples of a tool lift even fidelity 0 to 0.875 and the sweep no
longer means what it says; ``--grounding-gain 0.5`` runs that world.

Each configuration is one tenant (its own API key), so memory, grounding and trust never mix;
its episodes run one after another in a fixed order (seed, world, task) so what it learns builds
up as in a deployment and a rerun repeats the same outcomes; configurations run concurrently.
Every rehearsed configuration is paired with rehearsal off on the same twin, task and seed.

Every world's tasks where a destructive call is tempting and wrong (``World.tempting_tasks``)
run beside its first ``--tasks``. Each rehearsed configuration runs with the tool risk classes
unknown to the gateway (as before classes existed), given (the worlds' classes as the tenant's
operator patterns, reads imagined: ``reads``), given with reads not imagined (``no-reads``) and
given with ``confirm`` on (``confirm``): a destructive call held for confirmation is put to the
agent's user (``plan_user``: yes when the held call is in the task's plan, else no), whose reply
is the next message; ``--classes`` and ``--policies`` choose fewer.

Per cell (means over seeds unless said): tasks succeeded; real tool errors; committed writes (and
destructive calls) that failed for real; committed destructive calls not in the task's plan (a
wrong cancellation or transfer); repeats of a call that had already failed for real with no call
succeeding since and, in brackets, those committed while another schema-valid candidate that was no
such repeat existed; never-rehearsed commits; schema-invalid commits (``jsonschema``, as the tools
enforce them) and, in brackets, those made while a schema-valid rehearsed candidate existed; turns
committed by a repair; tasks worse / better than off (counted over task × seed pairs); engine calls
per turn (``n/a`` where the gateway does not report them). Then, at fidelity 0.0, engine calls per
turn in the first and last third of each run and the first turn at which the gateway reports low
trust (a tool whose trust policy is ``ignore_vetoes`` or ``off``) — fields a gateway may not
report, printed ``n/a``. Last, per twin, calls per turn of K = 4 and ``auto`` (beyond the acting
call; imagined observations) and the per-tool oracle's (``benchmarks/decision_oracle.py``).

    python -m benchmarks.decisions [--seeds 3] [--seed-offset 0] [--json PATH] [--quick]
        [--policies anchored] [--classes unknown,no-reads] [--fidelities 1.0,0.0] [--skills 0.5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.decision_facts import (  # noqa: E402
    YES,
    CallFacts,
    Config,
    Episode,
    K,
    SchemaCheck,
    TurnFacts,
    Twin,
    plan_user,
)
from benchmarks.decision_oracle import OPTIONS, oracle, split, tally  # noqa: E402
from benchmarks.decision_report import report  # noqa: E402
from benchmarks.gateway_cpu import cpu_seconds  # noqa: E402
from benchmarks.rehearsal import world_request  # noqa: E402
from rehearsal_gateway.clients.agent import Episode as AgentEpisode  # noqa: E402
from rehearsal_gateway.clients.agent import ExampleAgent, ToolLatency  # noqa: E402
from rehearsal_gateway.clients.client import (  # noqa: E402
    AsyncRehearsalClient,
    EngineUnavailable,
    GatewayError,
)
from rehearsal_gateway.server.http.auth import key_digest, tenant_of  # noqa: E402
from rehearsal_gateway.twin.worlds import WORLD_NAMES, World, load_world  # noqa: E402
from tests.support.procs import Proc, cli_argv, free_port, start_http_server  # noqa: E402

NEW_POLICY = "anchored"  # used once the gateway accepts it
PROBE_KEY = "decisions-probe"
# Ten twins, the gateway and fifty agents share two cores, so a twin may take seconds to answer
# a health probe or a connect. With the defaults (2 s, 3 s) the gateway then takes it out of
# rotation and fails requests for a while: true of an overloaded host, not of the decisions this
# benchmark measures, so the gateway is told to wait.
PATIENT = {"RGW_HEALTH_TIMEOUT": "60", "RGW_CONNECT_TIMEOUT": "60"}


@dataclass(frozen=True)
class Grid:
    """What to run: twins (fidelity × skill), worlds, tasks per world, seeds, turn limit."""

    fidelities: tuple[float, ...] = (1.0, 0.8, 0.5, 0.3, 0.0)
    skills: tuple[float, ...] = (0.5, 0.8)
    worlds: tuple[str, ...] = WORLD_NAMES
    tasks: int = 12
    seeds: tuple[int, ...] = (0, 1, 2)
    # 1: the twins' fidelity is what the gateway faces, grounding or not (see the docstring).
    grounding_gain: float = 1.0
    max_turns: int = 6  # the demo's: enough for a plan of 2-3 steps, two slips and the answer
    policies: tuple[str, ...] = ("select", "reflect", "anchored")
    # Tool risk classes given to the gateway per configuration (``Config.classes``).
    classes: tuple[str, ...] = ("unknown", "reads", "no-reads", "confirm")
    tempting: bool = True  # also each world's tasks where a destructive call is tempting
    modes: tuple[str, ...] = ("parallel", "sequential")
    # Trajectories per rehearsed turn ("auto": learned per tool) and imagined steps per trajectory.
    budgets: tuple[int | str, ...] = (K,)
    depths: tuple[int, ...] = (1,)

    def tasks_of(self, world: World) -> tuple[Any, ...]:
        return world.tasks[: self.tasks] + (world.tempting_tasks if self.tempting else ())

    @classmethod
    def quick(cls) -> Grid:
        """A tiny grid for the test that keeps the benchmark running."""
        return cls(
            fidelities=(1.0, 0.0), skills=(0.5,), worlds=("retail",), tasks=3, seeds=(0,),
            classes=("unknown", "no-reads"),
        )  # fmt: skip

    @classmethod
    def compounding(cls, seeds: tuple[int, ...]) -> Grid:
        """The bounded grid of the compounding plot: anchored parallel, K = 1, 2, 4, 8 at depth
        1 and 2, and auto, at four fidelities, two skills, four tasks per world (and the tempting
        ones), the world's risk classes given."""
        return cls(
            fidelities=(1.0, 0.8, 0.5, 0.0), skills=(0.5, 0.8), tasks=4, seeds=seeds,
            policies=("anchored",), classes=("reads",), modes=("parallel",),
            budgets=(1, 2, 4, 8, "auto"), depths=(1, 2),
        )  # fmt: skip

    def shapes(self) -> list[tuple[int | str, int]]:
        """(budget, depth) pairs to run: every budget at every depth, ``auto`` at depth 1 only
        (it learns how many trajectories pay, not how deep)."""
        first = min(self.depths)
        return [(b, d) for d in self.depths for b in self.budgets if b != "auto" or d == first]


class RecordingClient(AsyncRehearsalClient):
    """The client the example agent uses, keeping every completion it returned.

    A request whose connection failed before any HTTP answer (a kept-alive socket the gateway
    closed meanwhile: one in 25,000 requests of a full run on a loaded machine) is sent once
    more, and counted; an HTTP error is never retried.
    """

    def __init__(self, base_url: str, api_key: str) -> None:
        super().__init__(base_url, api_key=api_key, timeout=600.0)
        self.completions: list[Any] = []
        self.retries = 0

    async def create(self, *, rehearsal: Any = None, **kwargs: Any) -> Any:
        try:
            completion = await super().create(rehearsal=rehearsal, **kwargs)
        except EngineUnavailable as exc:
            if exc.status is not None:
                raise
            self.retries += 1
            completion = await super().create(rehearsal=rehearsal, **kwargs)
        self.completions.append(completion)
        return completion


async def play(
    agent: ExampleAgent, task: Any, session_id: str, episode: Any
) -> AgentEpisode | None:
    """Run one task, folding its outcome, or the request the gateway failed, into ``episode``;
    the agent's own record of it (None when the gateway failed a request)."""
    try:
        ran = await agent.run(task, session_id=session_id)
    except GatewayError as exc:
        episode.failed = f"{type(exc).__name__}: {exc}"
        return None
    episode.success = ran.success
    episode.confirmed = sum(reply == YES for _, reply in ran.confirmations)
    episode.declined = len(ran.confirmations) - episode.confirmed
    episode.tool_errors = ran.tool_errors
    episode.real_calls = ran.real_calls
    return ran


@dataclass
class Progress:
    total: int
    done: int = 0
    began: float = field(default_factory=time.perf_counter)

    async def ticker(self, every_s: float) -> None:
        while True:
            await asyncio.sleep(every_s)
            self.show()

    def show(self) -> None:
        elapsed = time.perf_counter() - self.began
        print(f"  … {self.done}/{self.total} episodes, {elapsed:.0f} s", flush=True)


async def _from_trace(client: RecordingClient, facts: TurnFacts, calls: bool) -> TurnFacts:
    """What only the stored trace says: engine calls where the summary lacks them (when
    ``calls``), and the faults of a degraded turn."""
    wanted = (calls and facts.engine_calls is None) or facts.degraded is not None
    if not wanted or facts.rehearsal_id is None:
        return facts
    try:
        trace = await client.trace(facts.rehearsal_id)
    except GatewayError:
        return facts
    faults = tuple(str(f) for f in trace.get("faults") or ())
    counts = trace.get("engine_calls")
    if facts.engine_calls is None and calls and isinstance(counts, dict):
        total = sum(v for v in counts.values() if isinstance(v, int))
        return replace(facts, engine_calls=total, faults=faults)
    return replace(facts, faults=faults)


async def run_config(
    config: Config, url: str, grid: Grid, worlds: list[World], progress: Progress
) -> list[Episode]:
    """Every (seed, world, task) of one configuration, in order, under its own API key."""
    client = RecordingClient(url + "/v1", config.key)
    checks = {world.name: SchemaCheck(world) for world in worlds}
    traced = config.commit is not None and config.twin.fidelity == 0.0  # the trust section
    episodes: list[Episode] = []
    try:
        for seed in grid.seeds:
            for world in worlds:
                agent = ExampleAgent(
                    client, world, model=config.twin.model, rehearsal=config.rehearsal(),
                    latency=ToolLatency(0.0, 0.0), max_turns=grid.max_turns, seed=seed,
                    confirmer=plan_user if config.classes == "confirm" else None,
                )  # fmt: skip
                for task in grid.tasks_of(world):
                    episode = Episode(seed, world.name, task.id)
                    client.completions.clear()
                    retried = client.retries
                    ran = await play(agent, task, f"{config.key}-{seed}-{task.id}", episode)
                    for completion in client.completions:
                        facts = TurnFacts.read(checks[world.name], completion)
                        episode.turns.append(await _from_trace(client, facts, traced))
                    if ran is not None:
                        options = CallFacts.options_per_call(episode.turns)
                        episode.calls = CallFacts.judge(world, task, ran.calls, options)
                        failed = Counter(name for name, _, bad in ran.calls if bad)
                        episode.errors_by_tool = dict(failed)
                    episode.retries = client.retries - retried
                    episodes.append(episode)
                    progress.done += 1
    finally:
        await client.close()
    return episodes


async def run_all(
    configs: list[Config], url: str, grid: Grid, worlds: list[World]
) -> dict[Config, list[Episode]]:
    tasks = sum(len(grid.tasks_of(world)) for world in worlds)
    progress = Progress(total=len(configs) * len(grid.seeds) * tasks)
    ticker = asyncio.create_task(progress.ticker(15.0))
    try:
        runs = await asyncio.gather(*(run_config(c, url, grid, worlds, progress) for c in configs))
    finally:
        ticker.cancel()
    progress.show()
    return dict(zip(configs, runs, strict=True))


def start_twins(twins: list[Twin], gain: float, workdir: Path, started: dict[Twin, Proc]) -> None:
    """One zero-latency twin per fidelity × skill, started side by side into ``started`` (which
    holds every one that came up, for the caller to stop, even when another failed)."""

    def start(twin: Twin) -> Proc:
        port = free_port()
        argv = cli_argv(
            "twin", "--port", str(port), "--world", "auto", "--latency", "zero", "--seed", "1",
            "--skill", str(twin.skill), "--fidelity", str(twin.fidelity),
            "--served-model-name", twin.model, "--grounding-gain", str(gain),
        )  # fmt: skip
        return start_http_server(argv, port=port, log_path=workdir / f"{twin.model}.log")

    with ThreadPoolExecutor(max_workers=len(twins)) as pool:
        futures = {twin: pool.submit(start, twin) for twin in twins}
    failures = [f.exception() for f in futures.values() if f.exception() is not None]
    started.update({twin: f.result() for twin, f in futures.items() if f.exception() is None})
    if failures:
        raise RuntimeError(f"{len(failures)} twin(s) did not start") from failures[0]


def risk_overrides(configs: list[Config], worlds: list[World]) -> dict[str, Any]:
    """``RGW_RISK_OVERRIDES`` giving each configuration's tenant its classes (none: unknown)."""
    patterns = {name: risk for world in worlds for name, risk in world.risk_classes().items()}
    return {
        tenant_of(key_digest(c.key)): {
            "patterns": patterns,
            "imagine_reads": c.classes != "no-reads",
        }
        for c in configs
        if c.classes != "unknown"
    }


def start_gateway(
    twins: dict[Twin, Proc], keys: list[str], workdir: Path, overrides: dict[str, Any]
) -> Proc:
    """The gateway, one engine per twin (routed by model name), one API key per tenant."""
    port = free_port()
    engines: list[str] = []
    for i, (twin, proc) in enumerate(twins.items()):
        engines += ["--engine", f"{proc.url}/v1,name=twin{i},model={twin.model}"]
    return start_http_server(
        cli_argv("serve", "--port", str(port), "--log-level", "warning", *engines),
        port=port,
        log_path=workdir / "gateway.log",
        ready_path="/ready",
        env={
            "RGW_API_KEYS": ",".join(keys),
            "RGW_RISK_OVERRIDES": json.dumps(overrides),
            **PATIENT,
        },
    )


def accepts_policy(url: str, twin: Twin, policy: str) -> bool:
    """Whether the gateway takes ``commit: policy`` (200) or refuses it (400)."""
    world = load_world("retail")
    body = world_request(world, 0, 0, {"mode": "parallel", "budget": 1, "commit": policy})
    body["model"] = twin.model
    answer = httpx.post(
        url + "/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {PROBE_KEY}"},
        timeout=60,
    )
    if answer.status_code not in (200, 400):
        raise RuntimeError(f"probe for commit={policy}: HTTP {answer.status_code} {answer.text}")
    return answer.status_code == 200


def configurations(grid: Grid, policies: tuple[str, ...]) -> list[Config]:
    configs: list[Config] = []
    for fidelity in grid.fidelities:
        for skill in grid.skills:
            twin = Twin(fidelity, skill)
            configs.append(Config(twin, "off"))
            configs += [
                Config(twin, m, p, classes, budget, depth)
                for m in grid.modes
                for p in policies
                for classes in grid.classes
                for budget, depth in grid.shapes()
                if budget != "auto" or p == NEW_POLICY  # auto is the anchored rule's
            ]
    return configs


def _grid(args: argparse.Namespace) -> Grid:
    seeds = tuple(range(args.seed_offset, args.seed_offset + args.seeds))
    grid = Grid.quick() if args.quick else Grid(seeds=seeds)
    grid = Grid.compounding(seeds) if args.compounding else grid
    changes: dict[str, Any] = {}
    for name in ("fidelities", "skills"):
        if getattr(args, name):
            changes[name] = tuple(float(v) for v in getattr(args, name).split(","))
    if args.worlds:
        changes["worlds"] = tuple(w.strip() for w in args.worlds.split(","))
    if args.tasks:
        changes["tasks"] = args.tasks
    if args.max_turns:
        changes["max_turns"] = args.max_turns
    if args.grounding_gain is not None:
        changes["grounding_gain"] = args.grounding_gain
    for name in ("policies", "classes", "modes"):
        if getattr(args, name):
            changes[name] = tuple(v.strip() for v in getattr(args, name).split(","))
    if args.budgets:
        changes["budgets"] = tuple(
            v.strip() if v.strip() == "auto" else int(v) for v in args.budgets.split(",")
        )
    if args.depths:
        changes["depths"] = tuple(int(v) for v in args.depths.split(","))
    return replace(grid, **changes)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds per task (paired across runs)")
    parser.add_argument(
        "--seed-offset", type=int, default=0,
        help="first seed (seeds OFFSET..OFFSET+SEEDS-1): check a change on seeds not studied",
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="a tiny grid (the test uses it)")
    parser.add_argument("--json", metavar="PATH", help="also write every figure as JSON")
    parser.add_argument("--fidelities", help="comma-separated, instead of the full sweep")
    parser.add_argument("--skills", help="comma-separated, instead of 0.5,0.8")
    parser.add_argument("--worlds", help="comma-separated, instead of all three")
    parser.add_argument("--tasks", type=int, help="tasks per world, instead of all 12")
    parser.add_argument("--max-turns", type=int, help="the agent's turn limit, instead of 6")
    parser.add_argument(
        "--grounding-gain", type=float, help="the twins' --grounding-gain, instead of 1"
    )
    parser.add_argument("--policies", help="commit policies, instead of select,reflect,anchored")
    parser.add_argument(
        "--classes",
        help="risk classes given to the gateway: unknown,reads,no-reads,confirm (default all)",
    )
    parser.add_argument("--modes", help="rehearsal modes, instead of parallel,sequential")
    parser.add_argument("--budgets", help="comma-separated K (integers or auto), instead of 4")
    parser.add_argument("--depths", help="comma-separated depths, instead of 1")
    parser.add_argument(
        "--compounding", action="store_true",
        help="the compounding grid (Grid.compounding); the other flags narrow it",
    )  # fmt: skip
    return parser


@dataclass
class Run:
    """What one run of the grid produced, and what it cost."""

    results: dict[Config, list[Episode]]
    policies: tuple[str, ...]
    anchored: bool
    episodes_s: float
    cpu_s: dict[str, float]
    trust: dict[str, Any] = field(default_factory=dict)  # config -> its tenant's trust table


def run_grid(grid: Grid, workdir: Path) -> Run:
    """Start the twins and the gateway, run every configuration, stop them all."""
    worlds = [load_world(name) for name in grid.worlds]
    twins = [Twin(f, s) for f in grid.fidelities for s in grid.skills]
    every = configurations(grid, grid.policies)
    keys = [PROBE_KEY, *(c.key for c in every)]
    procs: dict[Twin, Proc] = {}
    gateway: Proc | None = None
    try:
        start_twins(twins, grid.grounding_gain, workdir, procs)
        gateway = start_gateway(procs, keys, workdir, risk_overrides(every, worlds))
        anchored = NEW_POLICY in grid.policies and accepts_policy(gateway.url, twins[0], NEW_POLICY)
        policies = tuple(p for p in grid.policies if p != NEW_POLICY or anchored)
        configs = configurations(grid, policies)
        tasks = sum(len(grid.tasks_of(world)) for world in worlds)
        print(f"{len(twins)} twins (SIMULATIONS of vLLM + EnvACE, latency zero, grounding "
              f"gain {grid.grounding_gain}), one gateway; {len(configs)} configurations × "
              f"{len(grid.seeds)} seeds × {tasks} tasks; commit policies: "
              f"{', '.join(policies)}"
              + ("" if anchored else f" ('{NEW_POLICY}' refused: not on this gateway yet)"),
              flush=True)  # fmt: skip
        started = time.perf_counter()
        results = asyncio.run(run_all(configs, gateway.url, grid, worlds))
        episodes_s = time.perf_counter() - started
        trust = {c.key: trust_table(gateway.url, c.key) for c in configs if c.commit}
        cpu = {
            "gateway": cpu_seconds(gateway.popen.pid),
            "twins": sum(cpu_seconds(p.popen.pid) for p in procs.values()),
            "benchmark": time.process_time(),
        }
    finally:
        for proc in [*([gateway] if gateway else []), *procs.values()]:
            proc.stop()
    return Run(results, policies, anchored, episodes_s, cpu, trust)


def trust_table(url: str, key: str) -> list[dict[str, Any]]:
    """A tenant's rows of ``GET /v1/rehearsals/trust`` at the end of its run (for the JSON),
    each with its tool's learned budget row (``budget``) where the gateway reports one."""
    answer = httpx.get(url + "/v1/rehearsals/trust", headers={"Authorization": f"Bearer {key}"})
    answer.raise_for_status()
    learned = {r["tool"]: r for r in (answer.json().get("budget") or {}).get("data", [])}
    rows: list[dict[str, Any]] = answer.json()["data"]
    return [{**row, "budget": learned.get(row["tool"])} for row in rows]


def spending(results: dict[Config, list[Any]]) -> list[dict[str, Any]]:
    """Per twin: calls per turn of K = 4 and auto (all, beyond the acting call, imagination)
    and the per-tool oracle's (``decision_oracle``); printed, and returned for the JSON."""
    rows = []
    for twin in sorted({c.twin for c in results}, key=lambda t: (-t.fidelity, t.skill)):
        mine = {c: eps for c, eps in results.items() if c.twin == twin and c.depth == 1}
        by_option = {0 if c.commit is None else c.budget: tally(eps) for c, eps in mine.items()}
        options = {k: v for k, v in by_option.items() if k in OPTIONS}
        found = {"fidelity": twin.fidelity, "skill": twin.skill, "oracle": oracle(options),
                 "tallies": {str(k): rows for k, rows in by_option.items()}}  # fmt: skip
        for name in (4, "auto"):
            if name in by_option:
                found[f"K={name}"] = split(by_option[name])
        rows.append(found)
    print(
        "\nCalls per turn (beyond the acting call; of those imagined observations) and the "
        "per-tool oracle removing K = 4's errors"
    )
    print("\n| fidelity | skill | K = 4 | auto | oracle | oracle / K = 4 (beyond acting) |")
    print("|---:|---:|---|---|---|---:|")

    def show(s: dict[str, float] | None) -> str:
        return (
            "n/a"
            if s is None
            else f"{s['per_turn']:.2f} ({s['extra']:.2f}; "
            + (f"{s['imagination']:.2f})" if "imagination" in s else f"{s['removed']} removed)")
        )

    for r in rows:
        o = r["oracle"]
        ratio = "n/a" if o is None else f"{o['of_k4']:.0%} ({_pct(o['extra_of_k4'])})"
        print(f"| {r['fidelity']:.1f} | {r['skill']:.1f} | {show(r.get('K=4'))} "
              f"| {show(r.get('K=auto'))} | {show(o)} | {ratio} |")  # fmt: skip
    return rows


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    grid = _grid(args)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rgw-decisions-") as tmp:
        run = run_grid(grid, Path(tmp))
    document = report(run.results, grid_seeds=len(grid.seeds), run_s=run.episodes_s)
    document["grid"] = {
        "fidelities": grid.fidelities, "skills": grid.skills, "worlds": grid.worlds,
        "tasks_per_world": grid.tasks, "seeds": grid.seeds, "max_turns": grid.max_turns,
        "budget": K, "budgets": grid.budgets, "depths": grid.depths, "modes": grid.modes,
        "policies": run.policies, "anchored_available": run.anchored,
        "grounding_gain": grid.grounding_gain, "classes": grid.classes, "tempting": grid.tempting,
    }  # fmt: skip
    document["trust_tables"] = run.trust
    document["oracle"] = spending(run.results)
    document["wall_s"] = round(time.perf_counter() - began, 1)
    document["cpu_s"] = {name: round(value, 1) for name, value in run.cpu_s.items()}
    print(f"\nwall time {document['wall_s']} s (episodes {run.episodes_s:.0f} s); CPU seconds: "
          + ", ".join(f"{name} {value:.0f}" for name, value in run.cpu_s.items()))  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(document, indent=1) + "\n")
    return 1 if document["failed_requests"] else 0


if __name__ == "__main__":
    sys.exit(main())
