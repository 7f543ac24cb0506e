"""Rehearsal's share of an engine (``RGW_REHEARSAL_ENGINE_SHARE``), over real HTTP on loopback.

One engine double serves both roles (``imagine:SECONDS``: acting calls at once, each imagination
held for SECONDS) behind a gateway that lets two calls onto it. At share 0.5 imagination holds
one of the two slots and a plain request finds the other free at once; at share 1 imagination
holds both and the plain request waits until the rehearsal's deadline cuts them. Either way the
rehearsal's answer comes, degraded by its deadline, while its other imaginations wait for a slot.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.server.conftest import metric_value
from tests.server.test_disconnect import wait_for_running

MODEL = "double-model"
TOOL = {"type": "function", "function": {
    "name": "lookup", "description": "Look a key up.",
    "parameters": {"type": "object", "properties": {"key": {"type": "integer"}},
                   "required": ["key"]},
}}  # fmt: skip
DEADLINE_MS = 2000
REHEARSED = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "Look up the keys."}],
    "tools": [TOOL],
    "rehearsal": {"mode": "parallel", "budget": 4, "commit": "select", "early_exit": False,
                  "deadline_ms": DEADLINE_MS},
}  # fmt: skip
PLAIN = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]}


def _wait_for_imaginations(engine_url: str, count: int) -> None:
    deadline = time.monotonic() + DEADLINE_MS / 1000
    while metric_value(engine_url, "double_rehearsal_running") < count:
        assert time.monotonic() < deadline, f"{count} imaginations never ran at once"
        time.sleep(0.02)


def _plain_beside_a_rehearsal(
    gateway_url: str, engine_url: str, imagining: int
) -> tuple[float, dict[str, Any]]:
    """A plain request sent while ``imagining`` imaginations run: (its seconds, the rehearsal)."""
    with ThreadPoolExecutor(1) as pool, httpx.Client(base_url=gateway_url, timeout=30) as client:
        rehearsal = pool.submit(client.post, "/v1/chat/completions", json=REHEARSED)
        _wait_for_imaginations(engine_url, imagining)
        started = time.monotonic()
        plain = client.post("/v1/chat/completions", json=PLAIN)
        seconds = time.monotonic() - started
        assert plain.status_code == 200, plain.text
        answer = rehearsal.result()
    assert answer.status_code == 200, answer.text
    summary: dict[str, Any] = answer.json()["rehearsal"]
    return seconds, summary


@pytest.mark.parametrize(
    ("share", "held"),
    [pytest.param("0.5", 1, id="half-kept-for-real-work"), pytest.param("1", 2, id="no-share")],
)
def test_plain_request_beside_imaginations_holding_their_share(
    start_double, start_gateway, share: str, held: int
) -> None:
    """Imagination holds at most its share; the rest serves a plain request at once."""
    engine = start_double("imagine:30")
    env = {"RGW_ENGINE_MAX_CONCURRENCY": "2", "RGW_REHEARSAL_ENGINE_SHARE": share}
    gateway = start_gateway(engine.url + "/v1", env=env)
    seconds, summary = _plain_beside_a_rehearsal(gateway.url, engine.url, held)
    assert metric_value(engine.url, "double_rehearsal_peak") == held
    if held == 1:
        assert seconds < 0.5  # no wait: a slot was free for it
    else:
        assert seconds > 0.5  # waited for the deadline to cut the imaginations holding both
    assert summary["degraded"] == "deadline"  # the waiting imaginations were cut, not lost
    wait_for_running(engine.url, 0)  # the cut imaginations left the engine


@pytest.mark.parametrize("yields", [pytest.param(True, id="yield"), pytest.param(False, id="off")])
def test_imaginations_yield_to_a_plain_request_and_start_again(
    start_double, start_gateway, yields: bool
) -> None:
    """``RGW_REHEARSAL_YIELD``: a plain request cancels the imaginations on its engine.

    They leave the engine (vLLM aborts a request whose client left) and start again once the
    plain request is done; the rehearsal's answer still comes. Off, they run on beside it.
    """
    engine = start_double("imagine:30")
    env = {"RGW_ENGINE_MAX_CONCURRENCY": "8", "RGW_REHEARSAL_ENGINE_SHARE": "1",
           "RGW_REHEARSAL_YIELD": "1" if yields else "0"}  # fmt: skip
    gateway = start_gateway(engine.url + "/v1", env=env)
    seconds, summary = _plain_beside_a_rehearsal(gateway.url, engine.url, 4)
    assert seconds < 0.5
    assert summary["degraded"] == "deadline"
    cancelled = metric_value(gateway.url, "rehearsal_gateway_rehearsal_preemptions_total")
    started = metric_value(engine.url, "double_rehearsal_started")
    if yields:
        assert cancelled == 4
        assert started == 8  # each cancelled imagination was sent again, once
    else:
        assert (cancelled, started) == (0, 4)
    wait_for_running(engine.url, 0)
