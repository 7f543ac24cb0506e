"""Scripted tool worlds the twin plays (and agents can use directly): airline, retail, bank.

``load_world(name)`` builds a fresh world; ``world_for_tools(names)`` finds the world whose tools a
request offers, so the twin can tell a world conversation from one with arbitrary tools.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from . import airline, bank, retail
from .base import (
    Call,
    Mistake,
    State,
    Task,
    ToolError,
    World,
    WorldTool,
)

__all__ = [
    "WORLD_NAMES",
    "Call",
    "Mistake",
    "State",
    "Task",
    "ToolError",
    "World",
    "WorldTool",
    "load_world",
    "world_for_tools",
]

_BUILDERS: dict[str, Callable[[], World]] = {
    "airline": airline.build,
    "retail": retail.build,
    "bank": bank.build,
}
WORLD_NAMES: tuple[str, ...] = tuple(_BUILDERS)


def load_world(name: str) -> World:
    """A fresh world by name (``airline``, ``retail`` or ``bank``)."""
    try:
        return _BUILDERS[name]()
    except KeyError:
        raise ValueError(
            f"unknown world {name!r}; choose one of {', '.join(WORLD_NAMES)}"
        ) from None


def world_for_tools(worlds: Iterable[World], tool_names: Iterable[str]) -> World | None:
    """The world that owns every offered tool (None when the tools belong to no world)."""
    names = set(tool_names)
    if not names:
        return None
    for world in worlds:
        if names <= set(world.tools):
            return world
    return None
