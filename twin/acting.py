"""The acting role: the twin's policy picks the next action of a conversation with tools.

In a world conversation (tools of one world, first user message naming one of its tasks) the
policy finds the next step of the task's reference plan and takes it with probability ``skill``,
otherwise one of the world's planted mistakes; it answers in text when the plan is done. Actions a
rehearsal-memory note marks as to-be-avoided are skipped. Any other conversation is planned from
the user's own words (``twin/intent.py``): the ids, e-mail addresses and names in the last user
message choose the tool and fill its arguments ("Where is order W1001?" is ``get_order`` of
``W1001``), a read of the object going first when the action writes. A sentence that names
nothing gets a schema-valid call of an offered tool, then an answer once a tool result is in.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from .intent import Intent
from .memory_note import MemoryNote
from .prompt import message_text
from .schema import JsonObject, mistake_for, synthesise
from .turn import Draft
from .worlds import World, world_for_tools
from .worlds.base import Call, Task

_OPENERS = (
    "Let me work out the next step.",
    "Okay, the user needs help here.",
    "I should handle this carefully.",
    "Let me think about what is needed.",
    "First, what does the request need?",
    "Right, looking at the conversation so far.",
)

# A text answer is sampled like the thinking is: the seed (and the choice) picks its wording.
_GREETINGS = (
    "Happy to help.",
    "Hello there!",
    "Hi! Good to hear from you.",
    "Hey, thanks for reaching out.",
    "Greetings, and welcome.",
    "Good day to you!",
    "Sure thing, I am here.",
    "Of course, glad you asked.",
)
_FOLLOW_UPS = (
    "Could you tell me a bit more about what you need?",
    "What can I do for you today?",
    "How can I help?",
    "Tell me what you need and I will take care of it.",
)
_SUMMARIES = (
    "Done: the tool returned what was needed, summarised above.",
    "All set: the tool's result answers the request.",
    "Here is what the tool found; it covers the question.",
    "Finished: the result above has what you asked for.",
)


@dataclass(frozen=True)
class ActingRequest:
    """The parts of a chat request the policy reads."""

    messages: list[JsonObject]
    tools: dict[str, JsonObject]  # name -> parameters schema
    tool_choice: str | None  # auto | none | required | a tool name (named choice)
    greedy: bool
    note: MemoryNote | None


def first_user_text(messages: list[JsonObject]) -> str:
    return next((message_text(m) for m in messages if m.get("role") == "user"), "")


def _successful_calls(messages: list[JsonObject]) -> list[Call]:
    """Tool calls in the history whose tool result was not an error."""
    results: dict[str, str] = {
        str(m.get("tool_call_id")): message_text(m) for m in messages if m.get("role") == "tool"
    }
    done: list[Call] = []
    for message in messages:
        for raw in message.get("tool_calls") or [] if message.get("role") == "assistant" else []:
            function = raw.get("function")
            if not isinstance(function, dict):
                continue  # a malformed call in the history is no step done
            arguments = function.get("arguments") or "{}"
            try:
                if isinstance(arguments, str):
                    arguments = json.loads(arguments)
                result = json.loads(results.get(str(raw.get("id")), "{}") or "{}")
            except json.JSONDecodeError:
                continue
            if isinstance(result, dict) and "error" in result:
                continue
            if isinstance(arguments, dict):
                done.append(Call(str(function.get("name")), arguments))
    return done


def _last_user(messages: list[JsonObject]) -> int:
    """The index of the last user message (-1 when there is none)."""
    return max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)


def last_user_text(messages: list[JsonObject]) -> str:
    index = _last_user(messages)
    return message_text(messages[index]) if index >= 0 else ""


def _has_tool_result(messages: list[JsonObject]) -> bool:
    return any(m.get("role") == "tool" for m in messages[_last_user(messages) + 1 :])


def _pick(options: list[tuple[Call, float]], rng: random.Random, greedy: bool) -> Call:
    if greedy:
        return max(options, key=lambda o: o[1])[0]  # first of equals: the correct action
    total = sum(weight for _, weight in options)
    point = rng.random() * total
    for call, weight in options:
        point -= weight
        if point <= 0:
            return call
    return options[-1][0]


class ActingPolicy:
    """Chooses a Draft for one choice of an acting request."""

    def __init__(self, worlds: list[World], skill: float) -> None:
        self.worlds = worlds
        self.skill = skill

    def act(self, request: ActingRequest, rng: random.Random) -> Draft:
        opener = rng.choice(_OPENERS)
        if not request.tools or request.tool_choice == "none":
            return self._answer(request, opener, "No tool is needed; I can reply directly.", rng)
        world = world_for_tools(self.worlds, request.tools)
        task = world.task_for(first_user_text(request.messages)) if world else None
        call: Call | None
        if world is not None and task is not None:
            call = self._world_step(world, task, request, rng)
        else:
            call = self._generic_step(request, rng)
        call = self._honour_tool_choice(call, request, world, task, rng)
        if call is None:
            return self._answer(request, opener, "The tool results cover the request.", rng)
        args = json.dumps(call.arguments, ensure_ascii=False)
        why = f"{opener} The next action is {call.name} with {args}."
        if request.note is not None and request.note.avoid:
            why += " My rehearsal memory flags some actions to avoid, so I steer clear of them."
        return Draft(reasoning=why, calls=(call,))

    def _answer(self, request: ActingRequest, opener: str, why: str, rng: random.Random) -> Draft:
        world = world_for_tools(self.worlds, request.tools)
        task = world.task_for(first_user_text(request.messages)) if world else None
        if task is not None and _has_tool_result(request.messages):
            text = task.answer  # the task's closing words, which its checks look for
        elif _has_tool_result(request.messages):
            text = rng.choice(_SUMMARIES)
        else:
            text = f"{rng.choice(_GREETINGS)} {rng.choice(_FOLLOW_UPS)}"
        return Draft(reasoning=f"{opener} {why}", content=text)

    def _avoid(self, request: ActingRequest, call: Call) -> bool:
        return request.note is not None and call.signature in request.note.avoid

    def _world_step(
        self, world: World, task: Task, request: ActingRequest, rng: random.Random
    ) -> Call | None:
        done = {c.signature for c in _successful_calls(request.messages)}
        step = next((i for i, c in enumerate(task.plan) if c.signature not in done), None)
        if step is None:
            return None
        correct = task.plan[step]
        mistakes = [m.call for m in world.mistakes(task, step) if m.call.name in request.tools]
        mistakes = [m for m in mistakes if not self._avoid(request, m)]
        if self._avoid(request, correct) and mistakes:
            return mistakes[0]
        options = [(correct, self.skill)]
        options += [(m, (1 - self.skill) / len(mistakes)) for m in mistakes]
        return _pick(options, rng, request.greedy)

    def _generic_step(self, request: ActingRequest, rng: random.Random) -> Call | None:
        plan = Intent.of(last_user_text(request.messages)).plan(request.tools)
        if plan:
            return self._planned_step(plan, request, rng)
        if _has_tool_result(request.messages):
            return None
        names = sorted(request.tools)
        call = Call(names[0], {})
        for _ in range(5):
            name = names[0] if request.greedy else rng.choice(names)
            schema = request.tools[name]
            synthesised: Any = synthesise(schema, rng, name)
            arguments = synthesised if isinstance(synthesised, dict) else {}
            if not request.greedy and rng.random() >= self.skill:
                arguments = mistake_for(schema, arguments, rng)
            call = Call(name, arguments)
            if not self._avoid(request, call):
                break
        return call

    def _planned_step(
        self, plan: tuple[Call, ...], request: ActingRequest, rng: random.Random
    ) -> Call | None:
        """The first step of a plan read from the user's words that has not succeeded yet (since
        the user spoke); arguments the words do not give are made up, as for any tool."""
        since = request.messages[_last_user(request.messages) :]
        done = {c.signature for c in _successful_calls(since)}
        step = next((c for c in plan if c.signature not in done), None)
        if step is None:
            return None
        schema = request.tools[step.name]
        made_up: Any = synthesise(schema, rng, step.name)
        arguments = {**(made_up if isinstance(made_up, dict) else {}), **step.arguments}
        required = {str(key) for key in schema.get("required", [])}
        arguments = {k: v for k, v in arguments.items() if k in step.arguments or k in required}
        if not request.greedy and rng.random() >= self.skill:
            arguments = mistake_for(schema, arguments, rng)
        return Call(step.name, arguments)

    def _honour_tool_choice(
        self,
        call: Call | None,
        request: ActingRequest,
        world: World | None,
        task: Task | None,
        rng: random.Random,
    ) -> Call | None:
        choice = request.tool_choice
        if choice in (None, "auto") or (choice == "required" and call is not None):
            return call
        if choice == "required":
            choice = sorted(request.tools)[0]
        if call is not None and call.name == choice:
            return call
        planned = [c for c in (task.plan if task else ()) if c.name == choice]
        if planned:
            return planned[0]
        schema = request.tools.get(str(choice), {})
        arguments = synthesise(schema, rng, str(choice))
        return Call(str(choice), arguments if isinstance(arguments, dict) else {})
