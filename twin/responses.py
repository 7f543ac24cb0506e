"""Shape a Generation as vLLM's ChatCompletion and as its stream of chunks.

Field order and presence follow vLLM's OpenAI server (checked against a real one by
tests/contract): ``reasoning`` beside ``content`` in the message and ``tool_calls`` only when
there are some, ``prompt_tokens_details`` and ``completion_tokens_details.reasoning_tokens`` in
usage, tool calls streamed as one header delta (id, type, index, function name) and then argument
fragments, each with ``"content": null``, a final delta carrying the finish reason (and the
``system_fingerprint`` when no usage chunk follows), an optional usage chunk with empty choices
(then carrying the fingerprint), then ``data: [DONE]``.
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


def usage(generation: Generation, *, streamed: bool = False) -> JsonObject:
    completion = generation.completion_tokens
    details: JsonObject = {
        "cached_tokens": generation.cached_tokens,
        "created_cache_tokens": generation.created_cache_tokens,
    }
    if not streamed:
        details["multimodal_tokens"] = None
    return {
        "prompt_tokens": generation.prompt_tokens,
        "total_tokens": generation.prompt_tokens + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": details,
        "completion_tokens_details": {"reasoning_tokens": generation.reasoning_tokens},
    }


def _message(choice: ChoiceOutput) -> JsonObject:
    message: JsonObject = {
        "role": "assistant",
        "content": choice.content,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
    }
    if choice.tool_calls:  # vLLM leaves the key out of a text answer
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in choice.tool_calls
        ]
    message["reasoning"] = choice.reasoning
    return message


def completion_body(
    completion_id: str, model: str, generation: Generation, fingerprint: str
) -> JsonObject:
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
                "stop_reason": choice.stop_reason,
                "token_ids": None,
                "routed_experts": None,
            }
            for choice in generation.choices
        ],
        "service_tier": None,
        "system_fingerprint": fingerprint,
        "usage": usage(generation),
        "prompt_logprobs": None,
        "prompt_token_ids": None,
        "prompt_text": None,
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": None,
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
            function = {"name": call.name}
            header = {"id": call.id, "type": "function", "index": i, "function": function}
            deltas.append(({"content": None, "tool_calls": [header]}, PIECE_TOKENS))
            for piece in split_pieces(call.arguments, PIECE_TOKENS):
                fragment = {"index": i, "function": {"arguments": piece}}
                deltas.append(({"content": None, "tool_calls": [fragment]}, PIECE_TOKENS))
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

    def __init__(self, completion_id: str, model: str, fingerprint: str) -> None:
        self.completion_id = completion_id
        self.model = model
        self.fingerprint = fingerprint
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

    def delta(self, index: int, delta: JsonObject) -> bytes:
        choice: JsonObject = {"index": index, "delta": delta, "logprobs": None}
        choice["finish_reason"] = None
        if "role" in delta:  # vLLM's opening chunk: no token ids yet, prompt fields instead
            return self.event([choice], {"prompt_token_ids": None, "prompt_text": None})
        choice["token_ids"] = None
        return self.event([choice])

    def final(self, choice: ChoiceOutput, *, fingerprint: bool = False) -> bytes:
        """The finish chunk; vLLM puts ``system_fingerprint`` on it unless a usage chunk follows."""
        extra = {"system_fingerprint": self.fingerprint} if fingerprint else None
        return self.event(
            [
                {
                    "index": choice.index,
                    "delta": {},
                    "logprobs": None,
                    "finish_reason": choice.finish_reason,
                    "stop_reason": choice.stop_reason,
                    "token_ids": None,
                }
            ],
            extra,
        )

    def finals(self, streams: list[ChoiceStream], *, usage: bool = False) -> Iterator[bytes]:
        for stream in streams:
            yield self.final(stream.choice, fingerprint=not usage)

    def usage(self, generation: Generation) -> bytes:
        body = {"usage": usage(generation, streamed=True), "system_fingerprint": self.fingerprint}
        return self.event([], body)


DONE = b"data: [DONE]\n\n"


def error_event(envelope: JsonObject) -> bytes:
    return b"data: " + orjson.dumps(envelope) + b"\n\n"
