"""The committed turn on the wire: ids we mint, the ChatCompletion body, and its stream chunks.

A rehearsed request is answered by the gateway, not relayed from one engine, so the gateway writes
the OpenAI shapes itself. They are plain dicts serialised with orjson, in the OpenAI field order,
because the SDKs (and people reading a capture) expect that order.

Tool-call ids are minted here (``call_`` + 24 base62 characters): it is how a later request's
``tool`` message is recognised as the real result of a call this gateway committed.
"""

from __future__ import annotations

import secrets
import string
import time
from collections.abc import Iterator
from typing import Any

from rehearsal_gateway.rehearsal.messages import AssistantTurn, ToolCall, Usage

TOOL_CALL_PREFIX = "call_"
_BASE62 = string.digits + string.ascii_letters
ARGUMENT_PIECES = 4  # a streamed tool call's arguments arrive in about this many fragments


# Base62 digits two at a time, least significant first, as one divmod by 62 each would write them.
_PAIRS = [_BASE62[i % 62] + _BASE62[i // 62] for i in range(62 * 62)]


def mint_tool_call_id() -> str:
    # One draw from the OS, not 24 (``secrets.choice`` per character reads urandom each time),
    # written out two base62 digits per step, half the steps of one digit at a time.
    number = secrets.randbelow(62**24)
    pairs = []
    for _ in range(12):
        number, pair = divmod(number, 62 * 62)
        pairs.append(_PAIRS[pair])
    return TOOL_CALL_PREFIX + "".join(pairs)


def mint_rehearsal_id() -> str:
    return "rh_" + secrets.token_hex(12)


def mint_completion_id() -> str:
    return "chatcmpl-" + secrets.token_hex(16)


def with_minted_ids(turn: AssistantTurn) -> AssistantTurn:
    """The turn with every tool call renamed to a gateway-minted id."""
    return turn.with_calls(tuple(call.with_id(mint_tool_call_id()) for call in turn.tool_calls))


def finish_reason(turn: AssistantTurn) -> str:
    """The engine's reason, as vLLM reports it: ``tool_calls`` only for a turn that ended.

    A turn cut by ``max_tokens`` stays ``length`` even when a (cut) call was parsed from it, so
    a client sees the cut instead of running a truncated call.
    """
    if turn.tool_calls and turn.finish_reason in (None, "stop", "tool_calls"):
        return "tool_calls"
    return turn.finish_reason or "stop"


def usage_body(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt,
        "total_tokens": usage.prompt + usage.completion,
        "completion_tokens": usage.completion,
        "prompt_tokens_details": {"cached_tokens": usage.cached},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning},
    }


def fingerprint(turn: AssistantTurn) -> str | None:
    value = turn.engine_fields.get("system_fingerprint")
    return value if isinstance(value, str) else None


def message_body(turn: AssistantTurn) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": turn.content}
    if turn.reasoning is not None:
        message["reasoning"] = turn.reasoning
        message["reasoning_content"] = turn.reasoning  # older clients read this name
    message["tool_calls"] = [call.to_openai() for call in turn.tool_calls]
    return message


def completion_body(
    *,
    completion_id: str,
    created: int,
    model: str,
    turn: AssistantTurn,
    usage: Usage,
    rehearsal: dict[str, Any],
) -> dict[str, Any]:
    """A non-streamed ChatCompletion for the committed turn, with our ``rehearsal`` object."""
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message_body(turn),
                "logprobs": turn.engine_fields.get("logprobs"),
                "finish_reason": finish_reason(turn),
                "stop_reason": turn.engine_fields.get("stop_reason"),
            }
        ],
        "system_fingerprint": fingerprint(turn),
        "usage": usage_body(usage),
        "rehearsal": rehearsal,
    }


class ChunkWriter:
    """Builds ``chat.completion.chunk`` objects for one streamed answer.

    Chunk shapes follow OpenAI's rules, which every client's ``chunk.choices[0]`` loop relies on:
    only the usage chunk has empty ``choices``, and it comes last. So the ``rehearsal`` summary
    rides on the usage chunk when the client asked for usage, else on the chunk that carries the
    finish reason (``closing``); ``system_fingerprint`` goes on that same terminal chunk, as vLLM
    puts it. A committed turn's ``logprobs`` ride on its first generated delta (on the finish
    chunk when nothing shows), so the chunks' entries together are the engine's whole list.
    """

    def __init__(self, completion_id: str, model: str, created: int | None = None) -> None:
        self.completion_id = completion_id
        self.model = model
        self.created = created if created is not None else int(time.time())

    def chunk(
        self,
        delta: dict[str, Any],
        finish: str | None = None,
        *,
        logprobs: Any = None,
        **extra: Any,
    ) -> dict[str, Any]:
        choice: dict[str, Any] = {
            "index": 0,
            "delta": delta,
            "logprobs": logprobs,
            "finish_reason": finish,
        }
        return {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            **extra,
        }

    def usage_chunk(self, usage: Usage, **extra: Any) -> dict[str, Any]:
        return {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": usage_body(usage),
            **extra,
        }

    def turn_chunks(
        self, turn: AssistantTurn, *, closing: dict[str, Any] | None = None
    ) -> Iterator[dict[str, Any]]:
        """The committed turn as vLLM would stream it: role, thinking, text, tool-call pieces.

        ``closing`` (``rehearsal``, ``system_fingerprint``) is added to the finish chunk.
        """
        logprobs = turn.engine_fields.get("logprobs")
        yield self.chunk({"role": "assistant", "content": ""})
        pieces: list[dict[str, Any]] = []
        if turn.reasoning:
            pieces.append({"reasoning": turn.reasoning, "reasoning_content": turn.reasoning})
        if turn.content:
            pieces.append({"content": turn.content})
        for delta in pieces:
            yield self.chunk(delta, logprobs=logprobs)
            logprobs = None
        for index, call in enumerate(turn.tool_calls):
            for delta in self._tool_call_deltas(index, call):
                yield self.chunk(delta, logprobs=logprobs)
                logprobs = None
        stop_reason = turn.engine_fields.get("stop_reason")
        # A turn that shows nothing (a thought cut at its first token) still scored its tokens.
        final = self.chunk({}, finish_reason(turn), logprobs=logprobs, **(closing or {}))
        final["choices"][0]["stop_reason"] = stop_reason
        yield final

    def _tool_call_deltas(self, index: int, call: ToolCall) -> Iterator[dict[str, Any]]:
        head = {"index": index, "id": call.id, "type": "function"}
        yield {"tool_calls": [{**head, "function": {"name": call.name}}]}
        arguments = call.arguments
        step = max(1, -(-len(arguments) // ARGUMENT_PIECES))
        for start in range(0, len(arguments), step):
            piece = {"index": index, "function": {"arguments": arguments[start : start + step]}}
            yield {"tool_calls": [piece]}
