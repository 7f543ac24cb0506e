"""The latency model: prefill per uncached token, decode per token, continuous batching.

Prefill is compute-bound, so prompts are prefilled one after another (a lock). Decode is
bandwidth-bound: every running sequence advances one token per engine step, and a step costs a
little more as the batch grows; sequences beyond the batch limit wait for a free slot (vLLM's
"waiting" queue). So K concurrent requests overlap in decode, as on a GPU. The ``zero`` profile
sleeps nowhere, for fast tests.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path


@dataclass(frozen=True)
class LatencyProfile:
    """Costs in seconds. ``scale`` multiplies every cost (a demo can run an H100 at 1/10 speed)."""

    name: str
    request_overhead_s: float = 0.0
    prefill_per_token_s: float = 0.0
    decode_step_s: float = 0.0
    decode_step_per_seq_s: float = 0.0
    max_batch: int = 256

    @property
    def is_zero(self) -> bool:
        return (
            self.request_overhead_s == 0
            and self.prefill_per_token_s == 0
            and self.decode_step_s == 0
            and self.decode_step_per_seq_s == 0
        )

    def scaled(self, factor: float) -> LatencyProfile:
        return replace(
            self,
            request_overhead_s=self.request_overhead_s * factor,
            prefill_per_token_s=self.prefill_per_token_s * factor,
            decode_step_s=self.decode_step_s * factor,
            decode_step_per_seq_s=self.decode_step_per_seq_s * factor,
        )


ZERO = LatencyProfile("zero")
# Qwen3-8B in bf16 on one H100 SXM with vLLM; see docs/twin.md for where each number comes from.
H100 = LatencyProfile(
    "h100",
    request_overhead_s=0.004,
    prefill_per_token_s=0.00008,
    decode_step_s=0.0075,
    decode_step_per_seq_s=0.00004,
    max_batch=256,
)


def load_profile(spec: str, scale: float = 1.0) -> LatencyProfile:
    """``zero``, ``h100`` or a path to a JSON file with LatencyProfile's fields."""
    if spec == "zero":
        profile = ZERO
    elif spec == "h100":
        profile = H100
    else:
        fields = json.loads(Path(spec).read_text())
        if not isinstance(fields, dict):
            raise ValueError(f"latency profile {spec} must be a JSON object")
        fields.setdefault("name", Path(spec).stem)
        profile = LatencyProfile(**fields)
    return profile.scaled(scale) if scale != 1.0 else profile


class BatchScheduler:
    """Shared engine clock: serial prefill, batched decode with a slot limit."""

    DECODE_TICK_TOKENS = 4  # tokens advanced per sleep, to keep event-loop wake-ups cheap

    def __init__(self, profile: LatencyProfile) -> None:
        self.profile = profile
        self._prefill_lock = asyncio.Lock()
        self._slots = asyncio.Semaphore(profile.max_batch)
        self.running = 0
        self.waiting = 0

    async def admit(self, sequences: int) -> None:
        """Wait for a decode slot per sequence (``n`` choices are ``n`` sequences)."""
        self.waiting += 1
        try:
            for _ in range(min(sequences, self.profile.max_batch)):
                await self._slots.acquire()
        finally:
            self.waiting -= 1
        self.running += sequences

    def release(self, sequences: int) -> None:
        self.running -= sequences
        for _ in range(min(sequences, self.profile.max_batch)):
            self._slots.release()

    async def prefill(self, uncached_tokens: int) -> None:
        """Prefill the uncached part of one prompt (shared by all of a request's choices)."""
        if self.profile.is_zero:
            return
        async with self._prefill_lock:
            await asyncio.sleep(
                self.profile.request_overhead_s + uncached_tokens * self.profile.prefill_per_token_s
            )

    def step_s(self) -> float:
        return self.profile.decode_step_s + self.profile.decode_step_per_seq_s * self.running

    async def decode(self, tokens: int) -> AsyncIterator[int]:
        """Advance one sequence by ``tokens``, yielding how many tokens each tick produced."""
        left = tokens
        while left > 0:
            tick = min(self.DECODE_TICK_TOKENS, left)
            if not self.profile.is_zero:
                await asyncio.sleep(tick * self.step_s())
            left -= tick
            yield tick
