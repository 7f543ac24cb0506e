"""Render a chat request as the text Qwen3's chat template would feed the model.

Token counts, prefix-cache blocks and prefill time are all computed over this rendering, so its
shape matters where it matters for caching: tools live in the system block at the very start, and
each message is appended in order, so a conversation that grows keeps its prefix.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from .schema import JsonObject


def message_text(message: JsonObject) -> str:
    """A message's content as plain text (string content or the text parts of a list)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def _tool_calls_text(message: JsonObject) -> str:
    parts = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            function = {}
        arguments: Any = function.get("arguments", "{}")
        with contextlib.suppress(json.JSONDecodeError):
            arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
        body = json.dumps({"name": function.get("name"), "arguments": arguments})
        parts.append(f"\n<tool_call>\n{body}\n</tool_call>")
    return "".join(parts)


def render_prompt(messages: list[JsonObject], tools: list[JsonObject] | None) -> str:
    """The rendered prompt, ending with the assistant generation header."""
    out: list[str] = []
    system = ""
    rest = messages
    if messages and messages[0].get("role") in ("system", "developer"):
        system = message_text(messages[0])
        rest = messages[1:]
    if tools:
        listing = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        system = (
            f"{system}\n\n# Tools\n\nYou may call one or more functions to assist with the user "
            f"query.\n\n<tools>\n{listing}\n</tools>\n\nFor each function call, return a json "
            "object with function name and arguments within <tool_call></tool_call> XML tags."
        ).lstrip()
    if system:
        out.append(f"<|im_start|>system\n{system}<|im_end|>\n")
    for message in rest:
        role = message.get("role")
        if role == "tool":
            out.append(
                f"<|im_start|>user\n<tool_response>\n{message_text(message)}\n"
                "</tool_response><|im_end|>\n"
            )
        elif role == "assistant":
            text = message_text(message) + _tool_calls_text(message)
            out.append(f"<|im_start|>assistant\n{text}<|im_end|>\n")
        else:
            out.append(f"<|im_start|>{role}\n{message_text(message)}<|im_end|>\n")
    out.append("<|im_start|>assistant\n")
    return "".join(out)
