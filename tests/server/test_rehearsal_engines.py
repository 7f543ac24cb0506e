"""A rehearsal set (``--rehearsal-engine``) over real HTTP: where calls go, and its faults.

A twin serves real work; a second twin, behind a chaos proxy (``tests/support/chaos.py``), is the
rehearsal set. Healthy, it takes every imagination and nothing else. Killed, hung, swallowing
calls behind a passing ``/health``, or dripping its answers, it never fails or hangs a request:
imagination falls back to the main engine's share, or the rehearsal degrades by its deadline,
and every rehearsed request is answered.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from rehearsal_gateway.twin.worlds import load_world
from tests.server.conftest import TWIN_MODEL, metric_value
from tests.server.rehearsal_support import opening
from tests.server.test_faults import BOUNDS, CLIENT_TIMEOUT_S, classify_stream
from tests.support.chaos import ChaosProxy

CALLS = "rehearsal_gateway_engine_call_seconds_count"
CANARIES = {"RGW_ENGINE_STALL_AFTER_S": "1", "RGW_ENGINE_CANARY_TIMEOUT_S": "3"}
REHEARSED = 4


def rehearse(gateway_url: str, deadline_ms: int) -> list[tuple[str, str]]:
    """``REHEARSED`` parallel rehearsals at once, half streamed; how each ended."""
    world = load_world("retail")

    def one(i: int) -> tuple[str, str]:
        body: dict[str, Any] = {
            "model": TWIN_MODEL, "messages": opening(world, world.tasks[i]),
            "tools": world.tool_schemas(), "stream": i % 2 == 1,
            "rehearsal": {"mode": "parallel", "budget": 3, "early_exit": False,
                          "deadline_ms": deadline_ms},
        }  # fmt: skip
        url = gateway_url + "/v1/chat/completions"
        try:
            response = httpx.post(
                url, json=body, headers={"x-session-id": f"s{i}"}, timeout=CLIENT_TIMEOUT_S
            )
        except httpx.TimeoutException:
            return "hung", "client timeout"
        if response.status_code != 200:
            return "error", f"{response.status_code} {response.text[:200]}"
        if i % 2 == 1:
            return classify_stream(response.content)
        return ("answered", "ok") if response.json().get("choices") else ("lost", "no choices")

    with ThreadPoolExecutor(REHEARSED) as pool:
        return list(pool.map(one, range(REHEARSED)))


@pytest.fixture
def split(start_twin, start_gateway):  # type: ignore[no-untyped-def]
    """(gateway URL, the rehearsal set's proxy): a main twin, a rehearsal twin behind a proxy."""
    main = start_twin("--seed", "1")
    proxy = ChaosProxy(upstream_port=start_twin("--seed", "1").port).start()
    gateway = start_gateway(
        main.url + "/v1,name=main",
        args=("--rehearsal-engine", f"{proxy.url}/v1,name=imagine"),
        env={**BOUNDS, **CANARIES},
    )
    try:
        yield gateway.url, proxy
    finally:
        proxy.stop()


def test_imagination_goes_to_the_rehearsal_set_and_real_work_stays_on_main(split) -> None:  # type: ignore[no-untyped-def]
    """Healthy: every imagination runs on the rehearsal engine, every acting call on main."""
    gateway_url, _ = split
    assert rehearse(gateway_url, 20_000) == [("answered", "ok")] * REHEARSED
    assert metric_value(gateway_url, CALLS, engine="imagine", role="rehearse") > 0
    assert metric_value(gateway_url, CALLS, engine="main", role="rehearse") == 0
    assert metric_value(gateway_url, CALLS, engine="imagine", role="act") == 0
    assert metric_value(gateway_url, CALLS, engine="main", role="act") > 0


@pytest.mark.parametrize(
    ("fault", "options", "moved"),
    [
        pytest.param("refuse", {}, True, id="killed"),
        pytest.param("hang", {}, True, id="hung"),
        pytest.param("swallow", {}, True, id="hung-behind-health"),
        pytest.param("slow", {"drip_bytes": 16, "drip_s": 0.2}, False, id="slow"),
    ],
)
def test_a_broken_rehearsal_set_never_fails_a_request(
    split,  # type: ignore[no-untyped-def]
    fault: str,
    options: dict[str, float],
    moved: bool,
) -> None:
    """Each fault of the rehearsal engine: every rehearsed request is answered, none hangs; a
    rehearsal engine that is gone or silent leaves imagination to the main engine's share."""
    gateway_url, proxy = split
    proxy.set(fault, **options)
    outcomes = rehearse(gateway_url, 10_000)
    assert outcomes == [("answered", "ok")] * REHEARSED, outcomes
    if moved:
        assert metric_value(gateway_url, CALLS, engine="main", role="rehearse") > 0
