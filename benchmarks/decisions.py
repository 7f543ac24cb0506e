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
call; imagined observations), the per-tool oracle's and the per-turn bound's
(``benchmarks/decision_oracle.py``).

    python -m benchmarks.decisions [--seeds 3] [--seed-offset 0] [--json PATH] [--quick]
        [--policies anchored] [--classes unknown,no-reads] [--fidelities 1.0,0.0] [--skills 0.5]
"""

from __future__ import annotations

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
from benchmarks.decision_grid import (  # noqa: E402
    NEW_POLICY,
    Grid,
    configurations,
    grid_of,
    parser,
)
from benchmarks.decision_oracle import spending  # noqa: E402
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
from rehearsal_gateway.twin.worlds import World, load_world  # noqa: E402
from tests.support.procs import Proc, cli_argv, free_port, start_http_server  # noqa: E402

PROBE_KEY = "decisions-probe"
# Ten twins, the gateway and fifty agents share two cores, so a twin may take seconds to answer
# a health probe or a connect. With the defaults (2 s, 3 s) the gateway then takes it out of
# rotation and fails requests for a while: true of an overloaded host, not of the decisions this
# benchmark measures, so the gateway is told to wait.
PATIENT = {"RGW_HEALTH_TIMEOUT": "60", "RGW_CONNECT_TIMEOUT": "60"}


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


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    grid = grid_of(args)
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
