"""The rehearsal role: parse EnvACE's labelled simulator prompt and imagine the tool's result.

Recognised as docs/formats.md says: a user message that starts with ``Candidate tools (whitelist
for this sample):``. The twin replays the history's tool calls on a fresh copy of the world state,
validates the call, runs the tool, and imagines like a world model that drifts: with probability
``fidelity`` it is right (the EnvACE veto for a schema-invalid call, the true result for a valid
one), otherwise it is plausibly wrong (a schema violation it misses, imagined as the tool running
anyway; for a valid call, a veto it should not have raised — ``FALSE_VETO`` of the drifts — or a
changed field, a spurious error or a success where the world would refuse).

Grounding: the prompt's few-shot section carries real results the gateway saw earlier. ``k``
examples of the same tool raise the fidelity for that call to ``1 - (1 - fidelity) * gain**k``
(``gain`` is ``--grounding-gain``, 0.5 by default: each example halves the chance of drifting);
and when one of them has exactly the call's arguments, an imagination that would have drifted
reproduces that real result instead, with probability ``COPY_EXACT`` (it may be stale: the world
may have changed since, and a copying model does not notice).

Section parsing is lenient about case, spacing and label wording, but a prompt whose sections
cannot be found or read raises ``MalformedRehearsal`` (a 400 upstream), never anything else.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
from dataclasses import dataclass
from typing import Any

from .schema import JsonObject, Violation, synthesise, validate_call
from .turn import Draft
from .worlds import State, ToolError, World, world_for_tools
from .worlds.base import Call, canonical_json

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
_EXAMPLE = re.compile(
    r"tool\s+name\s*:\s*\n(?P<name>[^\n]*)\n\s*tool\s+arguments\s*:\s*\n(?P<arguments>.*?)\n"
    r"\s*tool\s+execution\s+result\s*:[ \t]*\n?(?P<result>.*?)(?=\n\s*tool\s+name\s*:|\Z)",
    re.IGNORECASE | re.DOTALL,
)
GROUNDING_GAIN = 0.5  # by default each real example of the tool halves the chance of drifting
COPY_EXACT = 0.75  # a drift with an exact-arguments example copies that real result this often
FALSE_VETO = 1 / 3  # a drift on a valid call refuses it, as an over-strict simulator does
# A handler assumes schema-valid arguments; run on invalid ones it fails in these ways.
_HANDLER_FAILURES = (KeyError, TypeError, ValueError, AttributeError, IndexError)


class MalformedRehearsal(ValueError):
    """The rehearsal prompt's sections are missing or unreadable."""


@dataclass(frozen=True)
class Example:
    """One few-shot pair: a real call the gateway saw and the result the real tool returned."""

    name: str
    arguments: Any
    result: Any

    @property
    def signature(self) -> str:
        return f"{self.name} {canonical_json(self.arguments)}"


@dataclass(frozen=True)
class RehearsalPrompt:
    """The sections the twin needs from the simulator prompt."""

    tools: dict[str, JsonObject]
    first_user: str
    history_calls: tuple[Call, ...]
    name: str
    schema: JsonObject
    arguments_text: str
    examples: tuple[Example, ...] = ()


def grounded_fidelity(fidelity: float, examples: int, gain: float = GROUNDING_GAIN) -> float:
    """The fidelity for a call whose prompt shows ``examples`` real results of the same tool."""
    return 1.0 - (1.0 - fidelity) * gain**examples


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


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _examples(text: str) -> tuple[Example, ...]:
    """The few-shot pairs (none for ``<unavailable>``); a pair that does not read is skipped."""
    found: list[Example] = []
    for match in _EXAMPLE.finditer(text):
        name = match.group("name").strip()
        arguments = _json_or_text(match.group("arguments").strip())
        if name and isinstance(arguments, dict):
            found.append(Example(name, arguments, _json_or_text(match.group("result").strip())))
    return tuple(found)


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
        examples=_examples(sections["few_shot"]),
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


def _false_veto(arguments: JsonObject, rng: random.Random) -> Violation:
    """A refusal of a valid call, naming one of its arguments as a validator would."""
    keys = sorted(arguments)
    if not keys:
        return Violation("INVALID_PARAMETERS", "the arguments do not match the input schema")
    key = rng.choice(keys)
    return Violation("INVALID_PARAMETERS", f"{key} does not match the expected format")


def _replayed(prompt: RehearsalPrompt, world: World) -> State:
    """A fresh copy of the world's state with the history's tool calls replayed on it."""
    state = world.new_state()
    for call in prompt.history_calls:
        world.call(state, call.name, call.arguments)
    return state


class Simulator:
    """Imagines one tool result for a parsed rehearsal prompt."""

    def __init__(
        self, worlds: list[World], fidelity: float, grounding_gain: float = GROUNDING_GAIN
    ) -> None:
        self.worlds = worlds
        self.fidelity = fidelity
        self.grounding_gain = grounding_gain

    def imagine(self, prompt: RehearsalPrompt, rng: random.Random) -> tuple[str, Any]:
        """Thinking text and the JSON observation (a veto, a result or a wrong one)."""
        arguments: Any = None
        with contextlib.suppress(json.JSONDecodeError):
            arguments = json.loads(prompt.arguments_text) if prompt.arguments_text else {}
        tools = dict(prompt.tools)
        if prompt.name in tools and not tools[prompt.name]:
            tools[prompt.name] = prompt.schema
        seen = [e for e in prompt.examples if e.name == prompt.name]
        fidelity = grounded_fidelity(self.fidelity, len(seen), self.grounding_gain)
        world = world_for_tools(self.worlds, tools)
        if world is not None and prompt.name not in world.tools:
            world = None
        violation = validate_call(prompt.name, arguments, tools)
        if violation is not None:
            if rng.random() < fidelity:
                return f"The call fails validation: {violation.message}.", violation.as_veto()
            copied = self._copied(seen, prompt.name, arguments, rng)
            if copied is not None:
                return copied
            return f"The arguments look acceptable; running {prompt.name}.", self._missed(
                prompt, world, arguments, rng
            )
        if world is not None:
            truth = world.call(_replayed(prompt, world), prompt.name, arguments)
        else:
            truth = self._synthesised(prompt, arguments, rng)
        if rng.random() < fidelity:
            return f"Running {prompt.name} on the current state gives its usual result.", truth
        copied = self._copied(seen, prompt.name, arguments, rng)
        if copied is not None:
            return copied
        if rng.random() < FALSE_VETO:
            veto = _false_veto(arguments, rng)
            return f"The call fails validation: {veto.message}.", veto.as_veto()
        return f"Simulating {prompt.name}; the record looks slightly different.", _perturb(
            truth, rng
        )

    @staticmethod
    def _copied(
        seen: list[Example], name: str, arguments: Any, rng: random.Random
    ) -> tuple[str, Any] | None:
        """A drifting imagination copying a real result shown for exactly these arguments."""
        if not isinstance(arguments, dict):
            return None
        signature = f"{name} {canonical_json(arguments)}"
        exact = next((e for e in seen if e.signature == signature), None)
        if exact is None or not isinstance(exact.result, dict | list) or not exact.result:
            return None
        if rng.random() >= COPY_EXACT:
            return None
        return f"An earlier real call of {name} with these arguments returned this.", exact.result

    def _missed(
        self, prompt: RehearsalPrompt, world: World | None, arguments: Any, rng: random.Random
    ) -> Any:
        """A schema violation the imagination misses: the tool imagined running anyway.

        A world tool runs on the replayed state with the arguments as they are (its own error,
        if it finds one, stands); where its handler cannot run on them, and for tools of no
        world, the result is a generic success.
        """
        if world is not None and isinstance(arguments, dict):
            try:
                return world.tools[prompt.name].handler(_replayed(prompt, world), arguments)
            except ToolError as exc:
                return {"error": str(exc)}
            except _HANDLER_FAILURES:
                pass
        return self._synthesised(prompt, arguments if isinstance(arguments, dict) else {}, rng)

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
