"""The committed turn as a Responses API answer: the ``response`` object and its stream events.

Shapes follow vLLM 0.32's ``/v1/responses`` (checked against a real one by tests/contract): the
output is a ``reasoning`` item (the thinking), a ``message`` item (the text) and one
``function_call`` item per committed call, whose ``call_id`` is the gateway-minted tool-call id,
so the ``function_call_output`` that answers it is recognised as a real result. A turn cut by
``max_output_tokens`` is ``status: "incomplete"`` with ``incomplete_details.reason``. The stream
is vLLM's event sequence — ``response.created``, ``response.in_progress``, per item
``response.output_item.added`` … ``response.output_item.done`` (with the text, reasoning and
argument deltas and their ``.done`` events between), then ``response.completed`` — each event an
SSE ``event:`` line and a ``data:`` line with a ``sequence_number``. Our ``rehearsal`` summary is
a field of the response object (in ``response.completed`` too), where SDKs keep extra fields.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from rehearsal_gateway.rehearsal.messages import AssistantTurn, Usage

from ..responses_protocol import ResponsesRequest
from .committed import ARGUMENT_PIECES


def _mint(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


def mint_response_id() -> str:
    return _mint("resp")


def response_usage(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt,
        "input_tokens_details": {"cached_tokens": usage.cached},
        "output_tokens": usage.completion,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning},
        "total_tokens": usage.prompt + usage.completion,
    }


def output_items(turn: AssistantTurn) -> list[dict[str, Any]]:
    """The finished output items of ``turn`` (ids minted here, call ids from the turn)."""
    items: list[dict[str, Any]] = []
    if turn.reasoning:
        items.append(
            {
                "id": _mint("rs"), "summary": [], "type": "reasoning",
                "content": [{"text": turn.reasoning, "type": "reasoning_text"}],
                "encrypted_content": None, "status": "completed",
            }
        )  # fmt: skip
    if turn.content:
        logprobs = turn.engine_fields.get("logprobs")
        part: dict[str, Any] = {"annotations": [], "text": turn.content, "type": "output_text",
                "logprobs": (logprobs or {}).get("content") if logprobs else None}  # fmt: skip
        items.append(
            {
                "id": _mint("msg"), "content": [part], "role": "assistant",
                "status": "completed", "type": "message",
            }
        )  # fmt: skip
    for call in turn.tool_calls:
        items.append(
            {
                "arguments": call.arguments, "call_id": call.id, "name": call.name,
                "type": "function_call", "id": _mint("fc"), "status": "completed",
            }
        )  # fmt: skip
    return items


@dataclass
class ResponseWriter:
    """Builds the response object and its events for one answer."""

    request: ResponsesRequest
    model: str
    response_id: str = field(default_factory=mint_response_id)
    created_at: int = field(default_factory=lambda: int(time.time()))
    sequence: int = 0

    def response(
        self,
        *,
        status: str,
        output: list[dict[str, Any]],
        usage: Usage | None = None,
        cut: bool = False,
        rehearsal: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The ``response`` object (vLLM's field order), with our ``rehearsal`` summary."""
        req = self.request
        body: dict[str, Any] = {
            "id": self.response_id,
            "created_at": self.created_at,
            "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
            "instructions": req.instructions,
            "metadata": req.metadata,
            "model": self.model,
            "object": "response",
            "output": output,
            "parallel_tool_calls": req.parallel_tool_calls is not False,
            "temperature": req.temperature,
            "tool_choice": req.tool_choice or "auto",
            "tools": req.tools or [],
            "top_p": req.top_p,
            "background": False,
            "max_output_tokens": req.max_output_tokens,
            "max_tool_calls": None,
            "previous_response_id": None,
            "prompt": None,
            "reasoning": req.reasoning,
            "service_tier": "auto",
            "status": status,
            "text": req.text,
            "top_logprobs": req.top_logprobs,
            "truncation": "disabled",
            "usage": None if usage is None else response_usage(usage),
            "user": req.user,
            "store": False,  # the gateway keeps rehearsals, not responses (docs/responses.md)
        }
        if rehearsal is not None:
            body["rehearsal"] = rehearsal
        return body

    def finished(
        self, turn: AssistantTurn, usage: Usage, rehearsal: dict[str, Any]
    ) -> dict[str, Any]:
        cut = turn.finish_reason == "length"
        return self.response(
            status="incomplete" if cut else "completed",
            output=output_items(turn),
            usage=usage,
            cut=cut,
            rehearsal=rehearsal,
        )

    def event(self, kind: str, **fields: Any) -> bytes:
        """One SSE event: ``event: kind`` and its ``data`` with the next sequence number."""
        data = {**fields, "sequence_number": self.sequence, "type": kind}
        self.sequence += 1
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"

    def opening(self) -> Iterator[bytes]:
        started = self.response(status="in_progress", output=[])
        yield self.event("response.created", response=started)
        yield self.event("response.in_progress", response=started)

    def closing(self, finished: dict[str, Any]) -> Iterator[bytes]:
        """Every item's events, then ``response.completed`` carrying the whole response."""
        for index, item in enumerate(finished["output"]):
            yield from self._item_events(index, item)
        yield self.event("response.completed", response=finished)

    def _item_events(self, index: int, item: dict[str, Any]) -> Iterator[bytes]:
        at = {"item_id": item["id"], "output_index": index}
        kind = item["type"]
        if kind == "function_call":
            yield self.event("response.output_item.added", output_index=index,
                             item={**item, "arguments": "", "status": "in_progress"})  # fmt: skip
            arguments = item["arguments"]
            step = max(1, -(-len(arguments) // ARGUMENT_PIECES))
            for start in range(0, len(arguments), step):
                yield self.event("response.function_call_arguments.delta",
                                 delta=arguments[start : start + step], **at)  # fmt: skip
            yield self.event("response.function_call_arguments.done", arguments=arguments,
                             name=item["name"], **at)  # fmt: skip
        else:
            part = item["content"][0]
            text_kind = "reasoning_text" if kind == "reasoning" else "output_text"
            started = {**item, "content": [] if kind == "message" else None,
                       "status": "in_progress"}  # fmt: skip
            yield self.event("response.output_item.added", output_index=index, item=started)
            empty = {**part, "text": ""}
            yield self.event("response.content_part.added", content_index=0, part=empty, **at)
            if kind == "message":
                yield self.event("response.output_text.delta", content_index=0,
                                 delta=part["text"], logprobs=[], **at)  # fmt: skip
            else:
                yield self.event("response.reasoning_text.delta", content_index=0,
                                 delta=part["text"], **at)  # fmt: skip
            extra: dict[str, Any] = {"logprobs": []} if kind == "message" else {}
            yield self.event(f"response.{text_kind}.done", content_index=0, text=part["text"],
                             **extra, **at)  # fmt: skip
            yield self.event("response.content_part.done", content_index=0, part=part, **at)
        yield self.event("response.output_item.done", output_index=index, item=item)
