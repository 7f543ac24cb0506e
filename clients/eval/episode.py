"""One task worked through the gateway: the agent loop every evaluation suite shares.

A suite hands over a ``TaskRun``: the user turns of one task (messages and the tools offered
then), an ``execute`` that runs committed calls for real in the task's own environment, and a
``score`` that judges the whole trajectory with the suite's checker. The loop here is the one
BFCL's function-calling handler runs (``inference_multi_turn_FC``): per user turn, ask, append the
committed turn as returned, execute its calls and answer every id with a ``tool`` message, until
the model answers in text or its calls cannot be decoded; more than ``step_limit`` executed steps
in one user turn force-quits the task. Around that it records what the gateway reports: usage,
the rehearsal summary, the stored trace (engine calls, vetoes by kind) and the fidelity feedback.
"""

from __future__ import annotations

import time
import zlib
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from .. import vetoes
from ..agent import assistant_message
from ..client import (
    AsyncRehearsalClient,
    GatewayError,
    InvalidRequest,
    Rehearsal,
    summary,
)

Call = tuple[str, str]  # (tool name, arguments as the JSON text the model wrote)
Trajectory = list[list[dict[str, Any]]]  # per user turn, per step: {"calls": [...]} | {"text": s}
_IMAGINED_BAD = ("veto", "error", "unparsed")
TOKEN_KINDS = ("prompt", "cached", "completion")


@dataclass(frozen=True, slots=True)
class UserTurn:
    """What the user says at the start of one turn, and the tools on offer from then on."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Verdict:
    """The suite checker's judgement of one trajectory."""

    valid: bool
    error_type: str | None = None
    error_message: str | None = None


class TaskRun(Protocol):
    """One task's environment while the agent works on it."""

    id: str

    def turns(self) -> Iterator[UserTurn]: ...

    def execute(self, calls: Sequence[Call]) -> list[str] | None:
        """Run the calls for real: one result per call, or ``None`` when they cannot be decoded."""
        ...

    def is_error(self, result: str) -> bool: ...

    def score(self, trajectory: Trajectory, force_quit: bool) -> Verdict: ...

    def release(self) -> None:
        """Let go of the environment once the episode is over (scored or not)."""
        ...


@dataclass(frozen=True, slots=True)
class Cell:
    """One configuration of the grid: a rehearsal mode and its budget (0 for ``off``)."""

    mode: str
    budget: int = 0

    @property
    def name(self) -> str:
        return "off" if self.mode == "off" else f"{self.mode}-{self.budget}"

    def rehearsal(self, commit: str | None, depth: int | None) -> Rehearsal:
        if self.mode == "off":
            return Rehearsal(mode="off")
        return Rehearsal(mode=self.mode, budget=self.budget, commit=commit, depth=depth)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Sampling:
    """How every acting request samples (EnvACE's evaluation defaults)."""

    model: str
    temperature: float = 0.6
    top_p: float = 0.95
    commit: str | None = None
    depth: int | None = None


@dataclass
class Episode:
    """Everything one (cell, seed, task) produced; one JSON line in the run's episode log."""

    task: str
    cell: str
    mode: str
    budget: int
    seed: int
    attempt: str
    success: bool = False
    verdict: dict[str, Any] = field(default_factory=dict)
    request_error: str | None = None
    force_quit: bool = False
    user_turns: int = 0
    requests: int = 0
    calls: int = 0
    tool_errors: int = 0
    vetoes: dict[str, int] = field(default_factory=dict)
    outcome_agree: int = 0
    outcome_checked: int = 0
    structural: list[float] = field(default_factory=list)
    engine_calls: int = 0
    traces_missing: int = 0
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOKEN_KINDS, 0))
    latency_ms: list[float] = field(default_factory=list)
    degraded: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    trajectory: Trajectory = field(default_factory=list)

    @property
    def key(self) -> tuple[str, int, str]:
        return (self.cell, self.seed, self.task)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Episode:
        return cls(**data)


class Recorder:
    """Folds the gateway's answers for one episode into its ``Episode``."""

    def __init__(self, episode: Episode, client: AsyncRehearsalClient) -> None:
        self.episode = episode
        self.client = client
        self.real_error: dict[str, bool] = {}
        self.vetoes: Counter[str] = Counter()
        self.degraded: Counter[str] = Counter()

    async def answer(self, completion: Any, latency_ms: float) -> None:
        episode = self.episode
        episode.requests += 1
        episode.latency_ms.append(round(latency_ms, 3))
        usage = completion.usage
        if usage is not None:
            details = usage.prompt_tokens_details
            episode.tokens["prompt"] += usage.prompt_tokens
            episode.tokens["completion"] += usage.completion_tokens
            episode.tokens["cached"] += (details.cached_tokens or 0) if details else 0
        rehearsed = summary(completion)
        if rehearsed is None:
            episode.engine_calls += 1  # passed through: one acting call
            return
        if rehearsed.degraded is not None:
            self.degraded[rehearsed.degraded] += 1
        for item in (rehearsed.model_extra or {}).get("feedback") or []:
            self._feedback(item)
        try:
            trace = await self.client.trace(rehearsed.id)
        except GatewayError:
            episode.traces_missing += 1
            self.vetoes.update(vetoes.from_summary(rehearsed))
            return
        episode.engine_calls += sum(int(n) for n in (trace.get("engine_calls") or {}).values())
        self.vetoes.update(vetoes.from_trace(trace))

    def _feedback(self, item: Any) -> None:
        """One fed-back real result: did imagination predict its outcome, and how closely."""
        if not isinstance(item, dict) or item.get("imagined_outcome") is None:
            return
        real_error = self.real_error.get(str(item.get("tool_call_id")))
        if real_error is None:
            return
        imagined_bad = str(item["imagined_outcome"]).split(":", 1)[0] in _IMAGINED_BAD
        self.episode.outcome_checked += 1
        self.episode.outcome_agree += int(imagined_bad == real_error)
        if isinstance(item.get("fidelity"), int | float):
            self.episode.structural.append(float(item["fidelity"]))

    def close(self) -> None:
        self.episode.vetoes = dict(self.vetoes)
        self.episode.degraded = dict(self.degraded)


def request_seed(seed: int, task_id: str, index: int) -> int:
    """One seed per task and request: reruns repeat, and requests' K choices do not overlap."""
    return seed * 10_000_000 + zlib.crc32(task_id.encode()) % 10_000 * 1000 + index * 64


async def run_episode(
    client: AsyncRehearsalClient,
    task: TaskRun,
    episode: Episode,
    cell: Cell,
    sampling: Sampling,
    *,
    step_limit: int,
    session: str,
) -> Episode:
    """Work through ``task``'s user turns; score the trajectory with the suite's checker."""
    recorder = Recorder(episode, client)
    knobs = cell.rehearsal(sampling.commit, sampling.depth)
    messages: list[dict[str, Any]] = []
    started = time.perf_counter()
    try:
        for turn in task.turns():
            episode.user_turns += 1
            messages.extend(turn.messages)
            steps: list[dict[str, Any]] = []
            episode.trajectory.append(steps)
            executed = 0
            while True:
                asked = time.perf_counter()
                completion = await client.create(
                    model=sampling.model,
                    messages=messages,
                    tools=turn.tools,
                    temperature=sampling.temperature,
                    top_p=sampling.top_p,
                    seed=request_seed(episode.seed, task.id, episode.requests),
                    rehearsal=knobs,
                    extra_headers={"X-Session-Id": session},
                )
                await recorder.answer(completion, (time.perf_counter() - asked) * 1000)
                message = completion.choices[0].message
                messages.append(assistant_message(message))
                tool_calls = list(message.tool_calls or [])
                calls = [(c.function.name, c.function.arguments) for c in tool_calls]
                steps.append(
                    {"calls": [list(c) for c in calls]}
                    if calls
                    else {"text": message.content or ""}
                )
                results = task.execute(calls) if calls else None
                if results is None:
                    break
                for tool_call, result in zip(tool_calls, results, strict=True):
                    failed = task.is_error(result)
                    recorder.real_error[tool_call.id] = failed
                    episode.calls += 1
                    episode.tool_errors += int(failed)
                    messages.append(
                        {"role": "tool", "tool_call_id": tool_call.id, "content": result}
                    )
                executed += 1
                if executed > step_limit:
                    episode.force_quit = True
                    break
            if episode.force_quit:
                break
    except InvalidRequest as exc:
        # This task's request is one the gateway refuses: a failed task with the reason, not a
        # failed run (an unreachable gateway or a 5xx is raised on and stops the run instead).
        episode.request_error = f"{exc.status} {exc.param or ''}: {exc.message}"[:500]
    recorder.close()
    episode.wall_s = round(time.perf_counter() - started, 3)
    if episode.request_error is None:
        verdict = task.score(episode.trajectory, episode.force_quit)
    else:
        verdict = Verdict(False, "gateway:invalid_request", episode.request_error)
    episode.success = verdict.valid
    episode.verdict = {k: v for k, v in asdict(verdict).items() if v is not None}
    return episode


class ScriptedTurns:
    """A suite whose tasks script their user turns (BFCL, the worlds): played by ``run_episode``."""

    step_limit: int

    async def play(
        self, client: AsyncRehearsalClient, task: TaskRun, episode: Episode, cell: Cell,
        sampling: Sampling, *, session: str,
    ) -> Episode:  # fmt: skip
        return await run_episode(
            client, task, episode, cell, sampling, step_limit=self.step_limit, session=session
        )
