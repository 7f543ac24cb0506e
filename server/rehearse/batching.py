"""Imaginations that are ready together go to the engine as one batch call.

Parallel rehearsal walks its K candidates side by side, so their rehearsal-role calls (one per
imagined tool call) become ready in the same turn of the event loop, and they differ only in
their messages and seed. vLLM serves ``POST /v1/chat/completions/batch`` (0.32: ``messages`` a
list of conversations, one choice per conversation in order, the sampling fields shared, no
tools, no stream, ``n`` = 1), so K imaginations can be one HTTP exchange instead of K. What that
saves is per call, not per token: the gateway's request and response handling and socket work,
and vLLM's own API-server work per request (docs/decisions/0012-imagination-batching.md).

``Batcher`` is one rehearsal's: the first call to join waits one turn of the loop (every task
that was ready by then has run and joined), then sends what joined. Only calls that agree on
every field but ``messages`` and ``seed`` share a batch; one call alone goes as it always did.

- **Seed**: the batch carries its first call's seed. vLLM applies the one seed to each
  conversation; their prompts differ, so their samples do too, and a rehearsal's seed still
  fixes its outcome.
- **A batch the engine refuses** (any 4xx) is sent again as single calls, each of which then
  succeeds or fails on its own, as it would have without batching. A 404 or 405 (an engine
  without the route: an older vLLM, another server) also turns batching off for the whole
  gateway (``BatchRoute``; logged once).
- **Any other failure** (the engine's 5xx, timeout or connection error after ``EngineCalls``'
  retries) fails every call of the batch alike, as it would have failed each of them.
- **Cancellation**: a call whose task is cancelled leaves the batch (its slot stays taken until
  the engine answers); when the call sending the batch is cancelled, the calls waiting on it
  fail with ``GeneratorError`` — they are its siblings, cancelled with it in practice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from rehearsal_gateway.rehearsal.errors import GeneratorError, MalformedResponse
from rehearsal_gateway.rehearsal.messages import NO_USAGE, GenerationRequest, GenerationResponse

log = logging.getLogger("rehearsal_gateway.rehearse")

BATCH_PATH = "/v1/chat/completions/batch"
# Statuses that mean the engine has no batch route at all (FastAPI's 404 and 405).
ROUTE_MISSING = frozenset((404, 405))

Outcome = GenerationResponse | BaseException


class BatchRefused(Exception):
    """The engine refused a batch with a 4xx (``status``): its calls are sent one by one."""

    def __init__(self, status: int) -> None:
        super().__init__(f"batch refused with {status}")
        self.status = status


@dataclass(slots=True)
class BatchRoute:
    """Whether rehearsal sends batch calls: on until an engine answers that it has no route."""

    enabled: bool = True

    def missing(self, status: int) -> None:
        if self.enabled:
            log.warning(
                "an engine answered %s with %d: rehearsal batching is off for this gateway",
                BATCH_PATH, status,
            )  # fmt: skip
        self.enabled = False


def batchable(request: GenerationRequest) -> bool:
    """Whether a call may join a batch: a one-choice rehearsal-role call without tools."""
    return request.role == "rehearse" and request.n == 1 and request.tools is None


def shared_fields(body: dict[str, Any]) -> bytes:
    """What calls must agree on to share a batch: every field but ``messages`` and ``seed``."""
    rest = {k: v for k, v in body.items() if k not in ("messages", "seed")}
    return orjson.dumps(rest, option=orjson.OPT_SORT_KEYS)


def batch_body(bodies: list[dict[str, Any]]) -> bytes:
    """One batch request for ``bodies`` (which agree on ``shared_fields``)."""
    merged = {k: v for k, v in bodies[0].items() if k not in ("messages", "n")}
    merged["messages"] = [body["messages"] for body in bodies]
    return orjson.dumps(merged)


def split_answer(raw: bytes, count: int) -> list[GenerationResponse]:
    """A batch answer as ``count`` one-choice responses; the usage goes with the first.

    ``MalformedResponse`` unless it holds exactly one choice for each conversation.
    """
    try:
        answer = GenerationResponse.from_openai(orjson.loads(raw))
    except orjson.JSONDecodeError:
        raise MalformedResponse("the engine answered the batch with invalid JSON") from None
    if len(answer.choices) != count:
        message = f"the engine answered {len(answer.choices)} choices to a batch of {count}"
        raise MalformedResponse(message)
    return [
        GenerationResponse((choice,), answer.usage if index == 0 else NO_USAGE)
        for index, choice in enumerate(answer.choices)
    ]


@dataclass(eq=False, slots=True)
class _Joined:
    request: GenerationRequest
    body: dict[str, Any]
    future: asyncio.Future[GenerationResponse]


@dataclass(eq=False, slots=True)
class Batcher:
    """One rehearsal's batches (see the module docstring).

    ``one`` answers a call alone (given the engine body already built for it), as the adapter
    always did. ``send`` posts a batch body to
    ``BATCH_PATH`` and returns the engine's raw answer; it raises ``BatchRefused`` for a 4xx
    and ``GeneratorError`` for any other failure.
    """

    one: Callable[[GenerationRequest, dict[str, Any]], Awaitable[GenerationResponse]]
    send: Callable[[bytes, list[GenerationRequest]], Awaitable[bytes]]
    route: BatchRoute
    _forming: dict[bytes, list[_Joined]] = field(default_factory=dict)

    async def generate(
        self, request: GenerationRequest, body: dict[str, Any]
    ) -> GenerationResponse:
        """``request`` (whose engine body is ``body``) answered alone or in a batch."""
        key = shared_fields(body)
        forming = self._forming.get(key)
        if forming is not None:  # a batch is forming: join it
            future: asyncio.Future[GenerationResponse] = asyncio.get_running_loop().create_future()
            forming.append(_Joined(request, body, future))
            return await future
        joined: list[_Joined] = []
        self._forming[key] = joined
        try:
            await asyncio.sleep(0)  # one turn of the loop: every sibling ready by now joins
        except BaseException as exc:
            _settle(joined, [exc] * len(joined))
            raise
        finally:
            del self._forming[key]
        if not joined:
            return await self.one(request, body)
        try:
            outcomes = await self._send([(request, body), *((j.request, j.body) for j in joined)])
        except BaseException as exc:
            _settle(joined, [exc] * len(joined))
            raise
        _settle(joined, outcomes[1:])
        if isinstance(outcomes[0], BaseException):
            raise outcomes[0]
        return outcomes[0]

    async def _send(self, calls: list[tuple[GenerationRequest, dict[str, Any]]]) -> list[Outcome]:
        """Each call's outcome, in order: from one batch, or one by one when it is refused."""
        try:
            raw = await self.send(batch_body([b for _, b in calls]), [r for r, _ in calls])
        except BatchRefused as exc:
            if exc.status in ROUTE_MISSING:
                self.route.missing(exc.status)
            alone = (self.one(request, body) for request, body in calls)
            return list(await asyncio.gather(*alone, return_exceptions=True))
        return list(split_answer(raw, len(calls)))


def _settle(joined: list[_Joined], outcomes: list[Outcome]) -> None:
    """Each waiting call gets its outcome (one cancelled with its sender: GeneratorError)."""
    for member, outcome in zip(joined, outcomes, strict=True):
        if member.future.done():
            continue  # its own task was cancelled: nobody waits for it
        if isinstance(outcome, GenerationResponse):
            member.future.set_result(outcome)
        elif isinstance(outcome, Exception):
            member.future.set_exception(outcome)
        else:
            member.future.set_exception(GeneratorError("the batch was cancelled", role="rehearse"))
