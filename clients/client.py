"""A thin Python client for the gateway, on top of the official ``openai`` SDK.

Agent code keeps using ``chat.completions.create`` exactly as with OpenAI or vLLM; this layer only
adds what the SDK cannot know about:

- ``rehearsal=`` knobs (a ``Rehearsal`` or a plain mapping), sent as ``extra_body["rehearsal"]``;
- ``summary(completion)``: the response's ``rehearsal`` object as a typed ``RehearsalSummary``;
- ``trace(id)``: the stored trace of one rehearsal (``GET /v1/rehearsals/{id}``);
- errors mapped to one small hierarchy under ``GatewayError``:

      GatewayError
      ├── AuthenticationFailed     401
      ├── InvalidRequest           400, 413, 422 (``param`` names the offending field)
      ├── NotFound                 404 (unknown model, unknown or expired rehearsal id)
      ├── EngineUnavailable        502, 503, connection refused
      └── GatewayTimeout           504, client-side timeout

``RehearsalClient`` wraps ``openai.OpenAI`` and ``AsyncRehearsalClient`` wraps
``openai.AsyncOpenAI``; both share the pure functions below, so they cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Literal

import httpx
import openai
from openai.types.chat import ChatCompletion
from pydantic import BaseModel, ConfigDict, Field

Mode = Literal["off", "parallel", "sequential"]
CommitRule = Literal["anchored", "reflect", "select"]


@dataclass(frozen=True, slots=True)
class Rehearsal:
    """Per-request rehearsal knobs; ``None`` leaves a knob to the gateway's default."""

    mode: Mode | None = None
    budget: int | Literal["auto"] | None = None  # "auto": learned per tool
    depth: int | None = None
    commit: CommitRule | None = None
    deadline_ms: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    early_exit: bool | None = None
    trace: bool | None = None
    repair: bool | None = None
    # Tool name -> risk class (read_only | write | destructive | unknown), over every other source.
    risk: dict[str, str] | None = None
    confirm: bool | None = None  # ask the user before a destructive call rehearsal doubts

    def to_body(self) -> dict[str, Any]:
        return {name: value for name, value in asdict(self).items() if value is not None}


class LatencySplit(BaseModel):
    """Where a rehearsed request spent its time, in milliseconds."""

    model_config = ConfigDict(extra="allow")
    act: float = 0.0
    rehearse: float = 0.0
    commit: float = 0.0
    total: float = 0.0


class RehearsalSummary(BaseModel):
    """The ``rehearsal`` object of a gateway response."""

    model_config = ConfigDict(extra="allow")
    id: str
    mode: str
    budget: int = 0
    depth: int = 0
    commit: str | None = None
    trajectories: int = 0
    distinct_actions: int = 0
    vetoes: int = 0  # imagined by the simulator
    checked_vetoes: int = 0  # decided by the gateway's deterministic checks, no imagination spent
    # checked_vetoes by code: SCHEMA_INVALID, REAL_FAILURE_REPEATED (a repeat of a real failure)
    checked_veto_codes: dict[str, int] = Field(default_factory=dict)
    early_exit: bool = False
    chosen_index: int | None = None
    commit_path: str | None = None  # which decision path committed the turn
    commit_check: str | None = None  # ok | schema_invalid | unchecked
    committed_rehearsed: bool | None = None
    committed_risk: list[str] = Field(default_factory=list)  # each committed call's risk class
    # Under ``confirm``: the calls held back while the answer asks the user (else None).
    held_for_confirmation: list[dict[str, Any]] | None = None
    trust: dict[str, str] = Field(default_factory=dict)  # tool -> trust policy
    # Under budget "auto": the K the anchor's tool learned, why, and whether it was a probe.
    auto: dict[str, Any] | None = None
    engine_calls: int = 0
    degraded: str | None = None
    latency_ms: LatencySplit = Field(default_factory=LatencySplit)
    tokens: dict[str, dict[str, int]] = Field(default_factory=dict)
    trace: list[dict[str, Any]] | None = None


class GatewayError(Exception):
    """Base of every error this client raises."""

    def __init__(self, message: str, *, status: int | None = None, param: str | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param


class AuthenticationFailed(GatewayError):
    """The API key is missing or wrong."""


class InvalidRequest(GatewayError):
    """The gateway rejected the request; ``param`` names the offending field when known."""


class NotFound(GatewayError):
    """An unknown model, or a rehearsal id that is unknown or expired."""


class EngineUnavailable(GatewayError):
    """No engine could serve the request."""


class GatewayTimeout(GatewayError):
    """The gateway or its engines took longer than allowed."""


_BY_STATUS: dict[int, type[GatewayError]] = {
    400: InvalidRequest,
    401: AuthenticationFailed,
    403: AuthenticationFailed,
    404: NotFound,
    413: InvalidRequest,
    422: InvalidRequest,
    502: EngineUnavailable,
    503: EngineUnavailable,
    504: GatewayTimeout,
}


def translate(exc: openai.OpenAIError) -> GatewayError:
    """The client's error for an SDK error (the one place the mapping lives)."""
    if isinstance(exc, openai.APITimeoutError):
        return GatewayTimeout(str(exc))
    if isinstance(exc, openai.APIConnectionError):
        return EngineUnavailable(str(exc))
    if isinstance(exc, openai.APIStatusError):
        body = exc.body if isinstance(exc.body, dict) else {}
        error = body.get("error", body) if isinstance(body, dict) else {}
        message = str(error.get("message") or exc.message)
        param = error.get("param")
        cls = _BY_STATUS.get(exc.status_code, GatewayError)
        return cls(message, status=exc.status_code, param=param)
    return GatewayError(str(exc))


MISSING_KEY = (
    "missing API key: the gateway requires one and this client has none "
    "(the CLI takes --api-key or RGW_API_KEY)"
)


@contextmanager
def _translated(key_given: bool = True) -> Iterator[None]:
    try:
        yield
    except openai.OpenAIError as exc:
        error = translate(exc)
        if isinstance(error, AuthenticationFailed) and not key_given:
            # The SDK sends a placeholder key when it has none: the gateway can only say
            # "invalid", but the client knows the key is missing.
            error = AuthenticationFailed(MISSING_KEY, status=error.status)
        raise error from exc


def request_kwargs(
    rehearsal: Rehearsal | Mapping[str, Any] | None, kwargs: dict[str, Any]
) -> dict[str, Any]:
    """``create`` keyword arguments with the rehearsal knobs merged into ``extra_body``."""
    if rehearsal is None:
        return kwargs
    knobs = rehearsal.to_body() if isinstance(rehearsal, Rehearsal) else dict(rehearsal)
    extra_body = dict(kwargs.pop("extra_body", None) or {})
    extra_body["rehearsal"] = {**extra_body.get("rehearsal", {}), **knobs}
    return {**kwargs, "extra_body": extra_body}


def summary(completion: ChatCompletion) -> RehearsalSummary | None:
    """The typed ``rehearsal`` object of a response, or ``None`` when nothing was rehearsed."""
    raw = (completion.model_extra or {}).get("rehearsal")
    return RehearsalSummary.model_validate(raw) if isinstance(raw, dict) else None


def _trace_path(rehearsal_id: str) -> str:
    if not rehearsal_id or "/" in rehearsal_id:
        raise InvalidRequest(f"not a rehearsal id: {rehearsal_id!r}", param="id")
    return f"/rehearsals/{rehearsal_id}"


def _sdk_options(base_url: str, api_key: str | None, timeout: float) -> dict[str, Any]:
    return {
        "base_url": base_url,
        "api_key": api_key or "no-key",
        "timeout": timeout,
        "max_retries": 0,
    }


class RehearsalClient:
    """The synchronous client: ``client.create(model=..., messages=..., rehearsal=...)``."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = 120.0):
        self.openai = openai.OpenAI(**_sdk_options(base_url, api_key, timeout))
        self.key_given = bool(api_key)

    def create(
        self, *, rehearsal: Rehearsal | Mapping[str, Any] | None = None, **kwargs: Any
    ) -> Any:
        """``chat.completions.create`` with rehearsal knobs; streams when ``stream=True``."""
        with _translated(self.key_given):
            return self.openai.chat.completions.create(**request_kwargs(rehearsal, kwargs))

    def trace(self, rehearsal_id: str) -> dict[str, Any]:
        """The stored trace of one rehearsal."""
        with _translated(self.key_given):
            response = self.openai.get(_trace_path(rehearsal_id), cast_to=httpx.Response)
        trace: dict[str, Any] = response.json()
        return trace

    def close(self) -> None:
        self.openai.close()


class AsyncRehearsalClient:
    """The asynchronous client, over ``openai.AsyncOpenAI``."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = 120.0):
        self.openai = openai.AsyncOpenAI(**_sdk_options(base_url, api_key, timeout))
        self.key_given = bool(api_key)

    async def create(
        self, *, rehearsal: Rehearsal | Mapping[str, Any] | None = None, **kwargs: Any
    ) -> Any:
        """``chat.completions.create`` with rehearsal knobs; streams when ``stream=True``."""
        with _translated(self.key_given):
            return await self.openai.chat.completions.create(**request_kwargs(rehearsal, kwargs))

    async def trace(self, rehearsal_id: str) -> dict[str, Any]:
        """The stored trace of one rehearsal."""
        with _translated(self.key_given):
            response = await self.openai.get(_trace_path(rehearsal_id), cast_to=httpx.Response)
        trace: dict[str, Any] = response.json()
        return trace

    async def close(self) -> None:
        await self.openai.close()
