"""The Responses API on the wire (``POST /v1/responses``): its request, read as a chat request.

A Responses request with function tools is rehearsed like a chat completion, so it is first
translated into the chat-completions body the rest of the gateway understands (``to_chat_body``):

- ``instructions`` becomes a leading system message; ``input`` (a string, or a list of items)
  becomes the messages: ``message`` items (roles user, system, developer, assistant; content as a
  string or ``input_text``/``output_text``/``input_image`` parts), ``function_call`` items folded
  into the assistant message that made them (``call_id`` is the tool-call id), and
  ``function_call_output`` items as ``tool`` messages — so a real result answering a call the
  gateway committed feeds fidelity, latency, grounding and trust as a tool message does;
  ``reasoning`` items are dropped (the chat template does not render past thinking either);
- function ``tools`` (flat in the Responses API) become chat ``tools``; ``tool_choice``,
  ``max_output_tokens``, ``temperature``, ``top_p``, ``parallel_tool_calls``, ``user`` and the
  ``rehearsal`` knobs carry over, and so do the vLLM extras (``top_k``, ``seed``,
  ``chat_template_kwargs``, ``structured_outputs``, …), untouched.

What cannot be translated faithfully raises ``InvalidRequest``. The field names follow OpenAI's
Responses reference; the models import only pydantic and the standard library.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from .errors import InvalidRequest

# Responses fields with a chat meaning handled below; every other field goes to the chat body
# as it is (vLLM's sampling extras) unless it is one of the Responses-only fields listed next.
_TRANSLATED = frozenset(
    (
        "input", "instructions", "tools", "tool_choice", "max_output_tokens", "stream",
        "text", "reasoning", "model", "temperature", "top_p", "parallel_tool_calls", "user",
        "rehearsal", "metadata", "top_logprobs",
    )
)  # fmt: skip
# Responses-only fields with no chat counterpart; the gateway answers them itself.
RESPONSE_ONLY = frozenset(
    ("store", "previous_response_id", "include", "truncation", "background", "service_tier",
     "prompt", "max_tool_calls", "conversation", "prompt_cache_key", "safety_identifier",
     "stream_options")
)  # fmt: skip


_TYPE_TAGS = frozenset(("str", "int", "float", "bool", "dict", "list", "none"))


class ResponsesRequest(BaseModel):
    """The fields of a ``POST /v1/responses`` body the gateway reads (others are kept)."""

    model_config = ConfigDict(extra="allow", strict=True)

    model: str | None = None
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stream: bool | None = None
    store: bool | None = None
    previous_response_id: str | None = None
    user: str | None = None
    metadata: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None
    text: dict[str, Any] | None = None
    top_logprobs: int | None = None


def parse_responses_request(body: dict[str, Any]) -> ResponsesRequest:
    """Validate a decoded body; ``InvalidRequest`` names the first wrong field."""
    try:
        return ResponsesRequest.model_validate(body)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        # Pydantic names union members in the location (``str``, ``list[dict[str,any]]``).
        param = ".".join(
            str(part)
            for part in first["loc"]
            if str(part) not in _TYPE_TAGS and "[" not in str(part)
        )
        raise InvalidRequest(f"{param}: {first['msg']}", param=param) from None


def has_only_function_tools(request: ResponsesRequest) -> bool:
    """Whether the request offers tools and every one is a function (what rehearsal handles)."""
    tools = request.tools or []
    return bool(tools) and all(tool.get("type") == "function" for tool in tools)


def _chat_tool(tool: dict[str, Any], index: int) -> dict[str, Any]:
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequest(f"tools[{index}].name: a function tool needs a name",
                             param=f"tools[{index}].name")  # fmt: skip
    function: dict[str, Any] = {"name": name}
    for key in ("description", "parameters", "strict"):
        if tool.get(key) is not None:
            function[key] = tool[key]
    chat: dict[str, Any] = {"type": "function", "function": function}
    if tool.get("annotations") is not None:  # MCP hints: a risk class (rehearsal/risk.py)
        chat["annotations"] = tool["annotations"]
    return chat


def _tool_choice(choice: str | dict[str, Any] | None) -> Any:
    if isinstance(choice, dict):  # {"type": "function", "name": ...}
        name = choice.get("name")
        if choice.get("type") != "function" or not isinstance(name, str):
            raise InvalidRequest("tool_choice: only a function can be named", param="tool_choice")
        return {"type": "function", "function": {"name": name}}
    return choice


def _text_of(content: Any, where: str) -> str | list[dict[str, Any]]:
    """A message item's content as chat content: a string, or chat content parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidRequest(f"{where}.content: expected a string or a list of parts",
                             param=f"{where}.content")  # fmt: skip
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text", "refusal", "summary_text"):
            text = part.get("text", part.get("refusal"))
            parts.append({"type": "text", "text": text if isinstance(text, str) else ""})
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            parts.append({"type": "image_url", "image_url": {"url": part["image_url"]}})
        else:
            raise InvalidRequest(f"{where}.content[{j}]: unsupported content part {kind!r}",
                                 param=f"{where}.content[{j}]")  # fmt: skip
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def _messages(request: ResponsesRequest) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if request.instructions:
        messages.append({"role": "system", "content": request.instructions})
    if isinstance(request.input, str):
        return [*messages, {"role": "user", "content": request.input}]
    for i, item in enumerate(request.input):
        where = f"input[{i}]"
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise InvalidRequest(f"{where}.role: unsupported role {role!r}",
                                     param=f"{where}.role")  # fmt: skip
            messages.append({"role": role, "content": _text_of(item.get("content"), where)})
        elif kind == "function_call":
            call = {
                "id": item.get("call_id"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments", "")},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            elif last is not None and last["role"] == "assistant" and not last.get("tool_calls"):
                last["tool_calls"] = [call]
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            content = output if isinstance(output, str) else _text_of(output, where)
            messages.append(
                {"role": "tool", "tool_call_id": item.get("call_id"), "content": content}
            )
        elif kind == "reasoning":
            continue
        else:
            raise InvalidRequest(f"{where}.type: unsupported input item {kind!r}",
                                 param=f"{where}.type")  # fmt: skip
    return messages


def to_chat_body(request: ResponsesRequest, body: dict[str, Any]) -> dict[str, Any]:
    """The chat-completions body that asks the engine what ``request`` asks (never streamed)."""
    chat: dict[str, Any] = {"messages": _messages(request)}
    if request.model is not None:
        chat["model"] = request.model
    if request.tools:
        chat["tools"] = [_chat_tool(tool, i) for i, tool in enumerate(request.tools)]
    if request.tool_choice is not None:
        chat["tool_choice"] = _tool_choice(request.tool_choice)
    optional = {
        "max_tokens": request.max_output_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "parallel_tool_calls": request.parallel_tool_calls,
        "user": request.user,
        "rehearsal": body.get("rehearsal"),
    }
    chat.update({key: value for key, value in optional.items() if value is not None})
    if request.top_logprobs:
        chat.update(logprobs=True, top_logprobs=request.top_logprobs)
    text_format = (request.text or {}).get("format")
    if isinstance(text_format, dict) and text_format.get("type") == "json_schema":
        schema = {k: v for k, v in text_format.items() if k != "type"}
        chat["response_format"] = {"type": "json_schema", "json_schema": schema}
    for key, value in body.items():
        if key not in _TRANSLATED and key not in RESPONSE_ONLY:
            chat[key] = value  # vLLM extras: top_k, seed, chat_template_kwargs, …
    return chat
