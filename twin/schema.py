"""Just enough JSON Schema for tool calls: validate arguments, synthesise arguments and results.

The twin validates a call the way EnvACE's simulator was trained to (unknown tool, missing
required argument, wrong type, value outside an enum, an argument the schema does not declare)
and, for tools that belong to no world, invents schema-consistent arguments and results from a
seeded ``random.Random``.

Undeclared arguments: an object schema that lists ``properties`` declares its arguments, and one
it does not list is refused unless ``additionalProperties`` is ``true`` (or a schema the value
must then satisfy). JSON Schema itself allows extra keys by default; the twin's worlds are real
tools with fixed parameters, which refuse them, as EnvACE's simulator instruction does ("no
fields the schema does not define"). A schema without ``properties`` accepts any keys.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

JsonObject = dict[str, Any]

_WORDS = ("alpha", "delta", "harbor", "maple", "orbit", "quartz", "summit", "willow")
_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


@dataclass(frozen=True)
class Violation:
    """Why a tool call fails validation, with its EnvACE veto code."""

    code: str
    message: str

    def as_veto(self) -> JsonObject:
        return {"error_tool_call": {"code": self.code, "message": self.message}}


# Tool schemas come from clients and need not be sound JSON Schema: a part of the wrong kind is
# read as absent, so an odd schema is answered like a loose one, never with a crash.
def _mapping(value: Any) -> JsonObject:
    return value if isinstance(value, dict) else {}


def _names(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _bound(schema: JsonObject, key: str, default: int) -> int:
    value = schema.get(key)
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return int(value)
    return default


def _type_ok(value: Any, expected: Any) -> bool:
    names = expected if isinstance(expected, list) else [expected]
    for name in names:
        kinds = _TYPES.get(str(name))
        if kinds is None:
            return True
        if isinstance(value, bool) and name in ("integer", "number"):
            continue
        if isinstance(value, kinds):
            return True
    return False


def check_value(value: Any, schema: JsonObject, path: str) -> str | None:
    """The first problem with ``value`` under ``schema`` (None when it conforms)."""
    if "type" in schema and not _type_ok(value, schema["type"]):
        return f"{path} must be of type {schema['type']}, got {type(value).__name__}"
    if isinstance(schema.get("enum"), list) and value not in schema["enum"]:
        allowed = ", ".join(map(str, schema["enum"]))
        return f"{path} must be one of: {allowed}"
    if isinstance(value, dict):
        return check_object(value, schema, path)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            problem = check_value(item, schema["items"], f"{path}[{i}]")
            if problem:
                return problem
    return None


def _extra_schema(schema: JsonObject) -> JsonObject | None:
    """What an undeclared key must satisfy: ``{}`` (anything), a schema, or None (refused)."""
    if not isinstance(schema.get("properties"), dict):
        return {}  # no properties listed: the keys are not declared, so none is undeclared
    extra = schema.get("additionalProperties", False)
    if extra is True:
        return {}
    return extra if isinstance(extra, dict) else None


def check_object(value: JsonObject, schema: JsonObject, path: str = "arguments") -> str | None:
    """The first problem with an object's required keys, known and undeclared properties."""
    for key in _names(schema.get("required")):
        if key not in value:
            return f"missing required argument '{key}'"
    properties = _mapping(schema.get("properties"))
    extra = _extra_schema(schema)
    for key, item in value.items():
        where = key if path == "arguments" else path
        if key in properties:
            sub = properties[key]
        elif extra is None:
            return f"unexpected argument '{key}'" + ("" if path == "arguments" else f" in {path}")
        else:
            sub = extra
        if isinstance(sub, dict):
            problem = check_value(item, sub, where)
            if problem:
                return problem
    return None


def validate_call(name: str, arguments: Any, tools: dict[str, JsonObject]) -> Violation | None:
    """Validate one call against the offered tools' parameter schemas."""
    if not name or not isinstance(arguments, dict):
        return Violation("INVALID_TOOL_CALL_FORMAT", "a tool call needs a name and a JSON object")
    if name not in tools:
        return Violation("TOOL_NOT_AVAILABLE", f"tool '{name}' is not in the candidate tools")
    problem = check_object(arguments, tools[name])
    if problem:
        return Violation("INVALID_PARAMETERS", problem)
    return None


def synthesise(schema: JsonObject, rng: random.Random, key: str = "value") -> Any:
    """A value that conforms to ``schema`` (required keys only, plus a coin toss for others)."""
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return rng.choice(schema["enum"])
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object":
        properties = _mapping(schema.get("properties"))
        required = set(_names(schema.get("required")))
        out: JsonObject = {}
        for name, sub in properties.items():
            if name in required or rng.random() < 0.3:
                out[name] = synthesise(sub if isinstance(sub, dict) else {}, rng, name)
        return out
    if kind == "array":
        items = schema.get("items", {})
        return [synthesise(items if isinstance(items, dict) else {}, rng, key)]
    if kind == "integer":
        low = _bound(schema, "minimum", 1)
        return rng.randint(low, max(low, _bound(schema, "maximum", low + 99)))
    if kind == "number":
        return round(rng.uniform(1.0, 100.0), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    return f"{key}_{rng.choice(_WORDS)}_{rng.randint(1, 99)}"


def mistake_for(schema: JsonObject, arguments: JsonObject, rng: random.Random) -> JsonObject:
    """A plausible wrong version of valid arguments: a dropped required key or a bad enum."""
    wrong = dict(arguments)
    properties = _mapping(schema.get("properties"))
    enums = [k for k, s in properties.items() if "enum" in _mapping(s) and k in wrong]
    required = [k for k in _names(schema.get("required")) if k in wrong]
    if enums and (not required or rng.random() < 0.5):
        key = rng.choice(enums)
        wrong[key] = f"{wrong[key]}_other".upper()
    elif required:
        del wrong[rng.choice(required)]
    else:
        wrong["unexpected_flag"] = True
    return wrong
