"""Hindsight: what the conversation's real tool results already prove, before anything is imagined.

A real result is a fact, an imagined one a prediction. When the conversation holds an assistant
tool call whose ``tool`` message reports an error (``real_error``: the one definition, shared with
the server's feedback path), making the identical call again — same tool, same canonical
arguments (``ToolCall.signature``) — is expected to fail the same way, and is vetoed like a
schema error, with no imagination spent (code ``REAL_FAILURE_REPEATED``).

The fact holds only while nothing may have changed the world since. *Any* other tool call
committed after the failure may have made the repeat succeed — a write (an order created, a
payment added), and a read too: a write refused until its entity was looked up (the validating
read agent policies require) succeeds after the read. So it ends every earlier failure's
standing, whatever its risk class (docs/decisions/0020-tool-risk-classes.md measured the
alternative, reads leaving failures standing, and it vetoed right calls). So does a new user message
(the user may have fixed something, or asked to try again). Within one assistant turn, a
failure counts only when no call of that turn succeeded (their order is unknown). A call whose
result has not arrived is another call committed. A call that failed for real — a repeat or any
other — ends no failure's standing: a failed call is taken to have changed nothing (a lookup
with a wrong id looked nothing up).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from .fidelity import parse_observation
from .messages import Message, call_signature

REPEAT_CODE = "REAL_FAILURE_REPEATED"


def real_error(real: Any) -> bool:
    """Whether a real tool result reports a failure (an ``error`` field, or text saying so)."""
    if isinstance(real, dict):
        return "error" in real or "error_tool_call" in real
    if isinstance(real, str):
        return real.strip().lower().startswith("error")
    return False


def content_text(content: Any) -> str:
    """A message's content as text (of content parts, the text ones)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def _calls(message: Message) -> list[tuple[str, str]]:
    """(id, signature) of an assistant message's well-formed tool calls."""
    found: list[tuple[str, str]] = []
    for raw in message.get("tool_calls") or ():
        function = raw.get("function") if isinstance(raw, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            continue
        arguments = function.get("arguments")
        # Clients send the engine's JSON text back; an object sent as is signs the same way.
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        found.append((str(raw.get("id")), call_signature(function["name"], text)))
    return found


def real_failures(messages: Iterable[Message]) -> dict[str, str]:
    """Signature -> the real error text, for calls whose repeat is still a known failure.

    The rules are the module docstring's: a later other call or a user message ends them.
    """
    standing: dict[str, str] = {}
    turn: list[tuple[str, str]] = []  # the last assistant turn's calls, (id, signature)
    results: dict[str, Any] = {}
    for message in messages:
        role = message.get("role")
        if role == "tool":
            results[str(message.get("tool_call_id"))] = message.get("content")
            continue
        standing = _settle(standing, turn, results)
        turn, results = [], {}
        if role == "user":
            standing = {}
        elif role == "assistant":
            turn = _calls(message)
    return _settle(standing, turn, results)


def _settle(
    standing: dict[str, str], turn: list[tuple[str, str]], results: dict[str, Any]
) -> dict[str, str]:
    """The failures standing after one assistant turn and the tool results that answered it."""
    if not turn:
        return standing
    failed: dict[str, str] = {}
    for call_id, signature in turn:
        if call_id not in results:
            return {}  # no result (yet): another call committed, its effect unknown
        text = content_text(results[call_id])
        if not real_error(parse_observation(text)):
            return {}  # it succeeded: the world may have changed
        failed[signature] = text
    return {**standing, **failed}  # every call failed: nothing changed, the old failures stand
