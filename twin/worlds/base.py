"""The machinery every scripted tool world shares: tools, tasks, state, calls and planted mistakes.

A world is real Python over an in-memory JSON state. An agent (or the twin) uses it as::

    world = load_world("retail")
    task = world.tasks[0]
    state = world.new_state(task)
    result = world.call(state, "get_order", {"order_id": "W1001"})
    world.check(task, state)  # True once the task's goal state is reached

A tool's own failure comes back as ``{"error": "..."}`` (the call was valid, the world said no);
arguments that break the tool's schema come back as an error too, and the twin's rehearsal role
turns those into EnvACE vetoes instead.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..schema import JsonObject, Violation, validate_call

State = dict[str, Any]
Handler = Callable[[State, JsonObject], Any]


class ToolError(Exception):
    """A realistic failure of a valid call (not found, wrong status, insufficient funds…)."""


def canonical_json(value: Any) -> str:
    """docs/formats.md's canonical JSON: sorted keys, no spaces, unicode kept."""
    import json

    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class Call:
    """One tool call: a name and its arguments."""

    name: str
    arguments: JsonObject

    @property
    def signature(self) -> str:
        return f"{self.name} {canonical_json(self.arguments)}"


@dataclass(frozen=True)
class WorldTool:
    """A tool of a world: its JSON Schema and the Python that runs it."""

    name: str
    description: str
    parameters: JsonObject
    handler: Handler
    writes: bool = False
    destructive: bool = False  # a write that is hard to undo (a cancellation, a transfer)

    @property
    def risk(self) -> str:
        """The tool's risk class: ``read_only``, ``write`` or ``destructive``."""
        return "destructive" if self.destructive else "write" if self.writes else "read_only"

    def schema(self, *, annotated: bool = False) -> JsonObject:
        """The tool as an OpenAI ``tools=`` entry; ``annotated``: with MCP-style hints."""
        entry: JsonObject = {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }
        if annotated:
            entry["annotations"] = {
                "readOnlyHint": not self.writes,
                "destructiveHint": self.destructive,
                "idempotentHint": not self.writes,
                "openWorldHint": False,
            }
        return entry


@dataclass(frozen=True)
class Task:
    """A user goal: the instruction, a reference plan, the final answer and a goal-state check."""

    id: str
    instruction: str
    plan: tuple[Call, ...]
    goal: tuple[tuple[tuple[str | int, ...], Any], ...]  # (path into the state, expected value)
    answer: str
    # Destructive calls that look related but are not the task's (cancelling the order the user
    # only asked about): planted as mistakes once the plan's first read is done, when they work.
    tempting: tuple[Call, ...] = ()

    def reached(self, state: State) -> bool:
        """Whether every goal path holds its expected value."""
        for path, expected in self.goal:
            node: Any = state
            for part in path:
                try:
                    node = node[part]
                except (KeyError, IndexError, TypeError):
                    return False
            if node != expected:
                return False
        return True


@dataclass(frozen=True)
class Mistake:
    """A plausible wrong call a weak policy makes at one step, and the error it earns."""

    kind: str  # wrong_id | missing_arg | wrong_enum | write_before_read | tempting_destructive
    step: int
    call: Call
    error: str  # a substring of the world's error message ("" for one that succeeds)


_EXPECTED_ERROR = {
    "wrong_id": "not found",
    "missing_arg": "missing required argument",
    "wrong_enum": "must be one of",
    "write_before_read": "before",
}


def shift_id(value: str) -> str:
    """A near-miss identifier (a plausible typo) that no world entity uses."""
    match = re.search(r"(\d+)(?!.*\d)", value)
    if match is None:
        return value + "X"
    digits = match.group(1)
    shifted = str(int(digits) + 400).zfill(len(digits))
    return value[: match.start()] + shifted + value[match.end() :]


def remember(state: State, kind: str, key: str) -> None:
    """Record that the agent has read ``kind`` ``key`` in this episode."""
    seen: list[str] = state.setdefault("_seen", [])
    if f"{kind}:{key}" not in seen:
        seen.append(f"{kind}:{key}")


def require_seen(state: State, kind: str, key: str) -> None:
    """Writes are refused until the entity they change has been read (the validating read)."""
    if f"{kind}:{key}" not in state.get("_seen", []):
        raise ToolError(f"{kind} {key} must be looked up before it can be changed")


def lookup(state: State, table: str, key: Any, kind: str) -> JsonObject:
    """Fetch a row or raise the world's 'not found' error."""
    row = state[table].get(key) if isinstance(key, str) else None
    if row is None:
        raise ToolError(f"{kind} {key} not found")
    value: JsonObject = row
    return value


@dataclass
class World:
    """A scripted tool world: tools, tasks and the initial in-memory state."""

    name: str
    system_prompt: str
    tools: dict[str, WorldTool]
    tasks: tuple[Task, ...]
    initial_state: State = field(repr=False)
    # Tasks that only read, where a destructive call is tempting and wrong (kept apart from
    # ``tasks``, which the other benchmarks and evaluations sample).
    tempting_tasks: tuple[Task, ...] = ()

    @property
    def all_tasks(self) -> tuple[Task, ...]:
        return self.tasks + self.tempting_tasks

    def tool_schemas(self, *, annotated: bool = False) -> list[JsonObject]:
        """All tools as OpenAI ``tools=`` entries (``annotated``: with MCP-style hints)."""
        return [tool.schema(annotated=annotated) for tool in self.tools.values()]

    def risk_classes(self) -> dict[str, str]:
        """Each tool's risk class, as an operator would configure it (``RGW_RISK_PATTERNS``)."""
        return {name: tool.risk for name, tool in self.tools.items()}

    def new_state(self, task: Task | None = None) -> State:
        """A fresh, private copy of the initial state (tasks share one starting world)."""
        return copy.deepcopy(self.initial_state)

    def validate(self, name: str, arguments: Any) -> Violation | None:
        """Schema problems with a call, as an EnvACE violation."""
        return validate_call(name, arguments, {n: t.parameters for n, t in self.tools.items()})

    def call(self, state: State, name: str, arguments: Any) -> Any:
        """Run one tool against ``state`` (mutating it) and return its JSON result."""
        violation = self.validate(name, arguments)
        if violation is not None:
            return {"error": violation.message}
        try:
            return self.tools[name].handler(state, arguments)
        except ToolError as exc:
            return {"error": str(exc)}

    def check(self, task: Task, state: State) -> bool:
        """Whether ``state`` satisfies the task's goal."""
        return task.reached(state)

    def task(self, task_id: str) -> Task:
        """The task with this id."""
        for task in self.all_tasks:
            if task.id == task_id:
                return task
        raise KeyError(task_id)

    def task_for(self, first_user_message: str) -> Task | None:
        """The task whose instruction opens the conversation, if any."""
        text = " ".join(first_user_message.split())
        for task in self.all_tasks:
            if " ".join(task.instruction.split()) in text:
                return task
        return None

    def mistakes(self, task: Task, step: int) -> list[Mistake]:
        """The planted mistakes a weak policy makes instead of ``task.plan[step]``."""
        call = task.plan[step]
        tool = self.tools[call.name]
        found: list[Mistake] = []
        props: JsonObject = tool.parameters.get("properties", {})
        for key, value in call.arguments.items():
            if key.endswith("_id") and isinstance(value, str):
                wrong = {**call.arguments, key: shift_id(value)}
                found.append(self._mistake("wrong_id", step, call.name, wrong))
                break
        required = [k for k in tool.parameters.get("required", []) if k in call.arguments]
        if required:
            dropped = {k: v for k, v in call.arguments.items() if k != required[-1]}
            found.append(self._mistake("missing_arg", step, call.name, dropped))
        for key, value in call.arguments.items():
            if "enum" in props.get(key, {}) and isinstance(value, str):
                wrong_value = value.replace("_", " ").title()
                found.append(
                    self._mistake(
                        "wrong_enum", step, call.name, {**call.arguments, key: wrong_value}
                    )
                )
                break
        if not tool.writes:
            later = next((c for c in task.plan[step + 1 :] if self.tools[c.name].writes), None)
            if later is not None:
                found.append(self._mistake("write_before_read", step, later.name, later.arguments))
        if step >= 1:
            found += [Mistake("tempting_destructive", step, c, "") for c in task.tempting]
        return found

    @staticmethod
    def _mistake(kind: str, step: int, name: str, arguments: JsonObject) -> Mistake:
        return Mistake(kind, step, Call(name, arguments), _EXPECTED_ERROR[kind])


def tool(
    name: str,
    description: str,
    properties: JsonObject,
    required: list[str],
    handler: Handler,
    *,
    writes: bool = False,
    destructive: bool = False,
) -> WorldTool:
    """Shorthand for a tool whose parameters are a plain object schema."""
    parameters = {"type": "object", "properties": properties, "required": required}
    return WorldTool(name, description, parameters, handler, writes or destructive, destructive)


def string(description: str, enum: list[str] | None = None) -> JsonObject:
    schema: JsonObject = {"type": "string", "description": description}
    if enum is not None:
        schema["enum"] = enum
    return schema


def integer(description: str, minimum: int = 0) -> JsonObject:
    return {"type": "integer", "description": description, "minimum": minimum}
