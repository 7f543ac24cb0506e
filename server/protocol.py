"""OpenAI chat-completions wire models: request, response, stream chunk, models list, error.

Fields follow the OpenAI reference order. **Unknown fields are kept** (``extra="allow"``) at every
level: the gateway fronts vLLM, whose requests carry extras (``top_k``, ``structured_outputs``,
``chat_template_kwargs``, …) and whose responses carry extras (``reasoning``, ``prompt_token_ids``,
…); dropping them would make the gateway a lossy proxy. Known fields are checked **strictly** (no
string-to-number coercion), so a wrong type is a 400 here rather than a surprise upstream.

On the pass-through path the request is checked with ``ChatRequestHead`` (what the gateway reads;
the engine checks the rest) and the engine receives the client's original bytes (or, when an
alias is rewritten, the parsed JSON with only ``model`` changed); a rehearsed request is checked
whole with ``ChatCompletionRequest``. The models decide *whether* a request is acceptable, never
*how* it is re-encoded.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict

_OPEN = ConfigDict(extra="allow", strict=True)


class _Wire(BaseModel):
    model_config = _OPEN


# --------------------------------------------------------------------------- request


_GORILLA_TYPES = (
    "tool parameters must be a JSON Schema with type 'object', not 'dict' (a BFCL/Gorilla "
    "function doc): use JSON Schema types throughout (dict -> object, float -> number, "
    "tuple -> array, any -> string), e.g. with BFCL's own converter, bfcl_eval.model_handler."
    "utils.convert_to_tool(functions, GORILLA_TO_OPENAPI, ModelStyle.OPENAI_COMPLETIONS)"
)


class FunctionDefinition(_Wire):
    name: Annotated[str, Field(min_length=1, max_length=256)]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


def tool_parameters_problem(value: dict[str, Any] | None) -> str | None:
    """What is wrong with a tool's parameters, which must be a JSON Schema for an object.

    BFCL/Gorilla docs say "dict" (and float, tuple, any below it): not rewritten here, since the
    engine gets the client's bytes (module docstring) and "dict" is no JSON Schema type for
    whatever validates or constrains with it downstream, vLLM included, which would take it
    silently; the 400 says how to convert.
    """
    if value is None:
        return None
    if value.get("type") == "dict":
        return _GORILLA_TYPES
    if value.get("type", "object") != "object":
        return "tool parameters must be a JSON Schema with type 'object'"
    if not isinstance(value.get("properties", {}), dict):
        return "tool parameters 'properties' must be an object"
    return None


def tool_schema_problem(tools: list[Any] | None) -> tuple[str, str] | None:
    """(param, message) for the first function tool whose parameters are no object schema.

    One loop per request, run after the models have checked the tools' shape, rather than a
    pydantic field validator per tool, which cost several times more
    (docs/decisions/0003-request-head-validation.md).
    """
    for index, tool in enumerate(tools or ()):
        function = tool.get("function") if isinstance(tool, dict) else None
        parameters = function.get("parameters") if isinstance(function, dict) else None
        problem = tool_parameters_problem(parameters) if isinstance(parameters, dict) else None
        if problem is not None:
            return f"tools[{index}].function.parameters", f"Value error, {problem}"
    return None


class Tool(_Wire):
    type: Literal["function"]
    function: FunctionDefinition


class ToolCallFunction(_Wire):
    name: str
    arguments: str


class ToolCall(_Wire):
    id: str
    type: Literal["function"] = "function"
    function: ToolCallFunction


Content = str | list[dict[str, Any]]


class SystemMessage(_Wire):
    role: Literal["system"]
    content: Content
    name: str | None = None


class DeveloperMessage(_Wire):
    role: Literal["developer"]
    content: Content
    name: str | None = None


class UserMessage(_Wire):
    role: Literal["user"]
    content: Content
    name: str | None = None


class AssistantMessage(_Wire):
    role: Literal["assistant"]
    content: Content | None = None
    refusal: str | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    # vLLM's thinking field, under its current and its older name.
    reasoning: str | None = None
    reasoning_content: str | None = None


class ToolMessage(_Wire):
    role: Literal["tool"]
    content: Content
    tool_call_id: str


Message = Annotated[
    SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage,
    Field(discriminator="role"),
]


class NamedToolChoiceFunction(_Wire):
    name: str


class NamedToolChoice(_Wire):
    type: Literal["function"]
    function: NamedToolChoiceFunction


class StreamOptions(_Wire):
    include_usage: bool | None = None
    continuous_usage_stats: bool | None = None  # vLLM


# The head's nested parts are TypedDicts, not models: validated the same way (strict, extras
# kept), but pydantic builds plain dicts rather than model instances and their extras' dicts,
# which takes about half the time (docs/decisions/0003-request-head-validation.md).


class _HeadPart(TypedDict):
    __pydantic_config__ = _OPEN  # type: ignore[misc]


class SystemHead(_HeadPart):
    role: Literal["system"]
    content: Content
    name: NotRequired[str | None]


class DeveloperHead(_HeadPart):
    role: Literal["developer"]
    content: Content
    name: NotRequired[str | None]


class UserHead(_HeadPart):
    role: Literal["user"]
    content: Content
    name: NotRequired[str | None]


class AssistantHead(_HeadPart):
    """What a pass-through reads of an assistant message: its calls stay the engine's to check."""

    role: Literal["assistant"]
    content: NotRequired[Content | None]
    tool_calls: NotRequired[list[dict[str, Any]] | None]


class ToolResultHead(_HeadPart):
    role: Literal["tool"]
    content: Content
    tool_call_id: str


MessageHead = Annotated[
    SystemHead | DeveloperHead | UserHead | AssistantHead | ToolResultHead,
    Field(discriminator="role"),
]


class ParametersHead(_HeadPart):
    """A function tool's parameters as the head checks them: a JSON Schema for an object.

    The rule of ``tool_parameters_problem``, checked in pydantic's core rather than by a Python
    loop over the tools; when it fails, the 400 still carries ``tool_parameters_problem``'s
    message (``server/chat/service.py`` ``validate_request``).
    """

    type: NotRequired[Literal["object"]]
    properties: NotRequired[dict[str, Any]]


class FunctionHead(_HeadPart):
    parameters: NotRequired[ParametersHead | None]


class ToolHead(_HeadPart):
    """What a pass-through checks of a tool: a function tool whose parameters are a schema."""

    type: Literal["function"]
    function: FunctionHead


class ChatRequestHead(_Wire):
    """``POST /v1/chat/completions`` as a pass-through checks it, before relaying its bytes.

    Every top-level field is checked as in ``ChatCompletionRequest`` (they are cheap, and the
    gateway reads several); of the nested lists, only what the gateway acts on: each message's
    fields (role, content, a tool message's ``tool_call_id``, which feedback reads), each tool's
    type and its parameters' schema (``ParametersHead``; for the whole request,
    ``tool_schema_problem`` runs after the model). An assistant's ``tool_calls`` and a tool's
    name and description are the engine's to check: it answers a 400 of its own, relayed in the
    same envelope. Checking the head only costs a fraction of validating the whole request
    (docs/decisions/0003-request-head-validation.md). ``ChatCompletionRequest`` below checks
    everything, for the calls the gateway rehearses (it composes engine requests of its own
    from their fields).
    """

    messages: Annotated[list[MessageHead], Field(min_length=1)]
    model: str | None = None  # vLLM serves the default model when omitted
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    metadata: dict[str, str] | None = None
    n: Annotated[int, Field(ge=1, le=128)] | None = None
    parallel_tool_calls: bool | None = None
    presence_penalty: float | None = None
    reasoning_effort: str | None = None
    response_format: dict[str, Any] | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    tools: list[ToolHead] | None = None
    top_p: float | None = None
    user: str | None = None

    # ---- vLLM extras (typed so a wrong type is our 400; any other extra passes through too)
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    structured_outputs: dict[str, Any] | None = None


class ChatCompletionRequest(ChatRequestHead):
    """``POST /v1/chat/completions`` body, every part of it checked (fields keep their order)."""

    messages: Annotated[list[Message], Field(min_length=1)]  # type: ignore[assignment]
    tools: list[Tool] | None = None  # type: ignore[assignment]


# --------------------------------------------------------------------------- response


class PromptTokensDetails(_Wire):
    cached_tokens: int | None = None


class Usage(_Wire):
    prompt_tokens: int
    completion_tokens: int = 0
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None


class ResponseMessage(_Wire):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[ToolCall] | None = None
    reasoning: str | None = None
    reasoning_content: str | None = None


class Choice(_Wire):
    index: int
    message: ResponseMessage
    logprobs: dict[str, Any] | None = None
    finish_reason: str | None = None


class ChatCompletion(_Wire):
    """A non-streamed answer."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage | None = None
    system_fingerprint: str | None = None


class DeltaFunction(_Wire):
    name: str | None = None
    arguments: str | None = None


class DeltaToolCall(_Wire):
    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: DeltaFunction | None = None


class Delta(_Wire):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[DeltaToolCall] | None = None
    reasoning: str | None = None
    reasoning_content: str | None = None


class ChunkChoice(_Wire):
    index: int
    delta: Delta
    logprobs: dict[str, Any] | None = None
    finish_reason: str | None = None


class ChatCompletionChunk(_Wire):
    """One ``data:`` event of a streamed answer."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None


# --------------------------------------------------------------------------- models, errors


class ModelCard(_Wire):
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "rehearsal-gateway"
    root: str | None = None  # for an alias: the served model it maps to


class ModelList(_Wire):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorBody(_Wire):
    message: str
    type: str
    param: str | None = None
    code: str | int | None = None  # an engine's refusal relayed keeps vLLM's numeric code


class ErrorEnvelope(_Wire):
    error: ErrorBody
