"""Rehearsal-role calls carry vLLM ``priority`` only when the engines schedule by priority."""

from __future__ import annotations

import orjson
import pytest

from rehearsal_gateway.rehearsal.messages import GenerationRequest
from rehearsal_gateway.server.rehearse.defaults import rehearse_priority
from rehearsal_gateway.server.rehearse.engine_port import EngineGenerator
from rehearsal_gateway.server.settings import REHEARSAL_PRIORITY, GatewaySettings


def _payload(priority: int | None, role: str) -> dict[str, object]:
    generator = EngineGenerator(
        None,  # type: ignore[arg-type]  # body() never calls the engines
        model="m", affinity=b"", on_call=lambda role, seconds: None, rehearse_priority=priority,
    )  # fmt: skip
    request = GenerationRequest(role=role, messages=({"role": "user", "content": "hi"},))  # type: ignore[arg-type]
    body: dict[str, object] = orjson.loads(orjson.dumps(generator.body(request)))
    return body


@pytest.mark.parametrize("role", ["act", "rehearse", "commit"])
def test_fcfs_engines_get_no_priority(role: str) -> None:
    """vLLM refuses a priority its engine does not schedule by: none is sent by default."""
    assert rehearse_priority(GatewaySettings()) is None
    assert "priority" not in _payload(None, role)


def test_priority_engines_serve_rehearsal_last() -> None:
    """Under priority scheduling only imagination is deferred; acting and commits keep 0."""
    priority = rehearse_priority(GatewaySettings(engine_scheduling="priority"))
    assert priority == REHEARSAL_PRIORITY > 0  # vLLM: a larger number is served later
    assert _payload(priority, "rehearse")["priority"] == REHEARSAL_PRIORITY
    assert "priority" not in _payload(priority, "act")
    assert "priority" not in _payload(priority, "commit")
