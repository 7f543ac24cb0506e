"""The rehearsal role: parse EnvACE's labelled simulator prompt and imagine the tool's result.

Recognised as docs/formats.md says: a user message that starts with ``Candidate tools (whitelist
for this sample):``. The twin replays the history's tool calls on a fresh copy of the world state,
validates the call (vetoes with EnvACE codes), runs the tool, and with probability ``fidelity``
returns the true result, otherwise a plausible wrong one. Section parsing is lenient about case,
spacing and label wording, but a prompt whose sections cannot be found or read raises
``MalformedRehearsal`` (a 400 upstream), never anything else.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
from dataclasses import dataclass
from typing import Any

from twin.schema import JsonObject, synthesise, validate_call
from twin.turn import Draft
from twin.worlds import World, world_for_tools
from twin.worlds.base import Call

LABELS = (
    ("tools", r"candidate\s+tools[^\n:]*:"),
    ("few_shot", r"previous\s+tool\s+calls[^\n:]*:"),
    ("history", r"current\s+conversation\s+history[^\n:]*:"),
    ("latest", r"rl\s+model'?s\s+latest\s+response[^\n:]*:"),
    ("current", r"current\s+tool\s+to\s+simulate[^\n:]*:"),
)
_FIELDS = (
    ("name", r"^\s*-?\s*name\s*:"),
    ("schema", r"^\s*-?\s*input\s+schema[^\n:]*:"),
    ("arguments", r"^\s*-?\s*arguments[^\n:]*:"),
)
_BLOCK = re.compile(r"^(User|Assistant|Tool\[([^\]\n]*)\]):[ \t]?", re.MULTILINE | re.IGNORECASE)
_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_STATUSES = ("pending", "active", "cancelled", "delivered", "blocked", "completed", "failed")


class MalformedRehearsal(ValueError):
    """The rehearsal prompt's sections are missing or unreadable."""


@dataclass(frozen=True)
class RehearsalPrompt:
    """The sections the twin needs from the simulator prompt."""

    tools: dict[str, JsonObject]
    first_user: str
    history_calls: tuple[Call, ...]
    name: str
    schema: JsonObject
    arguments_text: str


def is_rehearsal(text: str) -> bool:
    """Whether a user message opens with the rehearsal prompt's first label."""
    return re.match(LABELS[0][1], text.strip(), re.IGNORECASE) is not None


def _cut(text: str, patterns: tuple[tuple[str, str], ...], flags: int) -> dict[str, str]:
    found: dict[str, str] = {}
    position = 0
    marks: list[tuple[str, int, int]] = []
    for key, pattern in patterns:
        match = re.compile(pattern, flags).search(text, position)
        if match is None:
            raise MalformedRehearsal(f"rehearsal prompt lacks the section matching {pattern!r}")
        marks.append((key, match.start(), match.end()))
        position = match.end()
    for i, (key, _, end) in enumerate(marks):
        stop = marks[i + 1][1] if i + 1 < len(marks) else len(text)
        found[key] = text[end:stop].strip()
    return found


def _tool_map(text: str) -> dict[str, JsonObject]:
    try:
        listing = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MalformedRehearsal(f"candidate tools are not valid JSON: {exc.msg}") from exc
    if isinstance(listing, dict):
        listing = [listing]
    if not isinstance(listing, list):
        raise MalformedRehearsal("candidate tools must be a JSON list of tool schemas")
    tools: dict[str, JsonObject] = {}
    for entry in listing:
        spec = entry.get("function", entry) if isinstance(entry, dict) else None
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise MalformedRehearsal("each candidate tool needs a name")
        parameters = spec.get("parameters")
        tools[spec["name"]] = parameters if isinstance(parameters, dict) else {}
    return tools


def _history(text: str) -> tuple[str, tuple[Call, ...]]:
    blocks = list(_BLOCK.finditer(text))
    first_user = ""
    calls: list[Call] = []
    for i, match in enumerate(blocks):
        end = blocks[i + 1].start() if i + 1 < len(blocks) else len(text)
        body = text[match.end() : end].strip()
        role = match.group(1).lower()
        if role == "user" and not first_user:
            first_user = body
        if role == "assistant":
            for raw in _TOOL_CALL.findall(body):
                try:
                    parsed = json.loads(raw)
                    calls.append(Call(str(parsed["name"]), dict(parsed.get("arguments") or {})))
                except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                    continue
    return first_user, tuple(calls)


def parse_prompt(text: str) -> RehearsalPrompt:
    """Parse the six-section simulator prompt (the ``/think`` suffix is optional)."""
    text = re.sub(r"\s*/think\s*$", "", text.strip())
    sections = _cut(text, LABELS, re.IGNORECASE)
    fields = _cut(sections["current"], _FIELDS, re.IGNORECASE | re.MULTILINE)
    try:
        schema = json.loads(fields["schema"]) if fields["schema"] else {}
    except json.JSONDecodeError as exc:
        raise MalformedRehearsal(f"input schema is not valid JSON: {exc.msg}") from exc
    if not isinstance(schema, dict):
        raise MalformedRehearsal("input schema must be a JSON object")
    first_user, calls = _history(sections["history"])
    return RehearsalPrompt(
        tools=_tool_map(sections["tools"]),
        first_user=first_user,
        history_calls=calls,
        name=fields["name"].strip().strip("`\"'"),
        schema=schema,
        arguments_text=fields["arguments"],
    )


def _perturb(result: Any, rng: random.Random) -> Any:
    """A plausible but wrong observation."""
    if isinstance(result, dict) and "error" in result:
        return {"status": "ok"}
    if isinstance(result, list):
        return result[:-1] if len(result) > 1 else {"error": "no results found"}
    if not isinstance(result, dict):
        return {"error": "service temporarily unavailable"}
    scalars = [k for k, v in result.items() if isinstance(v, str | int | float | bool)]
    if not scalars or rng.random() < 0.25:
        return {"error": "record not found"}
    wrong = dict(result)
    key = rng.choice(scalars)
    value = wrong[key]
    if isinstance(value, bool):
        wrong[key] = not value
    elif isinstance(value, int | float):
        wrong[key] = value * 2 + 1
    elif key == "status":
        wrong[key] = rng.choice([s for s in _STATUSES if s != value])
    else:
        wrong[key] = f"{value}-1"
    return wrong


class Simulator:
    """Imagines one tool result for a parsed rehearsal prompt."""

    def __init__(self, worlds: list[World], fidelity: float) -> None:
        self.worlds = worlds
        self.fidelity = fidelity

    def imagine(self, prompt: RehearsalPrompt, rng: random.Random) -> tuple[str, Any]:
        """Thinking text and the JSON observation (a veto, a result or a wrong result)."""
        arguments: Any = None
        with contextlib.suppress(json.JSONDecodeError):
            arguments = json.loads(prompt.arguments_text) if prompt.arguments_text else {}
        tools = dict(prompt.tools)
        if prompt.name in tools and not tools[prompt.name]:
            tools[prompt.name] = prompt.schema
        violation = validate_call(prompt.name, arguments, tools)
        if violation is not None:
            return f"The call fails validation: {violation.message}.", violation.as_veto()
        world = world_for_tools(self.worlds, tools)
        if world is not None and prompt.name in world.tools:
            state = world.new_state()
            for call in prompt.history_calls:
                world.call(state, call.name, call.arguments)
            truth = world.call(state, prompt.name, arguments)
        else:
            truth = self._synthesised(prompt, arguments, rng)
        if rng.random() < self.fidelity:
            return f"Running {prompt.name} on the current state gives its usual result.", truth
        return f"Simulating {prompt.name}; the record looks slightly different.", _perturb(
            truth, rng
        )

    @staticmethod
    def _synthesised(prompt: RehearsalPrompt, arguments: JsonObject, rng: random.Random) -> Any:
        echo = {k: v for k, v in arguments.items() if isinstance(v, str | int | float | bool)}
        return {
            "status": "ok",
            "tool": prompt.name,
            "request": echo,
            "id": synthesise({"type": "string"}, rng, "ref"),
        }

    def draft(self, prompt: RehearsalPrompt, rng: random.Random) -> Draft:
        thinking, observation = self.imagine(prompt, rng)
        body = json.dumps(observation, ensure_ascii=False)
        return Draft(reasoning=thinking, content=f"<execution_result>\n{body}\n</execution_result>")
