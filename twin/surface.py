"""The rest of vLLM's OpenAI-compatible surface, over the twin's chat engine.

vLLM serves more than chat completions, and a gateway relays all of it, so the twin answers the
same routes in vLLM 0.32's shapes (tests/contract holds them to a real vLLM): ``/version``,
``/tokenize`` and ``/detokenize`` (the twin's tokens, numbered in order of first sight — it has
no vocabulary file), legacy ``/v1/completions`` (the prompt is played as one user turn with
thinking off), and ``/v1/responses`` (input items and function tools read as a chat request, the
answer written as output items, or as vLLM's event stream). Responses are not stored (vLLM
stores none unless told to), so ``GET /v1/responses/{id}`` is vLLM's 404.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson

from .config import MAX_MODEL_LEN, VLLM_VERSION
from .engine import Generation, TwinEngine
from .protocol import ChatRequest, TwinError, parse_request
from .responses import PIECE_TOKENS
from .schema import JsonObject
from .tokens import split_pieces, tokenize
from .turn import ChoiceOutput


class Vocabulary:
    """Token strings numbered in the order the twin first sees them (ids 0..n-1)."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.tokens: list[str] = []

    def encode(self, text: str) -> list[int]:
        out = []
        for token in tokenize(text):
            if token not in self.ids:
                self.ids[token] = len(self.tokens)
                self.tokens.append(token)
            out.append(self.ids[token])
        return out

    def decode(self, ids: list[Any]) -> str:
        for token_id in ids:
            if not isinstance(token_id, int) or not 0 <= token_id < len(self.tokens):
                raise TwinError(f"Token id {token_id} is out of vocabulary", param="tokens")
        return "".join(self.tokens[i] for i in ids)


def version() -> JsonObject:
    return {"version": VLLM_VERSION}


def tokenize_body(vocab: Vocabulary, body: Any, rendered: str | None) -> JsonObject:
    """``/tokenize`` of a ``prompt`` or (already rendered) ``messages``."""
    if rendered is None:
        if not isinstance(body, dict) or not isinstance(body.get("prompt"), str):
            raise TwinError("Either `prompt` or `messages` must be provided", param="prompt")
        rendered = body["prompt"]
    tokens = vocab.encode(rendered)
    return {"count": len(tokens), "max_model_len": MAX_MODEL_LEN, "tokens": tokens,
            "token_strs": None}  # fmt: skip


def detokenize_body(vocab: Vocabulary, body: Any) -> JsonObject:
    tokens = body.get("tokens") if isinstance(body, dict) else None
    if not isinstance(tokens, list):
        raise TwinError("`tokens` must be a list of token ids", param="tokens")
    return {"prompt": vocab.decode(tokens)}


# --------------------------------------------------------------------------- completions


def completion_as_chat(body: Any) -> JsonObject:
    """A legacy completions body as the chat body the twin plays it with."""
    if not isinstance(body, dict) or not isinstance(body.get("prompt"), str):
        raise TwinError("`prompt` must be a string", param="prompt")
    chat = {
        k: v
        for k, v in body.items()
        if k not in ("prompt", "echo", "suffix", "best_of", "logprobs")
    }
    chat["messages"] = [{"role": "user", "content": body["prompt"]}]
    chat["max_tokens"] = body.get("max_tokens", 16)  # the completions API's default
    chat["chat_template_kwargs"] = {"enable_thinking": False}
    return chat


def _text(choice: ChoiceOutput) -> str:
    return choice.content or ""


def completion_body(completion_id: str, model: str, generation: Generation, fp: str) -> JsonObject:
    choices = [
        {"index": c.index, "text": _text(c), "logprobs": None, "finish_reason": c.finish_reason,
         "stop_reason": c.stop_reason, "token_ids": None, "prompt_logprobs": None,
         "prompt_token_ids": None, "routed_experts": None}
        for c in generation.choices
    ]  # fmt: skip
    usage = {
        "prompt_tokens": generation.prompt_tokens,
        "total_tokens": generation.prompt_tokens + generation.completion_tokens,
        "completion_tokens": generation.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": generation.cached_tokens,
                                  "created_cache_tokens": None, "multimodal_tokens": None},
        "completion_tokens_details": None,
    }  # fmt: skip
    return {"id": completion_id, "object": "text_completion", "created": int(time.time()),
            "model": model, "choices": choices, "service_tier": None, "system_fingerprint": fp,
            "usage": usage, "kv_transfer_params": None, "ec_transfer_params": None,
            "metrics": None}  # fmt: skip


async def completion_stream(
    engine: TwinEngine, request: ChatRequest, generation: Generation, completion_id: str,
    model: str,
) -> AsyncIterator[bytes]:  # fmt: skip
    async for _ in engine.run(generation):
        pass
    created = int(time.time())
    head = {"id": completion_id, "object": "text_completion", "created": created, "model": model}
    usage = request.stream_options is not None and bool(request.stream_options.include_usage)
    # The fingerprint rides on the usage chunk when there is one, else on each finish piece.
    closing = {} if usage else {"system_fingerprint": engine.fingerprint}
    for choice in generation.choices:
        # vLLM sends the text as it decodes it, the finish reason on the last piece only.
        texts = split_pieces(_text(choice), PIECE_TOKENS) or [""]
        for at, text in enumerate(texts):
            last = at == len(texts) - 1
            piece = {"index": choice.index, "text": text, "logprobs": None,
                     "finish_reason": choice.finish_reason if last else None,
                     "stop_reason": choice.stop_reason if last else None,
                     "prompt_token_ids": None, "token_ids": None}  # fmt: skip
            chunk = {**head, "choices": [piece], **(closing if last else {})}
            yield b"data: " + orjson.dumps(chunk) + b"\n\n"
    if usage:
        counts = {"prompt_tokens": generation.prompt_tokens,
                 "total_tokens": generation.prompt_tokens + generation.completion_tokens,
                 "completion_tokens": generation.completion_tokens,
                 "prompt_tokens_details": {"cached_tokens": generation.cached_tokens}}  # fmt: skip
        chunk = {**head, "choices": [], "usage": counts, "system_fingerprint": engine.fingerprint}
        yield b"data: " + orjson.dumps(chunk) + b"\n\n"
    yield b"data: [DONE]\n\n"


# --------------------------------------------------------------------------- responses


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


# The item types the twin plays -> their required fields and JSON types. vLLM validates every
# item with OpenAI's item models and answers 400 naming the first one that does not fit; other
# item types (reasoning, item references, …) are accepted there and not played here.
_ITEM_FIELDS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "message": {"role": str, "content": (str, list)},
    "function_call": {"call_id": str, "name": str, "arguments": str},
    "function_call_output": {"call_id": str, "output": (str, list)},
}
_ROLES = ("user", "system", "developer", "assistant")


def _read_item(messages: list[JsonObject], item: Any, where: str) -> None:
    """Append one input item to ``messages`` as chat sees it, or refuse it as vLLM would."""
    if not isinstance(item, dict):
        raise TwinError("Input should be a valid dictionary or object", param=where)
    kind = item.get("type", "message")
    if not isinstance(kind, str):
        raise TwinError("Input should be a valid string", param=f"{where}.type")
    fields = _ITEM_FIELDS.get(kind)
    if fields is None:
        return
    for name, kinds in fields.items():
        if name not in item:
            raise TwinError("Field required", param=f"{where}.{name}")
        if not isinstance(item[name], kinds):
            raise TwinError("Input should be a valid string", param=f"{where}.{name}")
    if kind == "message":
        if item["role"] not in _ROLES:
            raise TwinError(f"Input should be {', '.join(map(repr, _ROLES))}",
                            param=f"{where}.role")  # fmt: skip
        messages.append({"role": item["role"], "content": _content_text(item["content"])})
    elif kind == "function_call":
        call = {
            "id": item["call_id"],
            "type": "function",
            "function": {"name": item["name"], "arguments": item["arguments"]},
        }
        last = messages[-1] if messages else {}
        if last.get("role") == "assistant":
            last.setdefault("tool_calls", []).append(call)
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind == "function_call_output":
        messages.append({"role": "tool", "tool_call_id": item["call_id"],
                         "content": _content_text(item["output"])})  # fmt: skip


def responses_as_chat(body: Any) -> JsonObject:
    """A Responses body as the chat body the twin plays it with (vLLM converts the same way)."""
    if not isinstance(body, dict) or not isinstance(body.get("input"), str | list):
        raise TwinError("Field required", param="input")
    messages: list[JsonObject] = []
    if isinstance(body.get("instructions"), str):
        messages.append({"role": "system", "content": body["instructions"]})
    items = body["input"]
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    for at, item in enumerate(items):
        _read_item(messages, item, f"input[{at}]")
    skip = (
        "input",
        "instructions",
        "tools",
        "max_output_tokens",
        "store",
        "text",
        "reasoning",
        "previous_response_id",
        "include",
        "truncation",
        "metadata",
        "tool_choice",
        "top_logprobs",  # the twin's responses carry no logprobs ("logprobs": [] per part)
    )
    chat = {k: v for k, v in body.items() if k not in skip}
    chat["messages"] = messages
    listed = body.get("tools") or []
    if not isinstance(listed, list):
        raise TwinError("Input should be a valid list", param="tools")
    tools = [t for t in listed if isinstance(t, dict) and t.get("type") == "function"]
    if tools:
        keys = ("name", "description", "parameters")
        chat["tools"] = [
            {"type": "function", "function": {k: t[k] for k in keys if k in t}} for t in tools
        ]
        choice = body.get("tool_choice", "auto")
        if isinstance(choice, dict):
            choice = {"type": "function", "function": {"name": choice.get("name")}}
        elif not isinstance(choice, str):
            raise TwinError("Input should be a valid string or object", param="tool_choice")
        chat["tool_choice"] = choice
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    return chat


def _mint(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


def output_items(choice: ChoiceOutput) -> list[JsonObject]:
    items: list[JsonObject] = []
    if choice.reasoning:
        items.append({"id": _mint("rs"), "summary": [], "type": "reasoning",
                      "content": [{"text": choice.reasoning, "type": "reasoning_text"}],
                      "encrypted_content": None, "status": None})  # fmt: skip
    if choice.content and not choice.tool_calls:
        part: JsonObject = {"annotations": [], "text": choice.content, "type": "output_text",
                "logprobs": None}  # fmt: skip
        items.append({"id": _mint("msg"), "content": [part], "role": "assistant",
                      "status": "completed", "type": "message", "phase": None})  # fmt: skip
    for call in choice.tool_calls:
        items.append({"arguments": call.arguments, "call_id": call.id, "name": call.name,
                      "type": "function_call", "id": _mint("fc"), "async": None,
                      "caller": None, "namespace": None, "status": "completed"})  # fmt: skip
    return items


def response_object(body: JsonObject, model: str, response_id: str, created: int,
                    generation: Generation | None) -> JsonObject:  # fmt: skip
    choice = generation.choices[0] if generation is not None else None
    cut = choice is not None and choice.finish_reason == "length"
    status = "in_progress" if choice is None else "incomplete" if cut else "completed"
    usage = None
    if generation is not None:
        usage = {
            "input_tokens": generation.prompt_tokens,
            "input_tokens_details": {"cached_tokens": generation.cached_tokens,
                                     "cache_write_tokens": generation.created_cache_tokens,
                                     "input_tokens_per_turn": [], "cached_tokens_per_turn": []},
            "output_tokens": generation.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": generation.reasoning_tokens,
                                      "tool_output_tokens": 0, "output_tokens_per_turn": [],
                                      "tool_output_tokens_per_turn": []},
            "total_tokens": generation.prompt_tokens + generation.completion_tokens,
        }  # fmt: skip
    tools = [_echoed_tool(tool) for tool in body.get("tools") or []]
    return {
        "id": response_id, "created_at": created,
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "instructions": body.get("instructions"), "metadata": body.get("metadata"),
        "model": model, "object": "response",
        "output": [] if choice is None else output_items(choice),
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "temperature": body.get("temperature", 1.0),
        "tool_choice": body.get("tool_choice", "auto" if tools else "none"), "tools": tools,
        "top_p": body.get("top_p", 1.0), "background": False,
        "max_output_tokens": body.get("max_output_tokens"), "max_tool_calls": None,
        "previous_response_id": None, "prompt": None, "reasoning": body.get("reasoning"),
        "service_tier": "auto", "status": status, "text": body.get("text"),
        "top_logprobs": body.get("top_logprobs"), "truncation": "disabled", "usage": usage,
        "user": body.get("user"),
        "presence_penalty": body.get("presence_penalty", 0.0),
        "frequency_penalty": body.get("frequency_penalty", 0.0), "kv_transfer_params": None,
        "ec_transfer_params": None, "input_messages": None, "output_messages": None,
    }  # fmt: skip


def _echoed_tool(tool: Any) -> Any:
    """A function tool as vLLM echoes it: OpenAI's FunctionTool with every field, in its order."""
    if not isinstance(tool, dict) or tool.get("type") != "function":
        return tool
    return {"name": tool.get("name"), "parameters": tool.get("parameters"),
            "strict": tool.get("strict"), "type": "function",
            "allowed_callers": tool.get("allowed_callers"), "async": tool.get("async"),
            "defer_loading": tool.get("defer_loading"), "description": tool.get("description"),
            "output_schema": tool.get("output_schema")}  # fmt: skip


class EventWriter:
    def __init__(self) -> None:
        self.sequence = 0

    def event(self, kind: str, **fields: Any) -> bytes:
        data = {**fields, "sequence_number": self.sequence, "type": kind}
        self.sequence += 1
        try:
            payload = orjson.dumps(data)
        except TypeError:  # an echoed request field holds an integer beyond 64 bits
            payload = json.dumps(data, separators=(",", ":")).encode()
        return b"event: " + kind.encode() + b"\ndata: " + payload + b"\n\n"


async def response_stream(engine: TwinEngine, body: JsonObject, generation: Generation,
                          model: str) -> AsyncIterator[bytes]:  # fmt: skip
    response_id, created, out = _mint("resp"), int(time.time()), EventWriter()
    started = response_object(body, model, response_id, created, None)
    yield out.event("response.created", response=started)
    yield out.event("response.in_progress", response=started)
    async for _ in engine.run(generation):
        pass
    finished = response_object(body, model, response_id, created, generation)
    for index, item in enumerate(finished["output"]):
        at = {"item_id": item["id"], "output_index": index}
        if item["type"] == "function_call":
            yield out.event("response.output_item.added", output_index=index,
                            item={**item, "arguments": "", "status": "in_progress"})  # fmt: skip
            yield out.event("response.function_call_arguments.delta", delta=item["arguments"], **at)
            yield out.event("response.function_call_arguments.done", arguments=item["arguments"],
                            name=item["name"], **at)  # fmt: skip
        else:
            part = item["content"][0]
            kind = "reasoning_text" if item["type"] == "reasoning" else "output_text"
            opened = {**item, "content": [] if kind == "output_text" else None,
                      "status": "in_progress"}  # fmt: skip
            yield out.event("response.output_item.added", output_index=index, item=opened)
            extra: dict[str, Any] = {"logprobs": []} if kind == "output_text" else {}
            empty = {**part, "text": "", **extra}
            yield out.event("response.content_part.added", content_index=0, part=empty, **at)
            yield out.event(f"response.{kind}.delta", content_index=0, delta=part["text"],
                            **extra, **at)  # fmt: skip
            yield out.event(f"response.{kind}.done", content_index=0, text=part["text"],
                            **extra, **at)  # fmt: skip
            yield out.event("response.content_part.done", content_index=0, part=part, **at)
            item = {**item, "status": "completed"}
        yield out.event("response.output_item.done", output_index=index, item=item)
    yield out.event("response.completed", response=finished)


def prepare_chat(engine: TwinEngine, chat: JsonObject) -> tuple[ChatRequest, Generation]:
    request = parse_request(chat, MAX_MODEL_LEN)
    engine.check_model(request.model)
    return request, engine.prepare(request, chat)
