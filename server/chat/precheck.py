"""A Rust pre-check of a pass-through's head: pydantic runs only for a body it refuses.

A pass-through is checked as far as the gateway reads it (``ChatRequestHead``). Pydantic builds
a model and a new dict for every message and tool it checks; ``jsonschema-rs`` only reads them,
several times faster (docs/decisions/ holds the figures). The schema is pydantic's own
(``ChatRequestHead.model_json_schema()``), so one model says what a request may be: a body the
Rust validator accepts is read straight from the parsed JSON (``HeadFields``), one it refuses is
checked by pydantic, which decides and writes the 400. The two may disagree in one direction
only, where JSON Schema cannot say what strict pydantic does: JSON Schema calls ``1.0`` an
integer, strict pydantic does not, so the integer fields (all top-level, which the builder
checks) must hold Python ints before the fast answer counts. ``tests/server/test_precheck.py``
holds the fast path to never accepting what pydantic refuses. The lifespan builds one
(``build_precheck``) and hands it to the chat service.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import jsonschema_rs

from ..chat_call import HeadFields
from ..protocol import ChatRequestHead

log = logging.getLogger("rehearsal_gateway.server")


class HeadPrecheck:
    """``fields(body)``: the head's ``HeadFields`` when the Rust validator passes it, else None."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.integer_fields = _top_level_integers(schema)
        self._validator = jsonschema_rs.Draft202012Validator(schema)

    def fields(self, body: dict[str, Any]) -> HeadFields | None:
        try:
            if not self._validator.is_valid(body):
                return None
        except ValueError:  # a value JSON cannot hold; never from a parsed body
            return None
        get = body.get
        for name in self.integer_fields:
            value = get(name)
            if value is not None and type(value) is not int:
                return None  # 1.0, which JSON Schema takes for an integer and pydantic refuses
        return HeadFields(get("model"), get("user"), get("n"), get("stream"))


def _top_level_integers(schema: dict[str, Any]) -> tuple[str, ...]:
    """The top-level properties that may be integers; ValueError if any other part may be."""
    top: list[str] = []
    below: list[Any] = [{k: v for k, v in schema.items() if k != "properties"}]
    for name, spec in schema.get("properties", {}).items():
        members = spec.get("anyOf", [spec])  # ``int | None`` is an anyOf of two
        if any(member.get("type") == "integer" for member in members):
            top.append(name)
        below.extend(v for member in members for k, v in member.items() if k != "type")
    if any(_integer_types(below)):
        raise ValueError("an integer below the top level: the pre-check cannot hold it to pydantic")
    return tuple(top)


def _integer_types(node: Any) -> Iterator[bool]:
    if isinstance(node, dict):
        kind = node.get("type")
        yield kind == "integer" or (isinstance(kind, list) and "integer" in kind)
        for value in node.values():
            yield from _integer_types(value)
    elif isinstance(node, list):
        for value in node:
            yield from _integer_types(value)


def build_precheck() -> HeadPrecheck | None:
    """The pre-check for ``ChatRequestHead``, or None (pydantic checks every head) if it cannot
    be built."""
    try:
        return HeadPrecheck(ChatRequestHead.model_json_schema())
    except (ValueError, jsonschema_rs.ValidationError) as exc:
        log.warning("request heads are checked by pydantic alone: %s", exc)
        return None
