"""The Rust pre-check of a pass-through's head never passes what pydantic refuses.

``server/chat/precheck.py`` answers for ``ChatRequestHead`` whenever ``jsonschema-rs`` accepts a
body, so it must be at least as strict as pydantic everywhere. Hypothesis takes the benchmarks'
realistic bodies (``benchmarks/bodies.py``, small and agent) and one body carrying the head's
other typed fields, replaces, adds or deletes one value anywhere in them (every JSON type, the edge
numbers of ``n``, ``1.0`` for an integer), and holds the two checks to one verdict wherever the
pre-check says yes; where it says no, pydantic's answer stands (and is what the client gets).
"""

from __future__ import annotations

import copy
import random
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from benchmarks.bodies import build_bodies
from rehearsal_gateway.server.chat.precheck import HeadPrecheck, build_precheck
from rehearsal_gateway.server.chat_call import HeadFields
from rehearsal_gateway.server.protocol import ChatRequestHead

# One pre-check for the module, built as the lifespan builds an app's.
PRECHECK = build_precheck()
BODIES = [orjson.loads(raw) for raw in build_bodies("small", 6, 7) + build_bodies("agent", 6, 7)]
BODIES.append(
    {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "n": 2,
        "stream": True,
        "stream_options": {"include_usage": True},
        "tool_choice": {"type": "function", "function": {"name": "f"}},
        "logit_bias": {"7": 1.5},
        "metadata": {"k": "v"},
        "stop": ["x"],
        "seed": 3,
        "top_k": 5,
    }
)

ODD_VALUES = [
    None, True, False, 0, 1, -1, 128, 129, 1.0, 2.5, -0.0, "", "x", "object", "dict", "function",
    "user", "tool", "assistant", [], [1], ["x"], [{}], {}, {"a": 1}, {"type": "object"},
    {"role": "user"}, {"role": "user", "content": "hi"}, {"type": "dict"},
]  # fmt: skip


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON value: each dict key and list index, at every depth."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found.extend(_paths(item, (*prefix, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.extend(_paths(item, (*prefix, index)))
    return found


def _mutate(body: dict[str, Any], rng: random.Random, new: Any, how: str) -> dict[str, Any]:
    out = copy.deepcopy(body)
    # Half the time a top-level field (where the head's scalars live), else anywhere.
    path = (rng.choice(list(out)),) if rng.random() < 0.5 else rng.choice(_paths(out)[1:])
    parent = out
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    if how == "delete":
        del parent[last]
    elif how == "add" and isinstance(parent, dict):
        parent[f"{last}_extra" if rng.random() < 0.5 else "role"] = new
    else:
        parent[last] = new
    return out


def _pydantic_accepts(body: dict[str, Any]) -> bool:
    try:
        ChatRequestHead.model_validate(body)
    except ValidationError:
        return False
    return True


def _agree(precheck: HeadPrecheck, body: dict[str, Any]) -> None:
    fields = precheck.fields(body)
    if fields is None:
        return  # pydantic decides, as it always did
    assert _pydantic_accepts(body), f"the pre-check passed a body pydantic refuses: {body!r}"
    head = ChatRequestHead.model_validate(body)
    assert fields == HeadFields(head.model, head.user, head.n, head.stream)


def test_the_precheck_is_built_and_passes_every_realistic_body() -> None:
    assert PRECHECK is not None
    for body in BODIES:
        assert PRECHECK.fields(body) is not None, body
        _agree(PRECHECK, body)


@settings(max_examples=1500)
@given(
    index=st.integers(0, len(BODIES) - 1),
    seed=st.integers(0, 2**32 - 1),
    new=st.sampled_from(ODD_VALUES),
    how=st.sampled_from(["replace", "replace", "delete", "add"]),
)
def test_a_mutated_body_is_never_passed_when_pydantic_refuses_it(
    index: int, seed: int, new: Any, how: str
) -> None:
    assert PRECHECK is not None
    _agree(PRECHECK, _mutate(BODIES[index], random.Random(seed), new, how))


@pytest.mark.parametrize(
    ("field", "value"),
    [("n", 1.0), ("n", 0), ("n", 129), ("n", True), ("max_tokens", 16.0), ("seed", 2.0),
     ("temperature", True), ("stream", 1), ("model", 3), ("messages", [])],
)  # fmt: skip
def test_values_strict_pydantic_refuses_go_to_pydantic(field: str, value: Any) -> None:
    assert PRECHECK is not None
    body = {**BODIES[0], field: value}
    assert not _pydantic_accepts(body)
    assert PRECHECK.fields(body) is None


def test_the_integer_fields_are_the_top_level_ones() -> None:
    assert PRECHECK is not None
    assert set(PRECHECK.integer_fields) == {
        "top_logprobs", "max_tokens", "max_completion_tokens", "n", "seed", "top_k"
    }  # fmt: skip


@pytest.mark.parametrize("where", ["a definition", "inside a top-level field"])
def test_an_integer_below_the_top_level_is_refused_at_build(where: str) -> None:
    schema = ChatRequestHead.model_json_schema()
    if where == "a definition":
        schema["$defs"]["StreamOptions"]["properties"]["every"] = {"type": "integer"}
    else:
        schema["properties"]["stop"]["anyOf"].append(
            {"type": "array", "items": {"type": "integer"}}
        )
    with pytest.raises(ValueError, match="below the top level"):
        HeadPrecheck(schema)


def test_a_precheck_that_cannot_be_built_leaves_pydantic_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(self: HeadPrecheck, schema: dict[str, Any]) -> None:
        raise ValueError("no schema today")

    monkeypatch.setattr(HeadPrecheck, "__init__", broken)
    assert build_precheck() is None
