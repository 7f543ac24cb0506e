"""A client that goes away cancels the engine's work (seen in the engine's running gauge).

The gateway's own uvicorn protocol signals a lost connection to the request
(``server/http/client_gone.py`` ``ClientGone``); under uvicorn's stock protocols a watcher task
reads ``receive`` instead. Both are held to the same behaviour here.
"""

from __future__ import annotations

import time

import httpx
import pytest

from tests.server.conftest import FAST_HEALTH, metric_value
from tests.support import inprocess

RUNNING = "vllm:num_requests_running"


def wait_for_running(engine_url: str, expected: float, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while metric_value(engine_url, RUNNING) != expected:
        assert time.monotonic() < deadline, f"engine still runs {metric_value(engine_url, RUNNING)}"
        time.sleep(0.05)


def test_stream_disconnect_cancels_the_engine_request(start_double, start_gateway) -> None:
    """Closing a stream mid-way makes the engine's running-requests gauge drop back to zero."""
    engine = start_double("slow")
    gateway = start_gateway(engine.url + "/v1")
    body = {"model": "double-model", "messages": [{"role": "user", "content": "x"}], "stream": True}
    with httpx.Client(timeout=10) as client:
        with client.stream("POST", gateway.url + "/v1/chat/completions", json=body) as response:
            assert response.status_code == 200
            chunks = response.iter_raw()  # keep a reference: a dropped iterator closes the stream
            assert next(chunks).startswith(b"data: ")
            wait_for_running(engine.url, 1)
        wait_for_running(engine.url, 0)
    assert metric_value(gateway.url, "rehearsal_gateway_in_flight_requests") == 0


def test_non_stream_disconnect_cancels_the_engine_request(start_double, start_gateway) -> None:
    """A client that gives up on a non-streamed call frees the engine too."""
    engine = start_double("hang")
    gateway = start_gateway(engine.url + "/v1")
    body = {"model": "double-model", "messages": [{"role": "user", "content": "x"}]}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=1.0)
    wait_for_running(engine.url, 0)
    assert metric_value(gateway.url, "rehearsal_gateway_in_flight_requests") == 0


@pytest.mark.parametrize("http", ["httptools", "h11"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_stock_uvicorn_protocols_cancel_through_receive(
    start_double, tmp_path, http: str, stream: bool
) -> None:
    """Without the gateway's protocol, ``receive``'s ``http.disconnect`` cancels the work."""
    engine = start_double("hang" if not stream else "slow")
    gateway = inprocess.start_gateway(
        ["--engine", engine.url + "/v1"], log_path=tmp_path / "gateway.log", env=FAST_HEALTH,
        uvicorn_options={"http": http},
    )  # fmt: skip
    try:
        body = {"model": "double-model", "messages": [{"role": "user", "content": "x"}]}
        if stream:
            with httpx.Client(timeout=10) as client:
                url = gateway.url + "/v1/chat/completions"
                with client.stream("POST", url, json={**body, "stream": True}) as response:
                    chunks = response.iter_raw()
                    assert next(chunks).startswith(b"data: ")
                    wait_for_running(engine.url, 1)
        else:
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=1.0)
        wait_for_running(engine.url, 0)
        assert metric_value(gateway.url, "rehearsal_gateway_in_flight_requests") == 0
    finally:
        gateway.stop()
