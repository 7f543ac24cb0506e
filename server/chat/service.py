"""The chat service: the front door between the routes and the layers below.

A route turns bytes into a ``ChatCall`` with ``ChatService.prepare`` and hands it to
``ChatService.complete``, which decides what to do with it and returns a ``ChatAnswer``: a whole
JSON body, an open engine stream, or a rehearsal still to be streamed. A call whose budget asks
for rehearsal (``server/rehearse/service.py``) is rehearsed; every other call is a
**pass-through** (the client's request, to one engine, answer relayed untouched). Either way,
tool results answering calls this gateway committed are first fed back
(``server/rehearse/feedback.py``). Engine calls and their retries are ``EngineCalls``
(``server/engines/calls.py``), shared with rehearsal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import orjson
from pydantic import ValidationError

from rehearsal_gateway.rehearsal.risk import has_annotations, strip_annotations

from ..chat_call import PASSTHROUGH, ChatCall, HeadFields, JsonAnswer
from ..engines.calls import EngineCalls, StreamAnswer
from ..engines.pool import EnginePool, affinity_key
from ..errors import InvalidRequest
from ..protocol import (
    ChatCompletionRequest,
    ChatRequestHead,
    tool_schema_problem,
)
from ..rehearse.feedback import Feedback
from ..rehearse.service import RehearsalRun, RehearsalService
from ..settings import Role
from .model_switch import ModelSwitch
from .precheck import HeadPrecheck

ChatAnswer = JsonAnswer | StreamAnswer | RehearsalRun
RequestT = TypeVar("RequestT", bound=ChatRequestHead)


def decode_chat_request(
    raw: bytes,
    model: type[RequestT] = ChatCompletionRequest,  # type: ignore[assignment]
) -> tuple[dict[str, Any], RequestT]:
    """Parse and validate a request body (all of it by default, or only its ``ChatRequestHead``);
    ``InvalidRequest`` names what is wrong."""
    body = decode_json_object(raw)
    return body, check_chat_request(body, model)


def check_chat_request(body: dict[str, Any], model: type[RequestT]) -> RequestT:
    """``body`` validated with ``model``, then its tools' schemas; ``InvalidRequest`` if not.

    The head checks the schemas within its model (``ParametersHead``). The whole request's
    tools keep their parameters as given (rehearsal prompts show them), so theirs are checked
    after it.
    """
    request = validate_request(model, body)
    if model is not ChatRequestHead:
        _raise_tool_schema_problem(body)
    return request


def _raise_tool_schema_problem(body: dict[str, Any]) -> None:
    if (problem := tool_schema_problem(body.get("tools"))) is not None:
        param, message = problem
        raise InvalidRequest(f"{param}: {message}", param=param)


def decode_json_object(raw: bytes) -> dict[str, Any]:
    """The request body's JSON object; ``InvalidRequest`` when it is not one."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"the request body is not valid JSON ({exc.msg})") from None
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object")
    return body


def validate_request(model: type[RequestT], body: dict[str, Any]) -> RequestT:
    """``body`` checked against a request model; ``InvalidRequest`` names what is wrong."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        if first["loc"][0] == "tools" and "parameters" in first["loc"]:
            _raise_tool_schema_problem(body)  # the head's schema check: our message for it
        param = _param_path(first["loc"])
        raise InvalidRequest(f"{param}: {first['msg']}", param=param) from None


def _param_path(loc: tuple[int | str, ...]) -> str:
    """``("messages", 0, "user", "content")`` -> ``messages[0].content``.

    Pydantic puts union members' names in the location (a message's role tag, ``literal[...]``,
    a model class name); they are not request parameters, so they are left out.
    """
    path = ""
    after_index = False
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
            after_index = True
            continue
        is_tag = (
            (after_index and part in _ROLE_TAGS)
            or part in _TYPE_TAGS
            or "[" in part
            or part[:1].isupper()
        )
        if not is_tag:
            path += f".{part}" if path else part
        after_index = False
    return path


_ROLE_TAGS = frozenset(("system", "developer", "user", "assistant", "tool"))
_TYPE_TAGS = frozenset(("str", "int", "float", "bool", "dict", "list", "none"))


class ChatService:
    """Serves chat calls: pass-through on the engines, or rehearsed, after feedback."""

    def __init__(
        self,
        pool: EnginePool,
        calls: EngineCalls,
        *,
        rehearsal: RehearsalService,
        feedback: Feedback,
        precheck: HeadPrecheck | None = None,
        switch: ModelSwitch | None = None,
    ) -> None:
        self.pool = pool
        # None: no model-name switch offered (server/chat/model_switch.py).
        self.switch = switch if switch is not None and switch.enabled else None
        self.calls = calls
        self.rehearsal = rehearsal
        self.feedback = feedback
        # None: pydantic checks every pass-through's head (server/chat/precheck.py).
        self.precheck = precheck

    def prepare(
        self,
        raw: bytes,
        *,
        session_id: str | None,
        tenant: str,
        headers: Mapping[str, str] | None = None,
    ) -> ChatCall:
        """Validate a request body (and its rehearsal knobs) and work out where it goes.

        A pass-through is checked as far as the gateway reads it (``ChatRequestHead``, first by
        the Rust pre-check of ``server/chat/precheck.py``) and its bytes relayed; a call to
        rehearse is checked whole, since rehearsal builds requests of its own from it.
        """
        body = decode_json_object(raw)
        switched = False
        if self.switch is not None and isinstance(body.get("model"), str):
            found = self.switch.split(body["model"])
            if found is not None:
                body["model"], knobs = found
                headers = {**knobs, **(headers or {})}  # the request's own headers win
                switched = True
        try:
            budget = self.rehearsal.budget_for(body, headers or {})
        except InvalidRequest:
            check_chat_request(body, ChatRequestHead)  # a malformed body's 400 comes first
            raise
        # One validation, not the head's then the whole's (~50 us saved per rehearsed request).
        request: ChatRequestHead | HeadFields
        if budget is not None:
            request = check_chat_request(body, ChatCompletionRequest)
        elif self.precheck is None or (fields := self.precheck.fields(body)) is None:
            request = check_chat_request(body, ChatRequestHead)  # pydantic decides, and says why
        else:
            request = fields  # the Rust pre-check passed it (server/chat/precheck.py)
        model = self.pool.resolve_model(request.model)
        payload = raw
        # Tools' MCP annotations are the gateway's to read (rehearsal/risk.py), never an
        # engine's: its chat template would print them. A bytes search first, as most bodies
        # have none.
        annotated = b'"annotations"' in raw and has_annotations(body.get("tools"))
        if switched or model != request.model or "rehearsal" in body or annotated:
            # ``rehearsal`` is ours: an engine must never see it (vLLM would reject it).
            engine_body = {k: v for k, v in body.items() if k != "rehearsal"}
            if annotated:
                engine_body["tools"] = list(strip_annotations(body["tools"]))
            payload = orjson.dumps({**engine_body, "model": model})
        return ChatCall(
            request=request,
            body=body,
            payload=payload,
            model=model,
            # A rehearsal always has one: its memory is filed under it (``server/rehearse``).
            affinity=affinity_key(session_id, request.user, body["messages"])
            if budget is not None or self.pool.keyed
            else b"",
            tenant=tenant,
            session=session_id or request.user,
            budget=budget,
        )

    async def complete(self, call: ChatCall) -> ChatAnswer:
        """Answer one chat call: feed back real results, then rehearse or pass through."""
        if call.budget is not None:
            learned = await self.feedback.collect(call.tenant, call.body["messages"])
            return await self.rehearsal.answer(call, call.budget, learned)
        # A pass-through answer carries no feedback: none of it is on its path.
        self.feedback.collect_later(call.tenant, call.body["messages"])
        if call.stream:
            return await self.passthrough_stream(call)
        return JsonAnswer(await self.passthrough(call))

    async def passthrough(self, call: ChatCall, role: Role = "act") -> bytes:
        """Send the client's request to one engine; retry on another for retryable failures."""
        return await self.calls.call(
            call.payload, role=role, model=call.model, affinity=call.affinity, label=PASSTHROUGH,
            samples=call.request.n or 1,
        )  # fmt: skip

    async def passthrough_stream(self, call: ChatCall, role: Role = "act") -> StreamAnswer:
        """Open a stream on one engine, retrying elsewhere until its first chunk arrives."""
        return await self.calls.open_stream(
            call.payload, role=role, model=call.model, affinity=call.affinity, label=PASSTHROUGH,
            samples=call.request.n or 1,
        )  # fmt: skip
