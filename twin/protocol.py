"""The chat-completions request as vLLM accepts it, and vLLM's error envelope.

Unknown fields are ignored (as vLLM does, with a log line). Invalid requests raise ``TwinError``,
rendered as ``{"error": {"message", "type", "param", "code"}}`` with the HTTP status as ``code``.
The two kinds of 400 vLLM sends are kept apart, as it does: a body that does not parse (missing
field, wrong type) gets FastAPI's ``"Bad Request"`` with a ``body.<field>`` param and pydantic's
error list; a parsed body with a value out of range gets ``BadRequestError`` with vLLM's own
message and, where vLLM names one, the parameter.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .config import MAX_MODEL_LEN
from .logprobs import MAX_LOGPROBS, VOCAB_SIZE
from .schema import JsonObject

_INT64 = 2**63  # vLLM bounds ``seed`` to a signed 64-bit integer
_MAX_N = 16384  # vLLM's VLLM_MAX_N_SEQUENCES default
_MAX_STOP_STRINGS = 4  # vLLM's VLLM_MAX_STOP_STRINGS default
_MAX_REPORTED_ERRORS = 10  # vLLM reports at most this many pydantic errors
_MAX_ERROR_CHARS = 1000  # and cuts each one's text at this length
# Pydantic's internal location segments that vLLM leaves out of ``param`` and ``loc``: anything
# bracketed (``list[str]``, ``literal['none',…]``) and these bare schema-kind names.
_BRANCH_TAG = re.compile(r"[\[\]{}()]")
_BRANCH_NAMES = frozenset(
    {
        "function-wrap",
        "function-after",
        "function-before",
        "function-plain",
        "json-or-python",
        "lax-or-strict",
        "chain",
        "default",
        "nullable",
        "tagged-union",
        "union",
        "call",
        "arguments",
        "is-instance",
        "is-subclass",
        "callable",
        "str",
        "int",
        "float",
        "bool",
        "bytes",
        "bytearray",
        "list",
        "tuple",
        "dict",
        "set",
        "frozenset",
        "complex",
        "none",
        "nonetype",
    }
)


class TwinError(Exception):
    """A request the twin refuses; carries vLLM's error type and HTTP status."""

    def __init__(
        self, message: str, *, param: str | None = None, status: int = 400, kind: str = ""
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.kind = kind or {400: "BadRequestError", 404: "NotFoundError"}.get(
            status, "InternalServerError"
        )

    @classmethod
    def for_parameter(cls, message: str, param: str, value: Any = None) -> TwinError:
        """vLLM's parameter error: the parameter (and value) appended to the message."""
        suffix = f"parameter={param}" + ("" if value is None else f", value={value}")
        return cls(f"{message} ({suffix})", param=param)

    def envelope(self) -> JsonObject:
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.status,
            }
        }


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str  # vLLM accepts custom roles as well as the OpenAI ones
    content: str | list[JsonObject] | None = None
    tool_calls: list[JsonObject] | None = None
    tool_call_id: str | None = None


class FunctionSpec(_Lenient):
    name: str
    description: str | None = None
    parameters: JsonObject | None = None


class ToolSpec(_Lenient):
    type: Literal["function"] = "function"
    function: FunctionSpec


class NamedFunction(_Lenient):
    name: str


class NamedToolChoice(_Lenient):
    type: Literal["function"] = "function"
    function: NamedFunction


class StreamOptions(_Lenient):
    include_usage: bool | None = None


class ChatRequest(_Lenient):
    """The fields the twin honours; everything else is accepted and ignored."""

    model: str | None = None
    messages: list[Message]
    tools: list[ToolSpec] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = True
    n: int = 1
    seed: int | None = Field(None, ge=-_INT64, le=_INT64 - 1)
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stop: str | Annotated[list[str], Field(max_length=_MAX_STOP_STRINGS)] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    logprobs: bool | None = False
    top_logprobs: int | None = 0

    @property
    def logprobs_top(self) -> int | None:
        """How many alternatives each token's logprobs list, or ``None`` when none are asked."""
        if not self.logprobs:
            return None
        top = self.top_logprobs or 0
        return VOCAB_SIZE if top == -1 else top

    @property
    def token_limit(self) -> int | None:
        if self.max_completion_tokens is not None:  # vLLM prefers it to the legacy field
            return self.max_completion_tokens
        return self.max_tokens

    @property
    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    @property
    def thinking(self) -> bool:
        return bool((self.chat_template_kwargs or {}).get("enable_thinking", True))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def tool_choice_name(self) -> str | None:
        if isinstance(self.tool_choice, NamedToolChoice):
            return self.tool_choice.function.name
        return self.tool_choice


def _summarise_input(value: Any) -> Any:
    """vLLM's bounded stand-in for an error's ``input``: containers are described, not shown."""
    if isinstance(value, list | tuple | set | frozenset | dict):
        return f"<{type(value).__name__} of {len(value)} items>"
    text = value if isinstance(value, str) else str(value)
    return text[:200] + "...[truncated]" if len(text) > 200 else text


def _location(loc: tuple[int | str, ...]) -> str:
    """vLLM's dotted ``body.<field>`` path: pydantic's union-branch tags (``str``,
    ``list[str]``, a model's name…) are dropped, so ``stop`` is ``body.stop``."""
    parts = [str(part) for part in loc]
    kept = [p for p in parts if not _BRANCH_TAG.search(p) and p.lower() not in _BRANCH_NAMES]
    return ".".join(["body", *(kept or parts)])


def _unparsable(exc: ValidationError) -> TwinError:
    """FastAPI's request-validation 400 as vLLM words it (``body.``-prefixed locations)."""
    errors = exc.errors(include_url=False)
    lines = []
    for error in errors[:_MAX_REPORTED_ERRORS]:
        item: dict[str, Any] = {"type": error["type"], "loc": _location(error["loc"])}
        item.update(msg=error["msg"], input=_summarise_input(error.get("input")))
        if "ctx" in error:
            item["ctx"] = error["ctx"]
        text = str(item)
        lines.append(
            text[:_MAX_ERROR_CHARS] + "...[truncated]" if len(text) > _MAX_ERROR_CHARS else text
        )
    label = "error" if len(errors) == 1 else "errors"
    message = f"{len(errors)} validation {label}:\n" + "".join(f"  {line}\n" for line in lines)
    if len(errors) > len(lines):
        message += f"  ...and {len(errors) - len(lines)} more {label}\n"
    param = _location(errors[0]["loc"])
    return TwinError(message.rstrip(), param=param, kind="Bad Request")


def _check_tools(request: ChatRequest) -> None:
    choice = request.tool_choice
    if choice not in (None, "none") and not request.tools:
        message = "When using `tool_choice`, `tools` must be set."
        raise TwinError.for_parameter(message, "tool_choice")
    if isinstance(choice, NamedToolChoice) and choice.function.name not in {
        t.function.name for t in request.tools or []
    }:
        raise TwinError.for_parameter(
            "The tool specified in `tool_choice` does not match any of the specified `tools`",
            "tool_choice",
        )
    top = request.top_logprobs
    if top is not None and top < 0 and top != -1:
        message = "`top_logprobs` must be a positive value or -1."
        raise TwinError.for_parameter(message, "top_logprobs", top)
    if top is not None and top != 0 and not request.logprobs:
        message = "when using `top_logprobs`, `logprobs` must be set to true."
        raise TwinError.for_parameter(message, "top_logprobs")
    if request.stream_options is not None and not request.stream:
        raise TwinError.for_parameter(
            "Stream options can only be defined when `stream=True`.", "stream_options"
        )


def _check_sampling(request: ChatRequest, max_model_len: int) -> None:
    """vLLM's sampling-parameter checks, in its order and words."""
    if not request.messages:
        raise TwinError(
            "Cannot apply chat template to an empty conversation. Provide at least one message."
        )
    limit = request.token_limit
    name = "max_completion_tokens" if request.max_completion_tokens is not None else "max_tokens"
    if limit is not None and limit > max_model_len:
        raise TwinError.for_parameter(
            f"{name}={limit} cannot be greater than max_model_len={max_model_len}. "
            "Please request fewer output tokens.",
            name,
            limit,
        )
    if request.n < 1:
        raise TwinError(f"n must be at least 1, got {request.n}.")
    if request.n > _MAX_N:
        raise TwinError(
            f"n must be at most {_MAX_N}, got {request.n}. "
            "To increase this limit, set the VLLM_MAX_N_SEQUENCES environment variable."
        )
    t = request.temperature
    if t is not None and not math.isfinite(t):
        message = f"temperature must be a finite number, got {t}."
        raise TwinError.for_parameter(message, "temperature", t)
    if t is not None and t < 0:
        message = f"temperature must be non-negative, got {t}."
        raise TwinError.for_parameter(message, "temperature", t)
    if t is not None and t > 2:
        message = f"temperature must be in [0, 2], got {t}."
        raise TwinError.for_parameter(message, "temperature", t)
    if request.top_p is not None and not 0 < request.top_p <= 1:
        p = request.top_p
        raise TwinError.for_parameter(f"top_p must be in (0, 1], got {p}.", "top_p", p)
    if request.top_k is not None and request.top_k < -1:
        raise TwinError(f"top_k must be 0 (disable), or at least 1, got {request.top_k}.")
    if request.min_p is not None and not 0 <= request.min_p <= 1:
        raise TwinError(f"min_p must be in [0, 1], got {request.min_p}.")
    if limit is not None and limit < 1:
        raise TwinError.for_parameter(
            f"max_tokens must be at least 1, got {limit}.", "max_tokens", limit
        )
    if request.greedy and request.n > 1:
        raise TwinError(f"n must be 1 when using greedy sampling, got {request.n}.")
    asked = request.logprobs_top
    if asked is not None and asked > MAX_LOGPROBS:
        raise TwinError.for_parameter(
            f"Requested sample logprobs of {asked}, which is greater than max allowed: "
            f"{MAX_LOGPROBS}",
            "logprobs",
            asked,
        )


def parse_request(body: Any, max_model_len: int = MAX_MODEL_LEN) -> ChatRequest:
    """Validate a decoded JSON body into a request, or raise vLLM's 400 for it."""
    if not isinstance(body, dict):
        raise TwinError("The request body must be a JSON object.")
    try:
        request = ChatRequest.model_validate(body)
    except ValidationError as exc:
        raise _unparsable(exc) from exc
    _check_tools(request)
    _check_sampling(request, max_model_len)
    return request
