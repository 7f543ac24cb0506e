"""Deterministic checks: what a validator decides about a tool call, before imagination is spent.

Every candidate and every committed call is checked against the request's own tool list: the
tool must be offered, its arguments must be a JSON object, and they must satisfy the tool's
``parameters`` JSON Schema (required, types, enums, ``additionalProperties``, nested objects and
arrays, ``$ref``s inside the schema). A call that fails is *vetoed by the check*: it costs no
rehearsal call, and its veto is counted apart from imagined ones (code ``SCHEMA_INVALID``).

Undeclared arguments: JSON Schema allows properties a schema does not list unless it says
``additionalProperties: false``; real tools (Python functions, typed RPCs) mostly refuse them.
``strict: true`` tools (OpenAI's structured tool calling) never allow them. For the rest,
``reject_undeclared`` (on by default, the gateway's ``RGW_REJECT_UNDECLARED_ARGUMENTS``) treats an
argument the schema does not declare as invalid whenever the schema lists ``properties`` and does
not set ``additionalProperties`` itself.

Validation is the maintained ``jsonschema`` library (Draft 2020-12, the dialect OpenAI documents),
not hand-written rules. A validator per distinct schema is built once and kept in a small LRU
cache keyed by the schema's canonical JSON. A schema the library cannot read (the gateway's
request validation lets odd but object-shaped schemas through) is *unchecked*, never a veto: the
check decides only what it can decide.

Most calls are valid, and ``jsonschema`` is pure Python, about a hundred times slower to find no
error than ``jsonschema-rs`` (a Rust validator of the same dialect, PyPI; the figures are in
docs/decisions/0010-rehearsal-cpu.md). So a call is first put to the Rust validator; only a call
it refuses goes to ``jsonschema``, whose error, the shallowest first, is the verdict's message.
Where the two libraries differ, ``jsonschema`` decides: a call the Rust one refuses and
``jsonschema`` accepts (NaN as a ``number``) is ok, and a schema with a ``pattern`` (ECMA-262
regular expressions in Rust, Python's ``re`` in ``jsonschema``) or one the Rust library cannot
build gets no fast path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import jsonschema_rs
import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from referencing import Registry
from referencing.exceptions import Unresolvable

from .messages import JSON_OBJECT, AssistantTurn, ToolCall

CHECK_CODE = "SCHEMA_INVALID"
CheckStatus = Literal["ok", "invalid", "unchecked"]


@dataclass(frozen=True, slots=True)
class CallCheck:
    """The check's verdict on one tool call; ``message`` says what is wrong (empty when ok)."""

    status: CheckStatus
    message: str = ""

    @property
    def invalid(self) -> bool:
        return self.status == "invalid"


OK = CallCheck("ok")


def _strict_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The schema with undeclared arguments refused at its top level."""
    return {**schema, "additionalProperties": False}


@dataclass(frozen=True, slots=True)
class _Validators:
    """One schema's validators: the reference, and the fast one where it may answer (or None)."""

    reference: Validator
    fast: jsonschema_rs.Draft202012Validator | None


@lru_cache(maxsize=512)
def _validators(schema_json: bytes) -> _Validators | None:
    schema = orjson.loads(schema_json)
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError:
        return None
    fast = None
    if b'"pattern' not in schema_json:  # ``pattern`` and ``patternProperties``: regex dialects
        try:
            # ``offline``: a client's ``$ref`` to a URL is never fetched (nor by ``jsonschema``).
            fast = jsonschema_rs.Draft202012Validator(schema, offline=True)
        except ValueError:  # jsonschema_rs.ValidationError: a schema it cannot build
            fast = None
    # An empty registry: without one, jsonschema still fetches a ``$ref`` to a URL (a deprecated
    # fallback), so a client's schema could make the gateway send a GET wherever it names.
    return _Validators(Draft202012Validator(schema, registry=Registry()), fast)


def _tool_specs(tools: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    specs: dict[str, Mapping[str, Any]] = {}
    for tool in tools:
        function = tool.get("function", tool)
        if isinstance(function, JSON_OBJECT) and isinstance(function.get("name"), str):
            specs[function["name"]] = function
    return specs


def _schema_for(function: Mapping[str, Any], reject_undeclared: bool) -> dict[str, Any]:
    parameters = function.get("parameters")
    schema: dict[str, Any] = dict(parameters) if isinstance(parameters, Mapping) else {}
    declared = isinstance(schema.get("properties"), Mapping)
    if "additionalProperties" in schema:
        return schema
    if function.get("strict") is True or (reject_undeclared and declared):
        return _strict_schema(schema)
    return schema


def _where(path: Sequence[object]) -> str:
    return "arguments" + "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in path)


class ToolChecker:
    """Checks calls against one request's tools; build one per request (it indexes the list)."""

    def __init__(self, tools: Sequence[Mapping[str, Any]], *, reject_undeclared: bool = True):
        self._specs = _tool_specs(tools)
        self._reject_undeclared = reject_undeclared
        # A rehearsal checks the same call more than once (its walk, then the committed turn).
        self._verdicts: dict[tuple[str, str], CallCheck] = {}

    def check_call(self, call: ToolCall) -> CallCheck:
        """The verdict on one call: unknown tool, arguments not an object, or a schema error."""
        key = (call.name, call.arguments)
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = self._verdicts[key] = self._check(call)
        return verdict

    def _check(self, call: ToolCall) -> CallCheck:
        function = self._specs.get(call.name)
        if function is None:
            return CallCheck("invalid", f"tool {call.name!r} is not among the request's tools")
        arguments = call.parsed_arguments
        if not isinstance(arguments, dict):
            return CallCheck("invalid", "arguments must be a JSON object")
        schema = _schema_for(function, self._reject_undeclared)
        validators = _validators(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS))
        if validators is None:
            return CallCheck("unchecked", "the tool's parameters are not a usable JSON Schema")
        if validators.fast is not None and validators.fast.is_valid(arguments):
            return OK
        try:
            error = min(validators.reference.iter_errors(arguments), key=_error_order, default=None)
        except Unresolvable:  # a ``$ref`` to a URL: neither library fetches one
            return CallCheck("unchecked", "the tool's parameters refer to a schema not in them")
        if error is None:
            return OK
        return CallCheck("invalid", f"{_where(error.absolute_path)}: {error.message}")

    def check_turn(self, turn: AssistantTurn) -> CallCheck:
        """The first failing call of a turn, else ok (unchecked when any call was unchecked)."""
        verdicts = [self.check_call(call) for call in turn.tool_calls]
        bad = next((v for v in verdicts if v.invalid), None)
        if bad is not None:
            return bad
        return next((v for v in verdicts if v.status == "unchecked"), OK)


def _error_order(error: Any) -> tuple[int, str]:
    # The shallowest error first, then by message, so the reported reason is deterministic.
    return (len(error.absolute_path), str(error.message))
