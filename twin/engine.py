"""The twin's engine: role detection, choices, token accounting, prefix cache and timing.

``TwinEngine.prepare`` turns a validated request into a ``Generation`` (all choices decided up
front, deterministically from the seed); ``run`` then spends the modelled time — prefill of the
uncached prompt once, then batched decode — and records vLLM's metrics. Streaming paces deltas
through the same decode clock.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from .acting import ActingPolicy, ActingRequest
from .config import VLLM_VERSION, TwinSettings
from .latency import BatchScheduler, load_profile
from .memory_note import split_note
from .metrics import TwinMetrics
from .prefix_cache import PrefixCache
from .prompt import message_text, render_prompt
from .protocol import ChatRequest, TwinError
from .schema import JsonObject
from .simulated_user import user_scenario, user_turn
from .simulator import (
    MalformedRehearsal,
    Simulator,
    is_rehearsal,
    parse_prompt,
)
from .tokens import tokenize
from .turn import ChoiceOutput, Draft, finish
from .worlds import WORLD_NAMES, World, load_world


def _without_call_ids(messages: Any) -> Any:
    """The messages minus tool-call ids: Qwen3's template does not render them, so a seeded vLLM
    samples the same whatever ids a client or gateway minted, and the twin must as well."""
    if not isinstance(messages, list):
        return messages
    kept: list[Any] = []
    for message in messages:
        if isinstance(message, dict):
            message = {k: v for k, v in message.items() if k != "tool_call_id"}
            calls = message.get("tool_calls")
            if isinstance(calls, list):
                message["tool_calls"] = [
                    {k: v for k, v in c.items() if k != "id"} if isinstance(c, dict) else c
                    for c in calls
                ]
        kept.append(message)
    return kept


@dataclass(frozen=True)
class Generation:
    """A request's decided outcome: choices, prompt accounting and its role."""

    role: str  # acting | rehearsal | chat
    choices: tuple[ChoiceOutput, ...]
    prompt_tokens: int
    cached_tokens: int
    created_cache_tokens: int = 0
    logprobs_top: int | None = None  # alternatives per token's logprobs; None: none asked

    @property
    def completion_tokens(self) -> int:
        return sum(c.completion_tokens for c in self.choices)

    @property
    def reasoning_tokens(self) -> int:
        return sum(c.reasoning_tokens for c in self.choices)


class TwinEngine:
    """Owns the worlds, the policy, the simulator, the prefix cache and the batch clock."""

    def __init__(self, settings: TwinSettings) -> None:
        self.settings = settings
        names = WORLD_NAMES if settings.world == "auto" else (settings.world,)
        self.worlds: list[World] = [load_world(name) for name in names]
        self.policy = ActingPolicy(self.worlds, settings.skill)
        self.simulator = Simulator(self.worlds, settings.fidelity, settings.grounding_gain)
        self.cache = PrefixCache(settings.cache_blocks)
        self.scheduler = BatchScheduler(load_profile(settings.latency, settings.latency_scale))
        self.metrics = TwinMetrics(settings.model_names[0])
        self._rng = random.Random(settings.seed)
        # vLLM's is ``vllm-<version>-<hash of its config>``; the twin hashes its settings.
        config_hash = hashlib.sha256(settings.describe().encode()).hexdigest()[:8]
        self.fingerprint = f"vllm-{VLLM_VERSION}-{config_hash}"

    def check_model(self, model: str | None) -> None:
        if model is not None and model not in self.settings.model_names:
            raise TwinError(f"The model `{model}` does not exist.", param="model", status=404)

    def _choice_rng(self, request: ChatRequest, body: JsonObject, index: int) -> random.Random:
        """Choice ``index``'s randomness: vLLM seeds it with ``seed + index`` (so choice 1 of
        seed 7 is choice 0 of seed 8); greedy decoding ignores the seed altogether."""
        if request.greedy:
            seed: int | None = None
        elif request.seed is None:
            return random.Random(self._rng.getrandbits(64))
        else:
            seed = request.seed + index
        messages = _without_call_ids(body.get("messages"))
        digest = hashlib.sha256(
            json.dumps([seed, messages, body.get("tools")], sort_keys=True).encode()
        ).hexdigest()
        return random.Random(digest)

    def _draft(self, request: ChatRequest, messages: list[JsonObject], rng: random.Random) -> Draft:
        last_user = next((m for m in reversed(messages) if m.get("role") == "user"), None)
        if not request.tools and last_user is not None and is_rehearsal(message_text(last_user)):
            try:
                prompt = parse_prompt(message_text(last_user))
            except MalformedRehearsal as exc:
                raise TwinError(f"Malformed rehearsal prompt: {exc}", param="messages") from exc
            return self.simulator.draft(prompt, rng)
        scenario = user_scenario(messages)
        if scenario is not None:
            return user_turn(messages, scenario)
        conversation, note = split_note(messages)
        tools = {t.function.name: t.function.parameters or {} for t in request.tools or []}
        acting = ActingRequest(
            messages=conversation,
            tools=tools,
            tool_choice=request.tool_choice_name,
            greedy=request.greedy,
            note=note,
        )
        return self.policy.act(acting, rng)

    def prepare(self, request: ChatRequest, body: JsonObject) -> Generation:
        """Decide every choice and account the prompt (prefilled once for all ``n``)."""
        messages = [m.model_dump(exclude_none=True) for m in request.messages]
        tools = [t.model_dump(exclude_none=True) for t in request.tools or []]
        prompt_tokens = tokenize(render_prompt(messages, tools))
        role = "acting" if tools else "chat"
        choices: list[ChoiceOutput] = []
        for index in range(request.n):
            rng = self._choice_rng(request, body, index)
            draft = self._draft(request, messages, rng)
            if draft.content.startswith("<execution_result>"):
                role = "rehearsal"
            choices.append(
                finish(
                    draft,
                    index=index,
                    thinking=request.thinking,
                    max_tokens=request.token_limit,
                    stop=request.stops,
                    rng=rng,
                )
            )
        cached, created = self.cache.admit_counting(prompt_tokens)
        self.metrics.prompt_tokens.inc(len(prompt_tokens))
        self.metrics.prefix_cache_queries.inc(len(prompt_tokens))
        self.metrics.prefix_cache_hits.inc(cached)
        return Generation(
            role, tuple(choices), len(prompt_tokens), cached, created, request.logprobs_top
        )

    async def run(self, generation: Generation) -> AsyncIterator[int]:
        """Spend the modelled time; yields 0 after prefill, then each decode tick's tokens."""
        started = time.perf_counter()
        sequences = len(generation.choices)
        self.metrics.waiting.inc()
        try:
            await self.scheduler.admit(sequences)
        finally:
            self.metrics.waiting.dec()
        self.metrics.running.inc()
        try:
            await self.scheduler.prefill(generation.prompt_tokens - generation.cached_tokens)
            self.metrics.ttft.observe(time.perf_counter() - started)
            yield 0
            longest = max(c.completion_tokens for c in generation.choices)
            async for tick in self.scheduler.decode(longest):
                yield tick
        finally:
            self.metrics.running.dec()
            self.scheduler.release(sequences)
            self.metrics.generation_tokens.inc(generation.completion_tokens)
            self.metrics.e2e_latency.observe(time.perf_counter() - started)
            for choice in generation.choices:
                self.metrics.finished(choice.finish_reason)
