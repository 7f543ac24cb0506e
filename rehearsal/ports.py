"""The two seams through which the pure core reaches the world.

``Generator`` is one chat-completion call against an engine, optionally with ``n`` choices. The
server implements it over its engine pool: ``request.to_openai_body()`` plus ``model`` is the
POST body, and ``from_openai_response(json)`` reads the answer. ``request.role`` says which kind
of call it is (``act``, ``rehearse``, ``commit``) for routing and metrics. Failures must surface
as ``GeneratorError`` (translate transport errors once, in the adapter); the planner absorbs
them branch by branch.

``MemoryStore`` keeps session memory and grounding; its signatures match the server's store so
that the store can be passed in as it is. Values are plain JSON objects: ``MemoryEntry.to_dict``
and ``GroundingObservation.to_dict`` give their shapes. A store may raise anything its backend
raises; the planner records the failure and carries on without memory.

``rehearsal.testing`` ships in-memory fakes of both.
"""

from __future__ import annotations

from typing import Any, Protocol

from .messages import GenerationRequest, GenerationResponse


class Generator(Protocol):
    """One chat-completion call; raises ``GeneratorError`` when the engine fails."""

    async def generate(self, request: GenerationRequest) -> GenerationResponse: ...


class MemoryStore(Protocol):
    """Session memory (newest first, capped by the store) and real tool results per tenant.

    ``recent_memory`` returns up to ``limit`` entries of the session, newest first;
    ``append_memory`` remembers this rehearsal's entries; ``grounding`` returns real observations
    of ``tool``, the one for exactly ``canonical_args`` first when there is one.
    """

    async def recent_memory(self, tenant: str, session: str, limit: int) -> list[Any]: ...

    async def append_memory(self, tenant: str, session: str, entries: list[Any]) -> None: ...

    async def grounding(
        self, tenant: str, tool: str, canonical_args: str, limit: int
    ) -> list[Any]: ...
