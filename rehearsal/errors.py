"""The rehearsal core's exceptions: one hierarchy, so callers can catch the package as a whole.

::

    RehearsalError                 base of everything raised on purpose by ``rehearsal``
    ├── BudgetError(param)         a knob has the wrong type or lies outside the caps;
    │                              ``param`` names it (``rehearsal.depth``, ``X-Rehearsal-Depth``)
    ├── PromptError                a system instruction file could not be read or is empty
    └── GeneratorError             an engine call failed; adapters raise it (or a subclass)
        └── MalformedResponse      the engine answered, but not in the chat-completion shape

The planner never lets a ``GeneratorError`` from one branch fail a whole rehearsal: it degrades and
records why. Only when not a single acting call can be made does the error reach the caller.
Store failures are not part of this tree on purpose: the ``MemoryStore`` port may raise whatever
its backend raises, and the planner absorbs it (rehearsal without memory, reason recorded).
"""

from __future__ import annotations


class RehearsalError(Exception):
    """Base class of the exceptions raised by the ``rehearsal`` package."""


class BudgetError(RehearsalError, ValueError):
    """A rehearsal knob is invalid; ``param`` is the name the client used for it."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param
        self.message = message


class PromptError(RehearsalError):
    """A prompt asset (the simulator's system instruction) could not be loaded."""


class GeneratorError(RehearsalError):
    """One engine call failed (connection, timeout, 5xx, ...). ``role`` is the call's role."""

    def __init__(self, message: str, *, role: str | None = None) -> None:
        super().__init__(message)
        self.role = role


class MalformedResponse(GeneratorError):
    """The engine's answer is not a chat completion this package can read."""
