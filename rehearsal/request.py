"""What a rehearsal is asked to do: the client's request as rehearsal reads it, and the
operator's knobs that hold for every request (``rehearsal/context.py`` runs them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .auto import AutoSettings
from .messages import Message
from .prompts import DEFAULT_SYSTEM_INSTRUCTION
from .risk import ToolRisk
from .trust import Policy


@dataclass(frozen=True, slots=True)
class RehearsalRequest:
    """The client's chat request, as far as rehearsal needs it.

    ``temperature``, ``top_p`` and ``seed`` are the client's own and are used only for a plain,
    unrehearsed acting call; rehearsal calls sample with the budget's knobs. ``extra`` (top_k,
    tool_choice, chat_template_kwargs, ...) is passed through on every acting call.
    """

    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...]
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    tenant: str | None = None
    session: str | None = None
    trust: Mapping[str, Policy] = field(default_factory=dict)  # tool -> policy; absent: trusted
    risk: Mapping[str, ToolRisk] = field(default_factory=dict)  # tool -> class; absent: unknown
    imagine_reads: bool = True  # False: a read_only call is not imagined (rehearsal.risk)
    # Under ``budget: "auto"``: tool -> (learned K, why) (rehearsal.auto); absent: learning_k.
    auto: Mapping[str, tuple[int, str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PlannerSettings:
    """Operator-level knobs that are not per request."""

    system_instruction: str = DEFAULT_SYSTEM_INSTRUCTION
    commit_temperature: float = 0.2
    memory_tokens: int = 600
    rehearse_max_tokens: int | None = 2048
    rehearse_extra: Mapping[str, Any] = field(default_factory=lambda: {"top_k": 20})
    grounding_limit: int = 3
    session_memory_limit: int = 8
    reject_undeclared: bool = True  # rehearsal.checks: undeclared arguments are invalid
    # Share of calls of an ``ignore_vetoes`` tool still imagined, so that trust can be re-earned;
    # the rest are not imagined (their vetoes would not be acted on: pure cost).
    probe_rate: float = 1.0
    auto: AutoSettings = field(default_factory=AutoSettings)  # ``budget: "auto"`` (rehearsal.auto)
