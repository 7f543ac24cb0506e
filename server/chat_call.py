"""The values that cross the service layers: a ``ChatCall`` going down, a ``JsonAnswer`` back up.

The chat service (``server/chat``) builds the call from the request; rehearsal
(``server/rehearse``) reads it; both answer with a ``JsonAnswer`` when the answer is whole.
Streamed answers are the layers' own (``StreamAnswer`` in ``server/engines``, a rehearsal run in
``server/rehearse``).

Each pass-through builds one of each, so they are plain slotted dataclasses, not frozen ones: a
frozen dataclass's ``__init__`` sets every field through ``object.__setattr__``, at more than
twice the cost. Nothing writes to them after they are built; the layers pass them on as values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rehearsal_gateway.rehearsal.budget import Budget

from .protocol import ChatRequestHead

PASSTHROUGH = "passthrough"


@dataclass(slots=True)
class HeadFields:
    """What a pass-through reads of a request head that the Rust pre-check passed
    (``server/chat/precheck.py``): ``ChatRequestHead``'s fields of the same names and values,
    since its strict validation converts nothing."""

    model: str | None = None
    user: str | None = None
    n: int | None = None
    stream: bool | None = None


@dataclass(slots=True)
class ChatCall:
    """One validated chat-completions request, ready to send."""

    # All of ChatCompletionRequest when the call is rehearsed; a pass-through's head, or only
    # the fields read of it when the pre-check passed it.
    request: ChatRequestHead | HeadFields
    body: dict[str, Any]  # the client's JSON as parsed (extras included)
    payload: bytes  # the bytes an engine receives for a pass-through
    model: str | None  # the engine-side model name (aliases resolved)
    affinity: bytes
    tenant: str
    session: str | None = None  # X-Session-Id, else the ``user`` field
    budget: Budget | None = None  # set when the call is to be rehearsed

    @property
    def stream(self) -> bool:
        return bool(self.request.stream)


@dataclass(slots=True)
class JsonAnswer:
    """A complete answer: the engine's JSON bytes (or ours), sent with one write."""

    body: bytes
    mode: str = PASSTHROUGH
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    outcome: str | None = None  # "degraded" for a degraded rehearsal; else from the status
    rehearsal: dict[str, Any] | None = None  # a rehearsal's summary, for the request's log line
