"""Fidelity between imagined and real tool results: the documented measure, case by case."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rehearsal_gateway.rehearsal.fidelity import fidelity, parse_observation

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4)
    ),
    max_leaves=12,
)


@pytest.mark.parametrize(
    ("imagined", "real", "expected"),
    [
        pytest.param({"a": 1, "b": "x"}, {"a": 1, "b": "x"}, 1.0, id="identical-object"),
        pytest.param({}, {}, 1.0, id="empty-objects"),
        pytest.param([], [], 1.0, id="empty-arrays"),
        pytest.param({"a": 1, "b": 2}, {"a": 1}, 0.5, id="invented-key"),
        pytest.param({"a": 10}, {"a": 5}, 0.5, id="number-half"),
        pytest.param({"a": 1}, {"a": -1}, 0.0, id="number-opposite"),
        pytest.param(0, 0.0, 1.0, id="int-float-equal"),
        pytest.param("order not found", "Order NOT found", 1.0, id="string-case"),
        pytest.param("pending order", "shipped order", 1 / 3, id="string-overlap"),
        pytest.param("!!", "??", 0.0, id="string-no-words"),
        pytest.param([1, 2], [1, 2, 3], 2 / 3, id="array-missing-item"),
        pytest.param(True, True, 1.0, id="bool-equal"),
        pytest.param(True, 1, 0.0, id="bool-vs-number"),
        pytest.param(None, None, 1.0, id="null-equal"),
        pytest.param(None, {}, 0.0, id="null-vs-object"),
        pytest.param({"a": [1]}, {"a": "1"}, 0.0, id="type-mismatch"),
        pytest.param(
            {"error_tool_call": {"code": "INVALID_PARAMETERS"}},
            {"order_id": "#W1", "status": "pending"},
            0.0,
            id="veto-vs-success",
        ),
    ],
)
def test_fidelity_table(imagined: Any, real: Any, expected: float) -> None:
    """Each JSON shape scores as the module docstring documents."""
    assert fidelity(imagined, real) == pytest.approx(expected, abs=1e-4)


@given(json_values, json_values)
def test_fidelity_is_bounded_and_symmetric(a: Any, b: Any) -> None:
    """Any two JSON values score within [0, 1], the same in both directions."""
    score = fidelity(a, b)
    assert 0.0 <= score <= 1.0
    assert score == fidelity(b, a)


@given(json_values)
def test_fidelity_of_a_value_with_itself_is_one(value: Any) -> None:
    """A perfect imagination scores exactly 1."""
    assert fidelity(value, value) == 1.0


def test_parse_observation_reads_json_and_keeps_text() -> None:
    """Tool content that is JSON is parsed; other text stays a string."""
    assert parse_observation('{"a": [1, 2]}') == {"a": [1, 2]}
    assert parse_observation("plain words") == "plain words"
