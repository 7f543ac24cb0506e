"""The rehearsal core's ``Generator`` port, implemented over the gateway's engines.

``EngineGenerator`` turns one ``GenerationRequest`` into one engine call through ``EngineCalls``
(so rehearsal calls get the same routing, retries, limits and timeouts as pass-through), reads the
answer with the core's own reader, and translates every engine failure into ``GeneratorError``
once, here. All calls of one rehearsal share the request's affinity key, so they land on the
engine that already holds the conversation's prefix in its cache. Imaginations that are ready
together go as one batch call instead (``server/rehearse/batching.py``, ``RGW_REHEARSAL_BATCH``).

Every call is bounded by the rehearsal's ``ends_at`` (its ``deadline_ms`` plus one commit,
``RGW_COMMIT_TIMEOUT``): the planner's own deadline cuts the rehearsal phase, and this bound
cuts the commit or salvage call after it, so no rehearsal engine call outlives the request's
deadline by more than one commit — a hung engine yields an ``EngineTimeout`` (504), not a wait
for a read timeout.

Every call is a whole answer, the commit included: a committed action is verified (checked and
rehearsed) before any of it reaches the client, so no engine stream is relayed while the planner
still decides: a streamed answer writes the decided turn as chunks (server/http/rehearsal_response).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import orjson

from rehearsal_gateway.rehearsal.errors import GeneratorError, MalformedResponse
from rehearsal_gateway.rehearsal.messages import (
    GenerationRequest,
    GenerationResponse,
    from_openai_response,
)

from ..engines.calls import EngineCalls
from ..errors import EngineError, EngineRejected
from ..settings import Role
from .batching import (
    BATCH_PATH,
    Batcher,
    BatchRefused,
    BatchRoute,
    batchable,
)

CallObserver = Callable[[str, float], None]


def pool_role(role: str) -> Role:
    """The engine role that serves a core role: commits are acting calls."""
    return "rehearse" if role == "rehearse" else "act"


class EngineGenerator:
    """One rehearsal's view of the engines (``rehearsal.ports.Generator``)."""

    def __init__(
        self,
        calls: EngineCalls,
        *,
        model: str | None,
        affinity: bytes,
        on_call: CallObserver,
        rehearse_priority: int | None = None,
        ends_at: float | None = None,
        batch_route: BatchRoute | None = None,
    ) -> None:
        self.calls = calls
        self.model = model
        self.affinity = affinity
        self.on_call = on_call
        self.rehearse_priority = rehearse_priority
        self.ends_at = ends_at  # event-loop time every call must end by (None: the request bound)
        # Imaginations ready together go as one batch call while the route serves them.
        self.batcher = (
            None if batch_route is None else Batcher(self.one, self.send_batch, batch_route)
        )

    def body(self, request: GenerationRequest) -> dict[str, Any]:
        """The engine request; a rehearsal-role call carries ``rehearse_priority`` when set."""
        extra: dict[str, Any] = {}
        if self.rehearse_priority is not None and request.role == "rehearse":
            extra["priority"] = self.rehearse_priority
        return {"model": self.model, **request.to_openai_body(), **extra}

    def _bound(self) -> float | None:
        """What is left of ``ends_at`` (at least a millisecond), or None for the request bound."""
        if self.ends_at is None:
            return None
        left = self.ends_at - asyncio.get_running_loop().time()
        return left if left > 0 else 0.001

    async def generate(self, request: GenerationRequest) -> GenerationResponse:
        if self.batcher is not None and self.batcher.route.enabled and batchable(request):
            return await self.batcher.generate(request, self.body(request))
        return await self.one(request)

    async def one(
        self, request: GenerationRequest, body: dict[str, Any] | None = None
    ) -> GenerationResponse:
        """``request`` as one engine call of its own (``body``: its engine body, if built)."""
        started = time.perf_counter()
        try:
            raw = await self.calls.call(
                orjson.dumps(self.body(request) if body is None else body),
                role=pool_role(request.role),
                model=self.model,
                affinity=self.affinity,
                label=request.role,
                bound_s=self._bound(),
                samples=request.n,
                # Parallel rehearsal's K acting samples: one is the turn, the rest candidates.
                candidates=request.n - 1 if request.role == "act" else 0,
                owner=self,  # its own acting calls do not preempt its imaginations
            )
        except EngineError as exc:
            message = f"{request.role} call failed: {exc.message}"
            raise GeneratorError(message, role=request.role) from exc
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise MalformedResponse("the engine answered with invalid JSON") from None
        response = from_openai_response(body)
        self.on_call(request.role, time.perf_counter() - started)
        return response

    async def send_batch(self, payload: bytes, requests: list[GenerationRequest]) -> bytes:
        """One batch of rehearsal-role calls (``server/rehearse/batching.py``): a slot each."""
        started = time.perf_counter()
        try:
            raw = await self.calls.call(
                payload, role="rehearse", model=self.model, affinity=self.affinity,
                label="rehearse", path=BATCH_PATH, bound_s=self._bound(), samples=len(requests),
                owner=self,
            )  # fmt: skip
        except EngineRejected as exc:
            raise BatchRefused(exc.status) from exc
        except EngineError as exc:
            raise GeneratorError(f"rehearse call failed: {exc.message}", role="rehearse") from exc
        elapsed = time.perf_counter() - started
        for request in requests:
            self.on_call(request.role, elapsed)
        return raw
