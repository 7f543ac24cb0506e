"""Shape a Generation as vLLM's ChatCompletion and as its stream of chunks.

Field order and presence follow vLLM's OpenAI server: ``reasoning`` beside ``content`` in the
message, ``prompt_tokens_details.cached_tokens`` in usage, tool calls streamed as one header delta
(index, id, type, function name) followed by argument fragments, a final delta carrying the
finish reason, an optional usage chunk with empty choices, then ``data: [DONE]``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from twin.engine import Generation
from twin.schema import JsonObject
from twin.tokens import split_pieces
from twin.turn import ChoiceOutput

PIECE_TOKENS = 4  # tokens per streamed delta


def usage(generation: Generation) -> JsonObject:
    completion = generation.completion_tokens
    return {
        "prompt_tokens": generation.prompt_tokens,
        "total_tokens": generation.prompt_tokens + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": {"cached_tokens": generation.cached_tokens},
    }


def _message(choice: ChoiceOutput) -> JsonObject:
    return {
        "role": "assistant",
        "content": choice.content,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in choice.tool_calls
        ],
        "reasoning": choice.reasoning,
    }


def completion_body(completion_id: str, model: str, generation: Generation) -> JsonObject:
    """The non-streaming ChatCompletion."""
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": choice.index,
                "message": _message(choice),
                "logprobs": None,
                "finish_reason": choice.finish_reason,
                "stop_reason": None,
            }
            for choice in generation.choices
        ],
        "service_tier": None,
        "system_fingerprint": None,
        "usage": usage(generation),
        "prompt_logprobs": None,
        "kv_transfer_params": None,
    }


@dataclass
class ChoiceStream:
    """The deltas one choice still has to send, each with the tokens it costs."""

    choice: ChoiceOutput
    deltas: list[tuple[JsonObject, int]] = field(default_factory=list)

    @classmethod
    def of(cls, choice: ChoiceOutput) -> ChoiceStream:
        deltas: list[tuple[JsonObject, int]] = [({"role": "assistant", "content": ""}, 0)]
        for piece in split_pieces(choice.reasoning or "", PIECE_TOKENS):
            deltas.append(({"reasoning": piece}, PIECE_TOKENS))
        for piece in split_pieces(choice.content or "", PIECE_TOKENS):
            deltas.append(({"content": piece}, PIECE_TOKENS))
        for i, call in enumerate(choice.tool_calls):
            header = {
                "index": i,
                "id": call.id,
                "type": "function",
                "function": {"name": call.name},
            }
            deltas.append(({"tool_calls": [header]}, PIECE_TOKENS))
            for piece in split_pieces(call.arguments, PIECE_TOKENS):
                fragment = {"index": i, "function": {"arguments": piece}}
                deltas.append(({"tool_calls": [fragment]}, PIECE_TOKENS))
        return cls(choice, deltas)

    def take(self, budget: int) -> list[JsonObject]:
        """Deltas whose cost fits in ``budget`` tokens (at least one, while any remain)."""
        out: list[JsonObject] = []
        while self.deltas and (not out or self.deltas[0][1] <= budget):
            delta, cost = self.deltas.pop(0)
            budget -= cost
            out.append(delta)
        return out


class ChunkWriter:
    """Frames chat.completion.chunk events for one streamed completion."""

    def __init__(self, completion_id: str, model: str) -> None:
        self.completion_id = completion_id
        self.model = model
        self.created = int(time.time())

    def event(self, choices: list[JsonObject], extra: JsonObject | None = None) -> bytes:
        body: dict[str, Any] = {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        if extra:
            body.update(extra)
        return b"data: " + orjson.dumps(body) + b"\n\n"

    def delta(self, index: int, delta: JsonObject, finish_reason: str | None = None) -> bytes:
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        if finish_reason is not None:
            choice["stop_reason"] = None
        return self.event([choice])

    def finals(self, streams: list[ChoiceStream]) -> Iterator[bytes]:
        for stream in streams:
            yield self.delta(stream.choice.index, {}, stream.choice.finish_reason)

    def usage(self, generation: Generation) -> bytes:
        return self.event([], {"usage": usage(generation)})


DONE = b"data: [DONE]\n\n"


def error_event(envelope: JsonObject) -> bytes:
    return b"data: " + orjson.dumps(envelope) + b"\n\n"
