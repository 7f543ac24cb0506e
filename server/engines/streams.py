"""An engine's streamed answer, handed over as whole SSE events.

``EngineStream.rest`` yields the events after the first (which ``EngineClient.open_stream``
waited for). A read that ends mid-event keeps its tail for the next read, so whatever cuts the
stream — a reset, silence past the chunk timeout, an engine that stopped answering, an end
without ``data: [DONE]`` — the client has seen only whole events, and the relay's error event
starts on a line of its own. The common case, a read that ends on an event, costs one
``endswith``. Each read waits at most ``chunk_s`` (``RGW_CHUNK_TIMEOUT``), whatever the
transport.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx

from ..errors import EngineError, EngineFailed, EngineTimeout
from ..telemetry.metrics import GatewayMetrics
from ..telemetry.waits import waiting
from .faults import PASSTHROUGH_ROLE, count_usage, hung, translate
from .pool import Engine
from .transport import EngineResponse

CHAT_PATH = "/v1/chat/completions"
# Streams that end with ``data: [DONE]``; one that ends without it was cut.
DONE_PATHS = frozenset((CHAT_PATH, "/v1/completions"))
DONE = b"data: [DONE]\n\n"
SSE_STARTS = (b"data:", b"event:", b"id:", b"retry:", b":")


def split_events(data: bytes) -> tuple[bytes, bytes]:
    """``data`` as (whole SSE events, the unfinished tail); cheap when it ends on an event."""
    if data.endswith(b"\n\n"):
        return data, b""
    cut = data.rfind(b"\n\n")
    return (b"", data) if cut < 0 else (data[: cut + 2], data[cut + 2 :])


@dataclass(eq=False)
class EngineStream:
    """An open streamed answer whose first chunk has arrived; iterate for the rest."""

    engine: Engine
    response: EngineResponse
    chunks: AsyncIterator[bytes]  # the response's one byte iterator, ``first`` already taken
    first: bytes  # whole SSE events only
    role: str
    started: float
    metrics: GatewayMetrics
    tail: bytes = b""  # the unfinished event after ``first`` / the last chunk handed over
    expects_done: bool = True  # the stream must end with ``data: [DONE]``
    chunk_s: float = 30.0  # the longest wait for each read
    last: bytes = b""
    _closed: bool = False

    async def rest(self) -> AsyncIterator[bytes]:
        """The whole events after ``first``; a failure or a cut raises an ``EngineError``.

        An unfinished event at a failure is dropped, never handed over: the caller's error event
        then starts on a line of its own.
        """
        engine = self.engine
        last = self.first
        try:
            while True:
                task = engine.watch()
                try:
                    with waiting():
                        async with asyncio.timeout(self.chunk_s):
                            chunk = await anext(self.chunks, b"")
                except TimeoutError:
                    silent = f"engine {engine.name} went silent for longer than RGW_CHUNK_TIMEOUT"
                    raise self._fail(EngineTimeout(silent)) from None
                except asyncio.CancelledError:
                    if engine.take_abort(task):
                        raise self._fail(hung(engine)) from None
                    raise
                finally:
                    engine.unwatch(task)
                if not chunk:
                    break
                engine.progressed()
                if self.tail:
                    chunk = self.tail + chunk
                    self.tail = b""
                if not chunk.endswith(b"\n\n"):
                    chunk, self.tail = split_events(chunk)
                    if not chunk:
                        continue
                if self.role == PASSTHROUGH_ROLE and b'"usage":{' in chunk:
                    self.count_usage(chunk)
                last = chunk
                yield chunk
        except httpx.HTTPError as exc:
            raise self._fail(translate(exc, engine)) from exc
        self.last = last
        if self.tail or (self.expects_done and not last.endswith(DONE)):
            raise self._fail(EngineFailed(f"engine {engine.name} cut the stream short"))

    def _fail(self, error: EngineError) -> EngineError:
        self.metrics.engine_error(self.engine.name, error.kind)
        return error

    def count_usage(self, chunk: bytes) -> None:
        # The usage chunk (``stream_options.include_usage``) comes last and whole in practice;
        # one split across two reads goes uncounted rather than slowing every chunk down. Only
        # that chunk (empty ``choices``) counts: with vLLM's ``continuous_usage_stats`` every
        # chunk carries the running totals, which summed would count the stream many times over.
        for line in chunk.split(b"\n"):
            if line.startswith(b"data: {") and b'"usage":{' in line and b'"choices":[]' in line:
                count_usage(self.metrics, line[6:])

    async def aclose(self) -> None:
        """Close the upstream response (which aborts the engine's request if still running)."""
        if self._closed:
            return
        self._closed = True
        await self.response.aclose()
        elapsed = time.perf_counter() - self.started
        self.metrics.observe_engine_call(self.engine.name, self.role, elapsed)
