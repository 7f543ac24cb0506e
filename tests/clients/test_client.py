"""clients/client.py against a live gateway + twin: knobs as extra_body, typed summary, trace
fetch, and every error status mapped to one hierarchy; the sync and async clients alike."""

from __future__ import annotations

from typing import Any

import pytest

from rehearsal_gateway.clients.client import (
    AsyncRehearsalClient,
    AuthenticationFailed,
    GatewayError,
    InvalidRequest,
    NotFound,
    Rehearsal,
    RehearsalClient,
    RehearsalSummary,
    request_kwargs,
    summary,
)
from tests.clients.conftest import API_KEY
from tests.server.conftest import TWIN_MODEL
from tests.server.rehearsal_support import Stack, opening


def _request(stack: Stack, task: int = 6) -> dict[str, Any]:
    world = stack.world
    return {
        "model": TWIN_MODEL,
        "messages": opening(world, world.tasks[task]),
        "tools": world.tool_schemas(),
        "seed": 4,
    }


@pytest.mark.parametrize(
    ("knobs", "kwargs", "expected"),
    [
        pytest.param(None, {"seed": 1}, {"seed": 1}, id="no-knobs-untouched"),
        pytest.param(
            Rehearsal(mode="parallel", budget=4),
            {},
            {"extra_body": {"rehearsal": {"mode": "parallel", "budget": 4}}},
            id="dataclass-drops-unset",
        ),
        pytest.param(
            {"depth": 2},
            {"extra_body": {"top_k": 20, "rehearsal": {"mode": "sequential"}}},
            {"extra_body": {"top_k": 20, "rehearsal": {"mode": "sequential", "depth": 2}}},
            id="mapping-merges-into-extra-body",
        ),
    ],
)
def test_request_kwargs(knobs: Any, kwargs: dict[str, Any], expected: dict[str, Any]) -> None:
    """Knobs land in extra_body["rehearsal"], merged with what the caller already put there."""
    assert request_kwargs(knobs, kwargs) == expected


def test_sync_rehearsal_summary_and_trace(stack: Stack) -> None:
    """A parallel K=4 call returns a typed summary whose id fetches the stored trace."""
    client = RehearsalClient(stack.gateway.url + "/v1", api_key=API_KEY)
    try:
        knobs = Rehearsal(mode="parallel", budget=4, commit="select", trace=True)
        completion = client.create(rehearsal=knobs, **_request(stack))
        rehearsed = summary(completion)
        assert isinstance(rehearsed, RehearsalSummary)
        assert (rehearsed.mode, rehearsed.budget, rehearsed.commit) == ("parallel", 4, "select")
        assert rehearsed.trajectories >= 2
        assert rehearsed.vetoes + rehearsed.checked_vetoes >= 1
        paths = ("selected", "reflected", "reflect_fallback", "least_bad", "repaired")
        assert rehearsed.commit_path in paths
        assert rehearsed.commit_check == "ok"
        assert rehearsed.engine_calls >= 2
        assert rehearsed.trace is not None
        assert len(rehearsed.trace) == rehearsed.trajectories
        assert rehearsed.latency_ms.total > 0
        trace = client.trace(rehearsed.id)
        assert trace["id"] == rehearsed.id
        assert len(trace["candidates"]) == 4
        call = completion.choices[0].message.tool_calls[0]
        assert trace["committed"]["tool_calls"][0]["id"] == call.id
    finally:
        client.close()


def test_off_has_no_summary(stack: Stack) -> None:
    """With mode off the response carries no rehearsal object and summary() is None."""
    client = RehearsalClient(stack.gateway.url + "/v1", api_key=API_KEY)
    try:
        completion = client.create(rehearsal={"mode": "off"}, **_request(stack))
        assert summary(completion) is None
    finally:
        client.close()


@pytest.mark.parametrize(
    ("case", "error", "status", "param"),
    [
        pytest.param("bad-key", AuthenticationFailed, 401, None, id="401"),
        pytest.param("budget-over-cap", InvalidRequest, 400, "rehearsal.budget", id="400"),
        pytest.param("unknown-trace", NotFound, 404, None, id="404-trace"),
        pytest.param("unknown-model", NotFound, 404, None, id="404-model"),
    ],
)
def test_sync_errors_are_typed(
    stack: Stack, case: str, error: type[GatewayError], status: int, param: str | None
) -> None:
    """Each failing status becomes its GatewayError subclass with the status and param."""
    key = "wrong-key" if case == "bad-key" else API_KEY
    client = RehearsalClient(stack.gateway.url + "/v1", api_key=key)
    request = _request(stack)
    try:
        if case == "unknown-trace":
            attempt = lambda: client.trace("rh_000000000000000000000000")  # noqa: E731
        elif case == "unknown-model":
            attempt = lambda: client.create(**{**request, "model": "no-such-model"})  # noqa: E731
        else:
            attempt = lambda: client.create(  # noqa: E731
                rehearsal={"mode": "parallel", "budget": 999}, **request
            )
        with pytest.raises(error) as caught:
            attempt()
    finally:
        client.close()
    assert isinstance(caught.value, GatewayError)
    assert caught.value.status == status
    if param is not None:
        assert caught.value.param is not None
        assert caught.value.param.endswith("budget")


def test_bad_trace_id_is_rejected_locally() -> None:
    """An id that would change the URL path is refused before any request is sent."""
    client = RehearsalClient("http://127.0.0.1:9/v1")
    try:
        with pytest.raises(InvalidRequest):
            client.trace("../models")
    finally:
        client.close()


async def test_async_summary_trace_and_errors(stack: Stack) -> None:
    """The async client rehearses, fetches the trace, and raises the same typed errors."""
    client = AsyncRehearsalClient(stack.gateway.url + "/v1", api_key=API_KEY)
    try:
        completion = await client.create(
            rehearsal=Rehearsal(mode="sequential", budget=3), **_request(stack, task=7)
        )
        rehearsed = summary(completion)
        assert rehearsed is not None
        assert rehearsed.mode == "sequential"
        trace = await client.trace(rehearsed.id)
        assert trace["mode"] == "sequential"
        with pytest.raises(NotFound):
            await client.trace("rh_000000000000000000000000")
        with pytest.raises(InvalidRequest) as caught:
            await client.create(rehearsal={"depth": 0}, **_request(stack))
        assert caught.value.status == 400
    finally:
        await client.close()
    wrong = AsyncRehearsalClient(stack.gateway.url + "/v1", api_key="wrong-key")
    try:
        with pytest.raises(AuthenticationFailed):
            await wrong.create(**_request(stack))
    finally:
        await wrong.close()
