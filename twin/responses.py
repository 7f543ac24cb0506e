"""Shape a Generation as vLLM's ChatCompletion and as its stream of chunks.

Field order and presence follow vLLM's OpenAI server (checked against a real one by
tests/contract): ``reasoning`` beside ``content`` in the message and ``tool_calls`` only when
there are some, ``prompt_tokens_details`` and ``completion_tokens_details.reasoning_tokens`` in
usage, tool calls streamed as one header delta (id, type, index, function name) and then argument
fragments, each with ``"content": null``, the finish reason on the chunk of the last generated
token (a ``{}`` delta after the end-of-turn token; the last text delta when ``max_tokens`` or a
stop string cut the turn), with the ``system_fingerprint`` when no usage chunk follows, an
optional usage chunk with empty choices (then carrying the fingerprint), then ``data: [DONE]``.
With ``logprobs`` asked, every chunk but the first carries its tokens' logprobs
(``twin/logprobs.py``), and tokens nothing shows get ``{}`` chunks of their own, as in vLLM.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from .engine import Generation
from .logprobs import entries as logprob_entries
from .schema import JsonObject
from .tokens import split_pieces
from .turn import ChoiceOutput

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
                "logprobs": None
                if generation.logprobs_top is None
                else choice_logprobs(choice, generation.logprobs_top),
                "finish_reason": choice.answer_finish_reason,
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
class Piece:
    """One streamed delta of a choice: what it shows and the generated tokens it stands for.

    ``first``/``last`` index ``ChoiceOutput.tokens`` (the delta's logprobs); ``cost`` is what
    the decode clock must have produced before it is sent. A piece that shows nothing (``{}``)
    stands for tokens the parsers swallow — the thinking tags, a tool call's JSON framing, the
    end-of-turn token: vLLM sends such a chunk only when it has logprobs to carry or a finish.
    """

    delta: JsonObject
    cost: int
    first: int = 0
    last: int = 0
    finish: bool = False


def _visible(choice: ChoiceOutput) -> list[tuple[JsonObject, str | None]]:
    """The deltas that show something, each with its text (``None`` for tool-call deltas)."""
    out: list[tuple[JsonObject, str | None]] = []
    for piece in split_pieces(choice.reasoning or "", PIECE_TOKENS):
        out.append(({"reasoning": piece}, piece))
    for piece in split_pieces(choice.content or "", PIECE_TOKENS):
        out.append(({"content": piece}, piece))
    for i, call in enumerate(choice.tool_calls):
        function = {"name": call.name}
        header = {"id": call.id, "type": "function", "index": i, "function": function}
        out.append(({"content": None, "tool_calls": [header]}, None))
        for piece in split_pieces(call.arguments, PIECE_TOKENS):
            fragment = {"index": i, "function": {"arguments": piece}}
            out.append(({"content": None, "tool_calls": [fragment]}, None))
    return out


@dataclass
class ChoiceStream:
    """The pieces one choice still has to send, in order; the last one carries the finish.

    Each shown delta is matched to the generated tokens that spell its text; tool-call deltas
    share the tokens of the tool-call blocks. vLLM puts the finish reason on the chunk of the
    last generated token: a separate ``{}`` chunk when that is the end-of-turn token (or another
    token nothing shows), the last content chunk when ``max_tokens`` or a stop string cut the
    turn in the middle of its text.
    """

    choice: ChoiceOutput
    pieces: list[Piece] = field(default_factory=list)

    @classmethod
    def of(cls, choice: ChoiceOutput, *, logprobs: bool = False) -> ChoiceStream:
        text = choice.generated_text
        starts: list[int] = []
        at = 0
        for token in choice.tokens[: len(choice.tokens) - choice.ended]:
            starts.append(at)
            at += len(token)
        pieces = [Piece({"role": "assistant", "content": ""}, 0)]
        taken = 0  # tokens matched so far
        pending = 0  # swallowed tokens not yet sent (without logprobs they ride on the next cost)

        def upto(end: int) -> int:
            nonlocal taken
            first = taken
            while taken < len(starts) and starts[taken] < end:
                taken += 1
            return taken - first

        cursor = 0
        visible = _visible(choice)
        calls = [delta for delta, shown in visible if shown is None]
        for delta, shown in visible:
            if shown is None:
                continue
            found = text.find(shown, cursor)
            found = cursor if found < 0 else found
            gap = upto(found)
            if gap and logprobs:
                pieces.append(Piece({}, gap, taken - gap, taken))
            elif gap:
                pending += gap
            own = upto(found + len(shown))
            pieces.append(Piece(delta, own + pending, taken - own, taken))
            pending = 0
            cursor = found + len(shown)
        if calls:
            gap = upto(text.find("<tool_call>", cursor))
            if gap and logprobs:
                pieces.append(Piece({}, gap, taken - gap, taken))
            elif gap:
                pending += gap
            region = len(starts) - taken
            for i, delta in enumerate(calls):
                share = region * (i + 1) // len(calls) - region * i // len(calls)
                pieces.append(Piece(delta, share + pending, taken, taken + share))
                taken += share
                pending = 0
        rest = len(choice.tokens) - taken
        if rest or len(pieces) == 1:
            pieces.append(Piece({}, rest + pending, taken, len(choice.tokens)))
        pieces[-1].finish = True
        return cls(choice, pieces)

    def take(self, budget: int) -> list[Piece]:
        """Pieces whose cost fits in ``budget`` tokens (at least one, while any remain)."""
        out: list[Piece] = []
        while self.pieces and (not out or self.pieces[0].cost <= budget):
            piece = self.pieces.pop(0)
            budget -= piece.cost
            out.append(piece)
        return out


def choice_logprobs(
    choice: ChoiceOutput, top: int, first: int = 0, last: int | None = None
) -> JsonObject:
    """``{"content": [...]}``: the logprobs of ``choice.tokens[first:last]``."""
    key = hashlib.sha256(choice.generated_text.encode()).hexdigest()
    tokens = choice.tokens[first:last]
    return {"content": logprob_entries(tokens, top, key=key, start=first)}


class ChunkWriter:
    """Frames chat.completion.chunk events for one streamed completion."""

    def __init__(
        self, completion_id: str, model: str, fingerprint: str, logprobs_top: int | None = None
    ) -> None:
        self.completion_id = completion_id
        self.model = model
        self.fingerprint = fingerprint
        self.logprobs_top = logprobs_top
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

    def piece(self, choice: ChoiceOutput, piece: Piece, *, usage: bool = False) -> bytes:
        """One piece's chunk; the finishing one also names the reason, and carries vLLM's
        ``system_fingerprint`` unless a usage chunk follows."""
        logprobs = None
        if self.logprobs_top is not None and piece.last > piece.first:
            logprobs = choice_logprobs(choice, self.logprobs_top, piece.first, piece.last)
        if not piece.finish and "role" not in piece.delta and not piece.delta and logprobs is None:
            return b""  # a swallowed token with nothing to carry: vLLM sends no chunk
        out: JsonObject = {"index": choice.index, "delta": piece.delta, "logprobs": logprobs}
        out["finish_reason"] = choice.stream_finish_reason if piece.finish else None
        if "role" in piece.delta:  # vLLM's opening chunk: no token ids yet, prompt fields instead
            return self.event([out], {"prompt_token_ids": None, "prompt_text": None})
        if piece.finish:
            out["stop_reason"] = choice.stop_reason
        out["token_ids"] = None
        extra = {"system_fingerprint": self.fingerprint} if piece.finish and not usage else None
        return self.event([out], extra)

    def usage(self, generation: Generation) -> bytes:
        body = {"usage": usage(generation, streamed=True), "system_fingerprint": self.fingerprint}
        return self.event([], body)


DONE = b"data: [DONE]\n\n"


def error_event(envelope: JsonObject) -> bytes:
    return b"data: " + orjson.dumps(envelope) + b"\n\n"
