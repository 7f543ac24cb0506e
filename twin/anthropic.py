"""vLLM's Anthropic-style Messages API over the twin's chat engine, in vLLM 0.32's shapes.

vLLM serves ``POST /v1/messages`` (whole or as Anthropic's event stream) and
``POST /v1/messages/count_tokens`` by converting the request to a chat request and the answer
back, and so does the twin: ``system`` and the messages' text, ``tool_use`` and ``tool_result``
blocks become chat messages, ``tools`` (``input_schema``) chat tools; the answer's reasoning is a
``thinking`` block (with a ``signature``), its text a ``text`` block, its calls ``tool_use``
blocks. Shapes were read off a real vLLM 0.32 (tests/contract/test_surface.py holds the twin to
them); a ``tool_use`` block was not observed there (the tiny model never writes one through this
API), so it follows Anthropic's documented shape.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

import orjson

from .engine import Generation, TwinEngine
from .protocol import ChatRequest, TwinError
from .schema import JsonObject
from .tokens import split_pieces
from .turn import ChoiceOutput

PIECE_TOKENS = 4
# vLLM's refusal of a Messages body is a pydantic validation error, typed "Bad Request".
BAD_REQUEST = "Bad Request"
_STOP_REASONS = {"length": "max_tokens", "tool_calls": "tool_use"}


def _invalid(message: str, param: str) -> TwinError:
    return TwinError(message, param=f"body.{param}", kind=BAD_REQUEST)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def _message(messages: list[JsonObject], item: Any, at: int) -> None:
    if not isinstance(item, dict) or item.get("role") not in ("user", "assistant"):
        raise _invalid("Input should be 'user' or 'assistant'", f"messages.{at}.role")
    content = item.get("content")
    if not isinstance(content, str | list):
        raise _invalid("Field required", f"messages.{at}.content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    text, calls = "", []
    for block in blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            text += str(block.get("text", ""))
        elif kind == "tool_use":
            arguments = json.dumps(block.get("input") or {}, ensure_ascii=False)
            calls.append({"id": str(block.get("id", "")), "type": "function",
                          "function": {"name": str(block.get("name", "")),
                                       "arguments": arguments}})  # fmt: skip
        elif kind == "tool_result":
            messages.append({"role": "tool", "tool_call_id": str(block.get("tool_use_id", "")),
                             "content": _text(block.get("content"))})  # fmt: skip
    if item["role"] == "assistant":
        messages.append({"role": "assistant", "content": text or None,
                         **({"tool_calls": calls} if calls else {})})  # fmt: skip
    elif text:
        messages.append({"role": "user", "content": text})


def messages_as_chat(body: Any, *, counting: bool = False) -> JsonObject:
    """A Messages body as the chat body the twin plays it with (vLLM converts the same way)."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        raise _invalid("Field required", "messages")
    if not counting and not isinstance(body.get("max_tokens"), int):
        raise _invalid("Field required", "max_tokens")
    messages: list[JsonObject] = []
    if body.get("system") is not None:
        messages.append({"role": "system", "content": _text(body["system"])})
    for at, item in enumerate(body["messages"]):
        _message(messages, item, at)
    chat: JsonObject = {"messages": messages, "max_tokens": body.get("max_tokens", 1)}
    for name in ("model", "temperature", "top_p", "top_k", "stream", "chat_template_kwargs"):
        if name in body:
            chat[name] = body[name]
    if isinstance(body.get("stop_sequences"), list):
        chat["stop"] = body["stop_sequences"]
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        chat["tools"] = [
            {"type": "function", "function": {"name": t.get("name"),
             "description": t.get("description", ""), "parameters": t.get("input_schema")}}
            for t in tools if isinstance(t, dict)
        ]  # fmt: skip
        asked = body.get("tool_choice")
        choice: JsonObject = asked if isinstance(asked, dict) else {}
        kind = choice.get("type", "auto")
        if kind == "tool":
            chat["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
        else:
            chat["tool_choice"] = {"any": "required", "none": "none"}.get(kind, "auto")
    return chat


def _blocks(choice: ChoiceOutput) -> list[JsonObject]:
    blocks: list[JsonObject] = []
    if choice.reasoning:
        blocks.append({"type": "thinking", "thinking": choice.reasoning,
                       "signature": secrets.token_hex(16)})  # fmt: skip
    if choice.content:
        blocks.append({"type": "text", "text": choice.content})
    for call in choice.tool_calls:
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name,
                       "input": json.loads(call.arguments or "{}")})  # fmt: skip
    return blocks


def _usage(generation: Generation) -> JsonObject:
    return {"input_tokens": generation.prompt_tokens,
            "output_tokens": generation.completion_tokens,
            "cache_creation_input_tokens": generation.created_cache_tokens or 0,
            "cache_read_input_tokens": generation.cached_tokens}  # fmt: skip


def _stop_reason(choice: ChoiceOutput) -> str:
    return _STOP_REASONS.get(choice.finish_reason or "stop", "end_turn")


def message_body(message_id: str, model: str, generation: Generation) -> JsonObject:
    choice = generation.choices[0]
    return {"id": message_id, "type": "message", "role": "assistant", "content": _blocks(choice),
            "model": model, "stop_reason": _stop_reason(choice),
            "usage": _usage(generation)}  # fmt: skip


def count_tokens_body(prompt_tokens: int) -> JsonObject:
    return {"input_tokens": prompt_tokens,
            "context_management": {"original_input_tokens": prompt_tokens}}  # fmt: skip


def _event(kind: str, data: JsonObject) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def _block_events(index: int, block: JsonObject) -> list[bytes]:
    kind = block["type"]
    opened: JsonObject
    if kind == "thinking":
        opened, key, delta_kind = {"type": "thinking", "thinking": ""}, "thinking", "thinking_delta"
    elif kind == "text":
        opened, key, delta_kind = {"type": "text", "text": ""}, "text", "text_delta"
    else:
        opened = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        key, delta_kind = "partial_json", "input_json_delta"
    whole = json.dumps(block["input"]) if kind == "tool_use" else block[key]
    events = [
        _event(
            "content_block_start",
            {"type": "content_block_start", "content_block": opened, "index": index},
        )
    ]
    for piece in split_pieces(whole, PIECE_TOKENS):
        delta = {"type": delta_kind, key: piece}
        events.append(
            _event(
                "content_block_delta",
                {"type": "content_block_delta", "delta": delta, "index": index},
            )
        )
    if kind == "thinking":
        delta = {"type": "signature_delta", "signature": block["signature"]}
        events.append(
            _event(
                "content_block_delta",
                {"type": "content_block_delta", "delta": delta, "index": index},
            )
        )
    events.append(_event("content_block_stop", {"type": "content_block_stop", "index": index}))
    return events  # fmt: skip


async def message_stream(
    engine: TwinEngine, request: ChatRequest, generation: Generation, message_id: str, model: str
) -> AsyncIterator[bytes]:
    """Anthropic's event stream: message_start, each block's events, message_delta, stop."""
    del request
    started: JsonObject = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": model,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": generation.prompt_tokens, "output_tokens": 0},
    }
    yield _event("message_start", {"type": "message_start", "message": started})
    async for _ in engine.run(generation):
        pass
    choice = generation.choices[0]
    for index, block in enumerate(_blocks(choice)):
        for event in _block_events(index, block):
            yield event
    delta = {"stop_reason": _stop_reason(choice), "stop_sequence": None}
    yield _event(
        "message_delta", {"type": "message_delta", "delta": delta, "usage": _usage(generation)}
    )
    yield _event("message_stop", {"type": "message_stop"})  # fmt: skip
