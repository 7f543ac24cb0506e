"""The chat-completions request as vLLM accepts it, and vLLM's error envelope.

Unknown fields are ignored (as vLLM does, with a log line). Invalid requests raise ``TwinError``,
rendered as ``{"error": {"message", "type", "param", "code"}}`` with the HTTP status as ``code``,
the shape recent vLLM versions return.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from twin.schema import JsonObject


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
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[JsonObject] | None = None
    tool_calls: list[JsonObject] | None = None
    tool_call_id: str | None = None


class FunctionSpec(_Lenient):
    name: str = Field(min_length=1)
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
    messages: list[Message] = Field(min_length=1)
    tools: list[ToolSpec] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = True
    n: int = Field(1, ge=1, le=16)
    seed: int | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=-1)
    min_p: float | None = Field(None, ge=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    chat_template_kwargs: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _tool_choice_needs_tools(self) -> ChatRequest:
        choice = self.tool_choice
        if choice not in (None, "none", "auto") and not self.tools:
            raise ValueError("When using `tool_choice`, `tools` must be set.")
        if isinstance(choice, NamedToolChoice) and choice.function.name not in {
            t.function.name for t in self.tools or []
        }:
            raise ValueError(f"tool_choice names '{choice.function.name}', which is not in tools")
        if self.stream_options is not None and not self.stream:
            raise ValueError("Stream options can only be defined when `stream=True`.")
        return self

    @property
    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    @property
    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    @property
    def thinking(self) -> bool:
        return bool((self.chat_template_kwargs or {}).get("enable_thinking", True))

    @property
    def tool_choice_name(self) -> str | None:
        if isinstance(self.tool_choice, NamedToolChoice):
            return self.tool_choice.function.name
        return self.tool_choice


def parse_request(body: Any) -> ChatRequest:
    """Validate a decoded JSON body, mapping pydantic's complaint to vLLM's 400."""
    if not isinstance(body, dict):
        raise TwinError("The request body must be a JSON object.")
    try:
        return ChatRequest.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        location = ".".join(str(part) for part in first.get("loc", ()))
        message = str(first.get("msg", "invalid value"))
        param = str(first["loc"][0]) if first.get("loc") else None
        if param is None:  # a cross-field rule: name the field its message is about
            param = next((f for f in ("tool_choice", "stream_options") if f in message), None)
        raise TwinError(f"{location or 'request'}: {message}", param=param) from exc
