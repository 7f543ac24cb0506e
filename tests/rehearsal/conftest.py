"""Shared data for the core's tests: a small retail tool set and a conversation that uses it."""

from __future__ import annotations

import random
from typing import Any

import pytest

from rehearsal_gateway.rehearsal.budget import Budget
from rehearsal_gateway.rehearsal.request import RehearsalRequest

TOOLS: tuple[dict[str, Any], ...] = (
    {
        "type": "function",
        "function": {
            "name": "get_order",
            "description": "Look an order up by id.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "cancel_order",
            "description": "Cancel a pending order.",
            "parameters": {
                "type": "object",
                "properties": {
                    "order_id": {"type": "string"},
                    "reason": {"enum": ["no longer needed", "ordered by mistake"]},
                },
                "required": ["order_id", "reason"],
            },
        },
    },
)

CONVERSATION: tuple[dict[str, Any], ...] = (
    {"role": "system", "content": "You are a retail support agent."},
    {"role": "user", "content": "Please cancel order #W1001, I no longer need it."},
)


def make_request(**overrides: Any) -> RehearsalRequest:
    """The shared conversation as a rehearsal request, with fields overridden."""
    fields: dict[str, Any] = {"messages": CONVERSATION, "tools": TOOLS}
    fields.update(overrides)
    return RehearsalRequest(**fields)


def budget(**overrides: Any) -> Budget:
    """A budget with the defaults except ``overrides``."""
    return Budget(**overrides)


@pytest.fixture
def rng() -> random.Random:
    """A seeded random source, so engine seeds are reproducible."""
    return random.Random(7)
