"""OpenAI-shaped value objects that cross the ``Generator`` port, and canonical action signatures.

The planner speaks to engines in the chat-completion vocabulary so that the server's adapter is a
few lines: ``GenerationRequest.to_openai_body()`` gives the JSON body to POST (the adapter adds
``model``), and ``GenerationResponse.from_openai(body)`` reads the engine's answer back.

An ``AssistantTurn`` is one choice: thinking (``reasoning``, or vLLM's older ``reasoning_content``),
content and hermes tool calls whose ``arguments`` stay the JSON *string* the engine produced. When
vLLM's tool parser missed a call and left ``<tool_call>`` text in the content, the turn is re-read
with our own lenient parser, so a candidate is never lost to a parser disagreement.

Two turns are the same action when their signatures are equal (docs/formats.md): per tool call,
``name + " " + canonical_json(arguments)``, one line per call; ``answer`` for a final answer.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from .errors import MalformedResponse
from .parsing import parse_turn_text

Role = Literal["act", "rehearse", "commit"]
JSON = Any
Message = dict[str, Any]

ANSWER = "answer"
# ``isinstance(x, Mapping)`` runs a Python-level ABC check; a parsed JSON object is a dict, and
# testing ``dict`` first answers it in C (each engine answer is read with a few dozen of these).
JSON_OBJECT = (dict, Mapping)
# Fields of an engine's choice kept on the turn for the committed answer (vLLM writes them).
ENGINE_CHOICE_FIELDS = ("logprobs", "stop_reason")


def canonical_json(value: JSON) -> str:
    """The pinned canonical form: sorted keys, no spaces, UTF-8 kept as is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@functools.lru_cache(maxsize=1024)
def call_signature(name: str, arguments: str) -> str:
    """``name + " " + canonical_json(arguments)``: one call's action signature.

    The planner compares actions by signature many times per rehearsal (grouping candidates,
    finding a trajectory, the summary): about 30 computations for a K=4 request, each a JSON
    parse and dump. A call's text determines its signature, so it is computed once.
    """
    return f"{name} {canonical_arguments(arguments)}"


@functools.lru_cache(maxsize=1024)
def canonical_arguments(arguments: str) -> str:
    """A call's arguments text in the canonical form (its signature's and grounding's key)."""
    return canonical_json(loads_arguments(arguments))


def loads_arguments(arguments: str) -> JSON:
    """A tool call's arguments as JSON when they parse, else the raw string itself."""
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


@functools.lru_cache(maxsize=1024)
def hermes_block(name: str, arguments: str) -> str:
    """One call as the model writes it: ``<tool_call>`` around its name and parsed arguments.

    Every imagination of a turn renders that turn's calls again (K=4: four times the same text),
    so the text of a call is made once.
    """
    block = {"name": name, "arguments": loads_arguments(arguments)}
    return f"\n<tool_call>\n{json.dumps(block, ensure_ascii=False)}\n</tool_call>"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One hermes tool call; ``arguments`` is the JSON text, exactly as the engine wrote it."""

    id: str
    name: str
    arguments: str

    @property
    def parsed_arguments(self) -> JSON:
        return loads_arguments(self.arguments)

    @property
    def signature(self) -> str:
        return call_signature(self.name, self.arguments)

    def to_openai(self) -> dict[str, Any]:
        function = {"name": self.name, "arguments": self.arguments}
        return {"id": self.id, "type": "function", "function": function}

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    def with_id(self, call_id: str) -> ToolCall:
        """The same call under another id (``dataclasses.replace`` walks the fields in Python)."""
        return ToolCall(call_id, self.name, self.arguments)


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of one or more engine calls; ``cached`` is the prefix-cache hit count."""

    prompt: int = 0
    completion: int = 0
    cached: int = 0
    reasoning: int = 0  # of ``completion``, the thinking tokens (vLLM's reasoning_tokens)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt + other.prompt,
            self.completion + other.completion,
            self.cached + other.cached,
            self.reasoning + other.reasoning,
        )

    def to_dict(self) -> dict[str, int]:
        return {"prompt": self.prompt, "completion": self.completion, "cached": self.cached}

    @classmethod
    def from_openai(cls, body: object) -> Usage:
        """Read an OpenAI ``usage`` object; absent or odd fields count as zero."""
        return cls(*usage_counts(body))


def usage_counts(body: object) -> tuple[int, int, int, int]:
    """An OpenAI ``usage`` object's (prompt, completion, cached, reasoning) token counts, as
    ``Usage.from_openai`` reads them, without building a ``Usage``: a pass-through only adds
    them to its metrics, and a frozen dataclass's ``__init__`` was half of the 2 us this took.
    """
    # ``is not None`` first: vLLM sends ``null`` details, and ``isinstance(None, Mapping)`` is
    # the ABC's slow path.
    usage = body if body is not None and isinstance(body, JSON_OBJECT) else {}
    details = usage.get("prompt_tokens_details")
    cached = (
        details.get("cached_tokens")
        if details is not None and isinstance(details, JSON_OBJECT)
        else 0
    )
    out = usage.get("completion_tokens_details")
    reasoning = (
        out.get("reasoning_tokens") if out is not None and isinstance(out, JSON_OBJECT) else 0
    )
    prompt = usage.get("prompt_tokens")
    completion = usage.get("completion_tokens")
    # ``type(...) is int``: a count, never a bool; inline, as this runs on every pass-through.
    return (
        prompt if type(prompt) is int and prompt > 0 else 0,
        completion if type(completion) is int and completion > 0 else 0,
        cached if type(cached) is int and cached > 0 else 0,
        reasoning if type(reasoning) is int and reasoning > 0 else 0,
    )


#: No tokens: one shared value where a sum starts or a call cost nothing, so that a rehearsal
#: does not build a frozen dataclass for each.
NO_USAGE = Usage()


@dataclass(frozen=True, slots=True)
class AssistantTurn:
    """One assistant choice: what the model thought, said and called."""

    content: str | None = None
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    # What the engine said about this choice that a client of the engine would have seen and
    # the core does not read (``logprobs``, ``stop_reason``, the answer's
    # ``system_fingerprint``): carried so the committed turn is answered as vLLM answers it.
    engine_fields: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def is_answer(self) -> bool:
        return not self.tool_calls

    def with_calls(self, tool_calls: tuple[ToolCall, ...]) -> AssistantTurn:
        """The same turn with other tool calls (``dataclasses.replace`` walks fields in Python)."""
        return AssistantTurn(self.content, self.reasoning, tool_calls, self.finish_reason,
                             self.engine_fields)  # fmt: skip

    @property
    def signature(self) -> str:
        calls = self.tool_calls
        if not calls:
            return ANSWER
        if len(calls) == 1:  # most turns; read ~18 times per K=4 rehearsal, so no join for one
            return calls[0].signature
        return "\n".join(call.signature for call in calls)

    @property
    def actions(self) -> tuple[str, ...]:
        """One signature per tool call, or ``("answer",)`` for a final answer."""
        return (ANSWER,) if self.is_answer else tuple(c.signature for c in self.tool_calls)

    def raw_text(self) -> str:
        """The turn as the model wrote it (thinking, content, hermes blocks), DESIGN §2 part 4."""
        text = f"<think>\n{self.reasoning}\n</think>\n\n" if self.reasoning else ""
        text += self.content or ""
        for call in self.tool_calls:
            text += hermes_block(call.name, call.arguments)
        return text

    def to_message(self) -> Message:
        """The turn as an OpenAI assistant message, fit to send back in a conversation."""
        message: Message = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [call.to_openai() for call in self.tool_calls]
        return message

    def to_dict(self) -> dict[str, Any]:
        return {
            "content": self.content,
            "reasoning": self.reasoning,
            "tool_calls": [call.to_dict() for call in self.tool_calls],
            "finish_reason": self.finish_reason,
        }

    @classmethod
    def from_openai(
        cls, choice: object, index: int = 0, *, answer_fields: Mapping[str, Any] | None = None
    ) -> AssistantTurn:
        """Read one OpenAI ``choices[i]``; raises MalformedResponse on a wrong shape.

        ``answer_fields`` are the answer's own fields to keep with the choice's (its
        ``system_fingerprint``), so a turn is built once rather than copied to add them.
        """
        if not isinstance(choice, JSON_OBJECT) or not isinstance(
            choice.get("message"), JSON_OBJECT
        ):
            raise MalformedResponse(f"choice {index} has no message object")
        message = choice["message"]
        reasoning = message.get("reasoning")
        if reasoning is None:
            reasoning = message.get("reasoning_content")
        content = message.get("content")
        calls = tuple(
            _tool_call_from_openai(raw, f"call-{index}-{i}")
            for i, raw in enumerate(message.get("tool_calls") or ())
        )
        finish = choice.get("finish_reason")
        engine_fields = {k: choice[k] for k in ENGINE_CHOICE_FIELDS if choice.get(k) is not None}
        if answer_fields:
            engine_fields.update(answer_fields)
        turn = cls(
            content=content if isinstance(content, str) else None,
            reasoning=reasoning if isinstance(reasoning, str) else None,
            tool_calls=calls,
            finish_reason=finish if isinstance(finish, str) else None,
            engine_fields=engine_fields,
        )
        if not calls and turn.content and "<tool_call>" in turn.content:
            return turn._reread(index)
        return turn

    def _reread(self, index: int) -> AssistantTurn:
        """The turn with tool calls our own parser found in its content (vLLM's parser missed)."""
        parsed = parse_turn_text(self.content or "")
        calls = tuple(
            ToolCall(f"call-{index}-{i}", call.name, json.dumps(call.arguments, ensure_ascii=False))
            for i, call in enumerate(parsed.calls)
        )
        reasoning = self.reasoning or parsed.reasoning
        return AssistantTurn(parsed.content, reasoning, calls, self.finish_reason,
                             self.engine_fields)  # fmt: skip


def _tool_call_from_openai(raw: object, fallback_id: str) -> ToolCall:
    function = raw.get("function") if isinstance(raw, JSON_OBJECT) else None
    if not isinstance(function, JSON_OBJECT) or not isinstance(function.get("name"), str):
        raise MalformedResponse("tool call without a function name")
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
    call_id = raw.get("id") if isinstance(raw, JSON_OBJECT) else None
    return ToolCall(
        call_id if isinstance(call_id, str) and call_id else fallback_id,
        function["name"],
        arguments,
    )


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One chat-completion call. ``extra`` is passed through untouched (top_k, tool_choice, ...)."""

    role: Role
    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...] | None = None
    n: int = 1
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_openai_body(self) -> dict[str, Any]:
        """The JSON body for ``POST /v1/chat/completions``, without ``model``."""
        body: dict[str, Any] = dict(self.extra)
        body["messages"] = list(self.messages)
        if self.tools is not None:
            body["tools"] = list(self.tools)
        body["n"] = self.n
        optional = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
        }
        body.update({key: value for key, value in optional.items() if value is not None})
        return body


@dataclass(frozen=True, slots=True)
class GenerationResponse:
    """What one call returned: its choices in order, and the tokens it cost."""

    choices: tuple[AssistantTurn, ...]
    usage: Usage = NO_USAGE

    @classmethod
    def from_openai(cls, body: object) -> GenerationResponse:
        """Read a ChatCompletion JSON body; raises MalformedResponse when it has no choices."""
        raw = body.get("choices") if isinstance(body, JSON_OBJECT) else None
        if not isinstance(raw, list) or not raw:
            raise MalformedResponse("chat completion without choices")
        ordered = sorted(
            enumerate(raw),
            key=lambda item: _choice_index(item[1], item[0]),
        )
        answer = cast(Mapping[str, Any], body)
        fingerprint = answer.get("system_fingerprint")
        extra = {"system_fingerprint": fingerprint} if isinstance(fingerprint, str) else {}
        choices = tuple(
            AssistantTurn.from_openai(c, i, answer_fields=extra) for i, (_, c) in enumerate(ordered)
        )
        return cls(choices, Usage.from_openai(answer.get("usage")))


def _choice_index(choice: object, position: int) -> int:
    index = choice.get("index") if isinstance(choice, JSON_OBJECT) else None
    return index if isinstance(index, int) and not isinstance(index, bool) else position


def from_openai_response(body: object) -> GenerationResponse:
    """Shorthand for ``GenerationResponse.from_openai`` (what the server's engine adapter calls)."""
    return GenerationResponse.from_openai(body)
