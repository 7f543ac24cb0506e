"""The rehearsal-role prompt, in the format EnvACE was trained on (DESIGN §2, docs/formats.md).

To imagine one tool call's result, the engine gets a *fresh* two-message chat with no ``tools``:
a system instruction (ours by default, replaceable from a file) and a user message made of six
labelled sections joined by a blank line:

1. ``Candidate tools (whitelist for this sample):`` and the tool list, JSON ``indent=0``;
2. ``Previous tool calls and results (few-shot):`` and real results of the same tool from
   grounding, or the single line ``… (few-shot): <unavailable>`` when there are none;
3. ``Current conversation history:`` and the conversation flattened to ``User:``, ``Assistant:``
   and ``Tool[name]:`` blocks (system messages skipped, tool calls re-inlined as hermes blocks);
4. ``RL model's latest response:`` and the acting turn, rebuilt as the model wrote it;
5. ``Current tool to simulate:`` with the call's name, input schema and parsed arguments;
6. the ``/think`` suffix.

Byte-level details (``ensure_ascii=True``, ``indent=0``, where blank lines fall) follow the
upstream training code on purpose: they are the distribution the weights saw. A golden file in
tests/rehearsal pins the result.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import PromptError
from .messages import (
    JSON,
    AssistantTurn,
    Message,
    ToolCall,
    loads_arguments,
)

DEFAULT_SYSTEM_INSTRUCTION = """\
You stand in for a software tool. An agent has just asked to call one of its tools; instead of \
the real tool, you answer, as precisely as the real tool would.

First check the call, in this order:
1. Format: the call must name a tool and carry its arguments as one JSON object. Otherwise \
refuse with code INVALID_TOOL_CALL_FORMAT.
2. Availability: the tool must be one of the candidate tools listed for this sample. Otherwise \
refuse with code TOOL_NOT_AVAILABLE.
3. Arguments: they must satisfy the tool's input JSON Schema (required fields present, types \
and allowed values respected, no fields the schema does not define). Otherwise refuse with code \
INVALID_PARAMETERS.
A refusal is exactly {"error_tool_call": {"code": "<CODE>", "message": "<what is wrong>"}}.

When the call passes these checks, write the result the real tool would return at this point: \
consistent with the conversation so far and with the earlier real results shown to you, realistic \
in its fields and values, as a non-empty JSON object or a JSON array. If the call is valid but the \
world would turn it down (an unknown id, a forbidden state change), return the tool's own error \
result, not a refusal.

Think it through privately first. Then output nothing but:
<execution_result>
{the JSON result}
</execution_result>"""

TOOLS_LABEL = "Candidate tools (whitelist for this sample):"
FEW_SHOT_LABEL = "Previous tool calls and results (few-shot):"
HISTORY_LABEL = "Current conversation history:"
LATEST_LABEL = "RL model's latest response:"
CURRENT_LABEL = "Current tool to simulate:"
NO_HISTORY = "No conversation history"
SUFFIX = "\n\n/think"


def load_system_instruction(path: str | Path) -> str:
    """The simulator instruction from a UTF-8 file, byte for byte (to run the upstream prompt)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptError(f"cannot read system instruction {path}: {exc}") from exc
    if not text.strip():
        raise PromptError(f"system instruction {path} is empty")
    return text


@dataclass(frozen=True, slots=True)
class GroundingObservation:
    """A real result of one tool call, as a client sent it back; used as a few-shot example."""

    name: str
    arguments: JSON
    result: JSON

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments, "result": self.result}

    @classmethod
    def from_dict(cls, raw: object) -> GroundingObservation | None:
        """Read a stored observation; ``None`` for anything that is not one (never raises)."""
        if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str):
            return None
        if "result" not in raw or "arguments" not in raw:
            return None
        return cls(raw["name"], raw["arguments"], raw["result"])


def _dump(value: JSON) -> str:
    return json.dumps(value, ensure_ascii=True, indent=0)


def _dump_repeated(value: JSON) -> str:
    """``_dump`` for what every rehearsal of a session repeats: the tool list, a tool's schema.

    json writes ``indent`` output with its pure-Python encoder and compact output in C: for the
    retail world's eight tools, ~410 us against ~20 us. The compact text determines the indented
    one, so it keys a small cache: one retail prompt took 280-390 us before, 80-125 us after.
    """
    return _indent_compact(json.dumps(value, ensure_ascii=True))


@functools.lru_cache(maxsize=64)
def _indent_compact(compact: str) -> str:
    return _dump(json.loads(compact))


@functools.lru_cache(maxsize=256)
def _dump_arguments(arguments: str) -> str:
    """A call's arguments as the prompt shows them; each of a turn's K imaginations shows them."""
    return _dump(loads_arguments(arguments))


def few_shot_section(observations: Sequence[GroundingObservation]) -> str:
    """Section 2: one ``Tool name / Tool arguments / Tool execution result`` block per pair."""
    if not observations:
        return f"{FEW_SHOT_LABEL} <unavailable>"
    lines = [FEW_SHOT_LABEL]
    for seen in observations:
        # The same real results ground every imagination of a call: ``_dump_repeated``'s cache.
        result = seen.result if isinstance(seen.result, str) else _dump_repeated(seen.result)
        lines.append(
            f"Tool name:\n{seen.name}\nTool arguments:\n{_dump_repeated(seen.arguments)}\n"
            f"Tool execution result:\n{result}\n"
        )
    return "\n".join(lines)


def _text(content: object) -> str:
    """A message's content as text: strings as they are, text parts joined, anything else empty."""
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, Mapping)]
        return "\n".join(p for p in parts if isinstance(p, str)).strip()
    return ""


def _inline_calls(tool_calls: object, names: dict[str, str]) -> str:
    text = ""
    for raw in tool_calls if isinstance(tool_calls, list) else ():
        function = raw.get("function") if isinstance(raw, Mapping) else None
        function = function if isinstance(function, Mapping) else {}
        name = function.get("name", "")
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=True)
        if isinstance(raw, Mapping) and isinstance(raw.get("id"), str):
            names[raw["id"]] = str(name)
        text += f'\n<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'
    return text


def flatten_history(messages: Iterable[Mapping[str, Any]]) -> str:
    """Section 3: ``User:`` / ``Assistant:`` / ``Tool[name]:`` blocks separated by blank lines.

    A tool message without ``name`` takes the name of the call it answers (``tool_call_id``).
    """
    blocks: list[str] = []
    names: dict[str, str] = {}
    for message in messages:
        role = message.get("role")
        content = _text(message.get("content"))
        if role == "user" and content:
            blocks.append(f"User: {content}")
        elif role == "assistant":
            text = content + _inline_calls(message.get("tool_calls"), names)
            if text:
                blocks.append(f"Assistant: {text}")
        elif role == "tool" and content:
            name = message.get("name") or names.get(str(message.get("tool_call_id")), "")
            blocks.append(f"Tool[{name}]: {content}" if name else f"Tool: {content}")
    return "\n\n".join(blocks) if blocks else NO_HISTORY


def tool_schema(tools: Sequence[Mapping[str, Any]], name: str) -> JSON:
    """The input schema of the tool called ``name`` (OpenAI or bare function form), else ``{}``."""
    for tool in tools:
        function = tool.get("function", tool)
        if isinstance(function, Mapping) and function.get("name") == name:
            return function.get("parameters", {})
    return {}


class ToolsText:
    """What the prompt writes of one request's tool list: section 1, and each tool's schema.

    Every call a rehearsal imagines repeats them, so a rehearsal writes them once: even through
    ``_dump_repeated``'s cache, the tool list's compact dump that keys it is ~23 us for the retail
    world's eight tools.
    """

    __slots__ = ("_schemas", "listing", "tools")

    def __init__(self, tools: Sequence[Mapping[str, Any]]) -> None:
        self.tools = tools
        self.listing = f"{TOOLS_LABEL}\n{_dump_repeated(list(tools))}"
        self._schemas: dict[str, str] = {}

    def schema(self, name: str) -> str:
        """The input schema of the tool called ``name``, as section 5 writes it."""
        text = self._schemas.get(name)
        if text is None:
            text = self._schemas[name] = _dump_repeated(tool_schema(self.tools, name))
        return text


def rehearsal_user_prompt(
    *,
    tools: Sequence[Mapping[str, Any]] | ToolsText,
    grounding: Sequence[GroundingObservation],
    history: Iterable[Mapping[str, Any]],
    acting_turn: AssistantTurn,
    call: ToolCall,
) -> str:
    """The rehearsal-role user message for ``call``, one of ``acting_turn``'s tool calls.

    ``tools`` is the request's tool list, or its ``ToolsText`` when several prompts share it.
    """
    text = tools if isinstance(tools, ToolsText) else ToolsText(tools)
    current = (
        f"{CURRENT_LABEL}\n- name: {call.name}\n"
        f"- input schema (JSON Schema):\n{text.schema(call.name)}\n"
        f"- arguments (JSON, parsed from caller's tool_call):\n"
        f"{_dump_arguments(call.arguments)}"
    )
    sections = [
        text.listing,
        few_shot_section(grounding),
        f"{HISTORY_LABEL}\n{flatten_history(history)}",
        f"{LATEST_LABEL}\n{acting_turn.raw_text()}",
        current,
    ]
    return "\n\n".join(sections) + SUFFIX


def rehearsal_messages(system_instruction: str, user_prompt: str) -> tuple[Message, Message]:
    """The fresh two-message chat the rehearsal role is called with."""
    return (
        {"role": "system", "content": system_instruction},
        {"role": "user", "content": user_prompt},
    )
