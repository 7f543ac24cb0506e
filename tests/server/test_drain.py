"""Graceful drain: SIGTERM lets in-flight requests finish within RGW_SHUTDOWN_GRACE_S, then stops.

The gateway runs as a ``serve`` process (signals are a process's); the engine double answers
after a set delay, so a request is in flight when the signal arrives. ``/ready`` turning 503 is
checked with a real signal in this (main) thread, in front of a handler standing for uvicorn's.
"""

from __future__ import annotations

import signal
import threading
import time
from types import FrameType
from typing import Any

import httpx
import pytest

from rehearsal_gateway.server.telemetry.readiness import Draining, readiness

BODY = {"model": "double-model", "messages": [{"role": "user", "content": "x"}]}


def _post_in_background(url: str, results: list[Any], **body: Any) -> threading.Thread:
    def run() -> None:
        try:
            response = httpx.post(url + "/v1/chat/completions", json={**BODY, **body}, timeout=30)
            results.append(response)
        except httpx.HTTPError as exc:
            results.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _wait_in_flight(url: str) -> None:
    from tests.server.conftest import metric_value

    deadline = time.monotonic() + 5
    while metric_value(url, "rehearsal_gateway_in_flight_requests") < 1:
        assert time.monotonic() < deadline, "the request never reached the gateway"
        time.sleep(0.02)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_sigterm_lets_in_flight_requests_finish(start_double, start_gateway, stream: bool) -> None:
    """A request taking 2 s, SIGTERM after it started: it completes, then the process exits."""
    engine = start_double("delay:2")
    grace = 60  # far above the request's 2 s, so that exiting before it means not waiting it out
    env = {"RGW_SHUTDOWN_GRACE_S": str(grace)}
    gateway = start_gateway(engine.url + "/v1", env=env, process=True)
    results: list[Any] = []
    worker = _post_in_background(gateway.url, results, stream=stream)
    _wait_in_flight(gateway.url)
    signalled = time.monotonic()
    gateway.popen.send_signal(signal.SIGTERM)
    worker.join(grace)
    assert gateway.popen.wait(grace) in (0, -signal.SIGTERM)  # uvicorn re-raises it at the end
    (response,) = results
    assert isinstance(response, httpx.Response)
    assert response.status_code == 200
    if stream:
        assert response.text.rstrip().endswith("data: [DONE]")
        assert '"error"' not in response.text
    else:
        assert response.json()["choices"][0]["message"]["content"] == "late"
    assert time.monotonic() - signalled < grace  # it stopped when the request was done
    with pytest.raises(httpx.ConnectError):  # and accepted nothing after the signal
        httpx.get(gateway.url + "/health", timeout=1)


def test_grace_bounds_the_drain(start_double, start_gateway) -> None:
    """A request outlasting RGW_SHUTDOWN_GRACE_S is cut at the grace, not held or waited for."""
    engine = start_double("delay:20")
    gateway = start_gateway(engine.url + "/v1", env={"RGW_SHUTDOWN_GRACE_S": "1"}, process=True)
    results: list[Any] = []
    worker = _post_in_background(gateway.url, results)
    _wait_in_flight(gateway.url)
    signalled = time.monotonic()
    gateway.popen.send_signal(signal.SIGTERM)
    worker.join(10)
    answered = time.monotonic() - signalled
    assert gateway.popen.wait(10) in (0, -signal.SIGTERM)  # uvicorn re-raises it at the end
    # Cut at the grace (uvicorn cancels the request: its plain 500), 19 s before the engine's
    # answer would have come: the drain never outlasts the setting.
    assert results
    assert answered < 5
    assert not isinstance(results[0], httpx.Response) or results[0].status_code == 500


async def test_ready_turns_503_on_the_signal() -> None:
    """SIGTERM marks the app draining before the server's own handler runs (which it still does)."""
    seen: list[int] = []

    def server_handler(sig: int, frame: FrameType | None) -> None:
        seen.append(sig)

    original = signal.signal(signal.SIGTERM, server_handler)
    try:
        draining = Draining()
        assert (await readiness([draining]))[0] is True
        with draining.on_signals():
            signal.raise_signal(signal.SIGTERM)
            ok, report = await readiness([draining])
        assert seen == [signal.SIGTERM]
        assert not ok
        assert report["checks"]["shutdown"] == {"ok": False, "detail": "draining"}
        assert signal.getsignal(signal.SIGTERM) is server_handler  # restored afterwards
    finally:
        signal.signal(signal.SIGTERM, original)
