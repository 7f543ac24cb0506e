"""vLLM's ``POST /v1/chat/completions/batch`` (0.32) on the twin: several conversations, one call.

As vLLM does it (``OpenAIServingChatBatch``): ``messages`` is a list of conversations, each
rendered and generated as a request of its own with the body's shared fields (its one ``seed``
too), all at once on the engine; the answer is one chat completion whose choice ``i`` answers
conversation ``i`` and whose usage is their sum. It refuses ``n`` other than 1 and beam search,
and a ``tool_choice`` other than ``"none"``; like any vLLM request model it ignores fields it
does not declare, so ``tools`` and ``stream`` are dropped (no tool use, no streaming), and one
bad conversation fails the whole batch.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .config import MAX_MODEL_LEN
from .engine import Generation, TwinEngine
from .protocol import TwinError, parse_request
from .responses import completion_body
from .schema import JsonObject

# Fields vLLM's BatchChatCompletionRequest does not declare: ignored, never passed on.
_IGNORED = ("messages", "tools", "stream", "stream_options", "parallel_tool_calls")


def prepare_batch(engine: TwinEngine, body: Any) -> tuple[str | None, list[Generation]]:
    """The batch's model and each conversation's decided generation; ``TwinError`` if refused."""
    if not isinstance(body, dict):
        raise TwinError("the request body must be a JSON object")
    conversations = body.get("messages")
    if not isinstance(conversations, list) or not conversations:
        raise TwinError("messages: List should have at least 1 item", param="messages")
    if body.get("n", 1) not in (1, None):
        message = "Batch chat completions do not support `n > 1`. Please set `n` to 1."
        raise TwinError(message, param="n")
    if body.get("use_beam_search"):
        raise TwinError("Batch chat completions do not support beam search.", param="n")
    if body.get("tool_choice", "none") not in ("none", None):
        raise TwinError("tool_choice: Input should be 'none'", param="tool_choice")
    shared = {key: value for key, value in body.items() if key not in _IGNORED}
    generations = []
    model: str | None = None
    for index, conversation in enumerate(conversations):
        if not isinstance(conversation, list) or not conversation:
            param = f"messages.{index}"
            raise TwinError(f"{param}: List should have at least 1 item", param=param)
        single = {**shared, "messages": conversation}
        request = parse_request(single, MAX_MODEL_LEN)
        engine.check_model(request.model)
        model = request.model
        generations.append(engine.prepare(request, single))
    return model, generations


async def run_batch(engine: TwinEngine, generations: list[Generation]) -> None:
    """Spend every conversation's modelled time, all at once (one batch on the engine)."""

    async def one(generation: Generation) -> None:
        async for _ in engine.run(generation):
            pass

    await asyncio.gather(*(one(generation) for generation in generations))


def batch_body(
    completion_id: str, model: str, generations: list[Generation], fingerprint: str
) -> JsonObject:
    """One chat completion: choice ``i`` answers conversation ``i``; the usage is their sum."""
    ones = [completion_body(completion_id, model, g, fingerprint) for g in generations]
    totals = {key: sum(one["usage"][key] for one in ones)
              for key in ("prompt_tokens", "completion_tokens", "total_tokens")}  # fmt: skip
    answer = ones[0]
    answer["choices"] = [{**one["choices"][0], "index": i} for i, one in enumerate(ones)]
    # vLLM's batch usage carries no details (its response builds only the three counts).
    answer["usage"] = {**totals, "prompt_tokens_details": None, "completion_tokens_details": None}
    return answer
