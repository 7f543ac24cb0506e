"""One τ² conversation: the agent through the gateway, a simulated user, the task's environment.

This is the loop of τ²'s ``Orchestrator`` with its ``LLMAgent`` and ``UserSimulator``, whose
modules import LiteLLM and so are repeated here, with the same prompts and rules:

- the agent's system prompt is τ²'s (``<instructions>`` and the domain ``<policy>``); the agent
  opens with τ²'s greeting, then the user speaks;
- the user is a model prompted with τ²'s simulation guidelines (the tool variant when the domain
  gives the user tools, as telecom's phone) and the task's ``<scenario>``, seeing the
  conversation with the roles flipped; ``###STOP###``, ``###TRANSFER###`` or
  ``###OUT-OF-SCOPE###`` in a user message ends the conversation;
- an agent message with tool calls goes to the environment (its text is kept but not shown to
  the user); each result goes back under the call's id; a message without calls goes to the user;
- ``max_steps`` messages (a batch of tool results counts one) or ``max_errors`` failed tool calls
  end the conversation, which τ² then scores 0;
- in solo mode (telecom) there is no user: the system prompt carries the task's ticket, every
  request says ``tool_choice: "required"``, and a call of the ``done`` tool ends the conversation.

Where the package's run would fail a sample (a message with neither text nor calls, arguments
that are not a JSON object), the conversation ends as τ²'s ``agent_error`` (or ``user_error``)
and scores 0, as τ² scores a failed sample.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any

from ..agent import assistant_message
from ..client import AsyncRehearsalClient, InvalidRequest, Rehearsal
from .episode import (
    Cell,
    Episode,
    Recorder,
    Sampling,
    Verdict,
    request_seed,
)

# τ²'s prompts (tau2/agent/llm_agent.py, tau2/user/user_simulator.py, tau2/orchestrator), verbatim.
AGENT_INSTRUCTION = """
You are a customer service agent that helps the user according to the <policy> provided below.
In each turn you can either:
- Send a message to the user.
- Make a tool call.
You cannot do both at the same time.

Try to be helpful and always follow the policy. Always make sure you generate valid JSON only.
""".strip()
SYSTEM_PROMPT = (
    "<instructions>\n{agent_instruction}\n</instructions>\n<policy>\n{domain_policy}\n</policy>"
)
SOLO_INSTRUCTION = """
You are a customer service agent that helps the user according to the <policy> provided below.
You will be provided with a ticket that contains the user's request.
You will need to plan and call the appropriate tools to solve the ticket.

You cannot communicate with the user, only make tool calls.
Stop when you consider that you have solved the ticket.
To do so, send a message containing a single tool call to the `done` tool. Do not include any other tool calls in this last message.

Always follow the policy. Always make sure you generate valid JSON only.
""".strip()  # noqa: E501 (verbatim)
SOLO_PROMPT = (
    "<instructions>\n{agent_instruction}\n</instructions>\n<policy>\n{domain_policy}\n</policy>\n"
    "<ticket>\n{ticket}\n</ticket>"
)
USER_PROMPT = "{global_user_sim_guidelines}\n\n<scenario>\n{instructions}\n</scenario>"
GREETING = "Hi! How can I help you today?"
STOP, TRANSFER, OUT_OF_SCOPE = "###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###"
USER_TEMPERATURE = 0.0  # τ²'s DEFAULT_LLM_TEMPERATURE_USER
TIMEOUT_S = 600.0
USER_SEEDS = 5_000  # the user's request seeds start here, clear of the agent's


@dataclass(frozen=True, slots=True)
class UserEndpoint:
    """Where the simulated user's turns come from.

    ``url`` is any OpenAI-compatible server; without one the user is the agent's own gateway and
    model, asked with rehearsal off (the simulated user has no tools to rehearse).
    """

    url: str | None = None
    model: str | None = None
    api_key: str | None = None
    temperature: float = USER_TEMPERATURE

    def manifest(self) -> dict[str, Any]:
        fields = asdict(self)
        fields.pop("api_key")
        return fields


def user_prompt(tau2: Any, scenario: str, with_tools: bool) -> str:
    """τ²'s user-simulator system prompt, its guidelines read from the package's data."""
    name = "simulation_guidelines_tools.md" if with_tools else "simulation_guidelines.md"
    guidelines = (tau2.utils.DATA_DIR / "tau2" / "user_simulator" / name).read_text()
    return USER_PROMPT.format(global_user_sim_guidelines=guidelines, instructions=scenario)


def _parsed(calls: list[Any]) -> list[tuple[str, str, dict[str, Any]]] | None:
    """(id, name, arguments) per call, or ``None`` when some arguments are not a JSON object."""
    parsed = []
    for call in calls:
        try:
            arguments = json.loads(call.function.arguments or "{}")
        except ValueError:
            return None
        if not isinstance(arguments, dict):
            return None
        parsed.append((call.id, call.function.name, arguments))
    return parsed


class Conversation:
    """The state of one conversation: both views of it, the step and error counts."""

    def __init__(self, task: Any, episode: Episode, recorder: Recorder, *, max_steps: int,
                 max_errors: int) -> None:  # fmt: skip
        self.task = task
        self.episode = episode
        self.recorder = recorder
        self.max_steps = max_steps
        self.max_errors = max_errors
        self.steps = 0
        self.errors = 0
        self.ended: str | None = None
        self.agent_view: list[dict[str, Any]] = []
        self.user_view: list[dict[str, Any]] = []

    def passed(self, *, errors: int = 0, to_environment: bool = False) -> None:
        """One message (or batch of results) passed on, and τ²'s limits checked as it checks
        them: after every step that does not go to the environment, over a stop if need be."""
        self.steps += 1
        self.errors += errors
        if to_environment:
            return
        if self.steps >= self.max_steps:
            self.ended = "max_steps"
        if self.errors >= self.max_errors:
            self.ended = "too_many_errors"

    def log(self, entry: dict[str, Any]) -> None:
        """The episode's trajectory: one list per user message, the agent's steps after it."""
        if "user" in entry or not self.episode.trajectory:
            self.episode.trajectory.append([])
        self.episode.trajectory[-1].append(entry)

    async def agent(self, client: AsyncRehearsalClient, sampling: Sampling, knobs: Rehearsal,
                    session: str, *, solo: bool, first: bool = False) -> bool:  # fmt: skip
        """One agent message; ``True`` when it went to the user (else the agent goes on)."""
        asked = time.perf_counter()
        completion = await client.create(
            model=sampling.model, messages=self.agent_view, tools=self.task.tools,
            temperature=sampling.temperature, top_p=sampling.top_p,
            seed=request_seed(self.episode.seed, self.task.id, self.episode.requests),
            rehearsal=knobs, extra_headers={"X-Session-Id": session},
            **({"tool_choice": "required"} if solo else {}),
        )  # fmt: skip
        await self.recorder.answer(completion, (time.perf_counter() - asked) * 1000)
        message = completion.choices[0].message
        self.agent_view.append(assistant_message(message))
        text = message.content or ""
        calls = list(message.tool_calls or [])
        if calls:
            self.log({"calls": [[c.function.name, c.function.arguments] for c in calls]})
        else:
            self.log({"text": text})
        if solo and any(call.function.name == "done" for call in calls):
            self.task.say("assistant", STOP)  # LLMSoloAgent turns the done call into the stop
            self.ended = "agent_stop"
            return False
        parsed = _parsed(calls)
        if parsed is None or not (calls or text.strip()):
            self.ended = "agent_error"  # arguments that are no object, or an empty message
            return False
        if not calls:
            self.task.say("assistant", text)
            if solo:  # no user to talk to: a stop, or τ²'s agent error
                self.ended = "agent_stop" if STOP in text else "agent_error"
                return False
            self.user_view.append({"role": "user", "content": text})
            self.passed()
            return True
        if not first:  # the solo agent's opening message is no step in τ²'s count
            self.passed(to_environment=True)
        results = self.task.act("assistant", parsed, text)
        for call, (content, failed) in zip(calls, results, strict=True):
            self.recorder.real_error[call.id] = failed
            self.episode.calls += 1
            self.episode.tool_errors += int(failed)
            self.agent_view.append({"role": "tool", "tool_call_id": call.id, "content": content})
        self.passed(errors=sum(failed for _, failed in results))
        return False

    async def user(self, client: AsyncRehearsalClient, model: str, knobs: Rehearsal | None,
                   prompt: str, seed: int, temperature: float) -> bool:  # fmt: skip
        """One user message; ``True`` when it went to the agent (text that does not stop)."""
        completion = await client.create(
            model=model, messages=[{"role": "system", "content": prompt}, *self.user_view],
            temperature=temperature, seed=seed, rehearsal=knobs,
            **({"tools": self.task.user_tools} if self.task.user_tools else {}),
        )  # fmt: skip
        message = completion.choices[0].message
        text = message.content or ""
        calls = list(message.tool_calls or [])
        self.user_view.append(assistant_message(message))
        parsed = _parsed(calls)
        if parsed is None or not (calls or text.strip()):
            self.log(
                {"user": text, "calls": [[c.function.name, c.function.arguments] for c in calls]}
            )
            self.ended = "user_error"
            return False
        if calls:  # on the user's own phone: the results go back to the user alone
            self.log({"user_calls": [[c.function.name, c.function.arguments] for c in calls]})
            self.passed(to_environment=True)
            results = self.task.act("user", parsed, text)
            for call, (content, _) in zip(calls, results, strict=True):
                self.user_view.append({"role": "tool", "tool_call_id": call.id, "content": content})
            self.passed(errors=sum(failed for _, failed in results))
            return False
        self.episode.user_turns += 1
        self.log({"user": text})
        self.task.say("user", text)
        if any(token in text for token in (STOP, TRANSFER, OUT_OF_SCOPE)):
            self.ended = "user_stop"
        self.passed()
        if self.ended is not None:
            return False
        self.agent_view.append({"role": "user", "content": text})
        return True


async def play_conversation(
    client: AsyncRehearsalClient, task: Any, episode: Episode, cell: Cell, sampling: Sampling, *,
    user: UserEndpoint, session: str, max_steps: int, max_errors: int,
) -> Episode:  # fmt: skip
    """Play ``task`` to its end and score it with τ²'s evaluators."""
    recorder = Recorder(episode, client)
    knobs = cell.rehearsal(sampling.commit, sampling.depth)
    chat = Conversation(task, episode, recorder, max_steps=max_steps, max_errors=max_errors)
    started = time.perf_counter()
    own = user.url is not None  # a user endpoint of its own, else the agent's gateway
    user_client = client
    if user.url is not None:
        user_client = AsyncRehearsalClient(user.url, user.api_key, TIMEOUT_S)
    user_knobs = None if own else Rehearsal(mode="off")
    user_model = user.model or sampling.model
    try:
        if task.solo:
            prompt = SOLO_PROMPT.format(agent_instruction=SOLO_INSTRUCTION,
                                        domain_policy=task.policy, ticket=task.ticket)  # fmt: skip
            chat.agent_view.append({"role": "system", "content": prompt})
            await chat.agent(client, sampling, knobs, session, solo=True, first=True)
            while chat.ended is None:
                await chat.agent(client, sampling, knobs, session, solo=True)
        else:
            system = SYSTEM_PROMPT.format(agent_instruction=AGENT_INSTRUCTION,
                                          domain_policy=task.policy)  # fmt: skip
            chat.agent_view += [{"role": "system", "content": system},
                                {"role": "assistant", "content": GREETING}]  # fmt: skip
            chat.user_view.append({"role": "user", "content": GREETING})
            task.say("assistant", GREETING)
            prompt = user_prompt(task.tau2, task.scenario, bool(task.user_tools))
            to_agent = False
            while chat.ended is None:
                if to_agent:
                    to_agent = not await chat.agent(client, sampling, knobs, session, solo=False)
                else:
                    seed = request_seed(episode.seed, task.id, USER_SEEDS + chat.steps)
                    to_agent = await chat.user(user_client, user_model, user_knobs, prompt, seed,
                                               user.temperature)  # fmt: skip
    except InvalidRequest as exc:
        episode.request_error = f"{exc.status} {exc.param or ''}: {exc.message}"[:500]
    finally:
        if own:
            await user_client.close()
    recorder.close()
    episode.wall_s = round(time.perf_counter() - started, 3)
    if episode.request_error is None:
        verdict = task.score(chat.ended or "agent_error")
    else:
        verdict = Verdict(False, "gateway:invalid_request", episode.request_error)
    episode.force_quit = chat.ended in ("max_steps", "too_many_errors")
    episode.success = verdict.valid
    episode.verdict = {k: v for k, v in asdict(verdict).items() if v is not None}
    return episode
