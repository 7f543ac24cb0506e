"""Engine pool behaviour seen from outside: affinity, failover, timeouts and relayed failures."""

from __future__ import annotations

import time
from typing import Any

import httpx
import orjson

from tests.server.conftest import TWIN_MODEL, metric_value

CALLS = "rehearsal_gateway_engine_call_seconds_count"


def chat(gateway_url: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(gateway_url + "/v1/chat/completions", json=body, headers=headers, timeout=30)


def turn(i: int, session: str = "") -> dict[str, Any]:
    # Different first messages per turn: only the session header can keep them together.
    return {
        "model": TWIN_MODEL,
        "messages": [{"role": "user", "content": f"turn {i} of {session}"}],
        "max_tokens": 16,
    }


def served_by(gateway_url: str, engine_urls: list[str]) -> list[float]:
    names = [url.removeprefix("http://") for url in engine_urls]
    return [metric_value(gateway_url, CALLS, engine=name) for name in names]


def test_one_session_lands_on_one_engine(start_twin, start_gateway) -> None:
    """Every turn of one ``X-Session-Id`` goes to the same engine; sessions spread over both."""
    twins = [start_twin("--seed", "1"), start_twin("--seed", "1")]
    gateway = start_gateway(*(t.url + "/v1" for t in twins))
    for i in range(6):
        assert chat(gateway.url, turn(i), **{"X-Session-Id": "alpha"}).status_code == 200
    counts = served_by(gateway.url, [t.url for t in twins])
    assert sorted(counts) == [0, 6]
    for s in range(16):
        assert chat(gateway.url, turn(0, f"s{s}"), **{"X-Session-Id": f"s{s}"}).status_code == 200
    assert min(served_by(gateway.url, [t.url for t in twins])) > 0


def test_user_field_and_first_messages_keep_affinity(start_twin, start_gateway) -> None:
    """Without a session header, ``user`` and then the conversation's opening keep one engine."""
    twins = [start_twin("--seed", "1"), start_twin("--seed", "1")]
    gateway = start_gateway(*(t.url + "/v1" for t in twins))
    for i in range(4):
        assert chat(gateway.url, {**turn(i), "user": "u-42"}).status_code == 200
    first = served_by(gateway.url, [t.url for t in twins])
    assert sorted(first) == [0, 4]
    opening = [{"role": "system", "content": "sys"}, {"role": "user", "content": "first"}]
    for i in range(4):
        later = [{"role": "assistant", "content": f"a{j}"} for j in range(i)]
        body = {"model": TWIN_MODEL, "messages": opening + later, "max_tokens": 8}
        assert chat(gateway.url, body).status_code == 200
    second = served_by(gateway.url, [t.url for t in twins])
    assert sorted(b - a for a, b in zip(first, second, strict=True)) == [0, 4]


def test_killing_the_session_engine_moves_it_without_a_failure(start_twin, start_gateway) -> None:
    """When the engine holding a session dies, the next turns succeed on the other engine."""
    twins = [start_twin("--seed", "1"), start_twin("--seed", "1")]
    gateway = start_gateway(*(t.url + "/v1" for t in twins))
    assert chat(gateway.url, turn(0), **{"X-Session-Id": "beta"}).status_code == 200
    counts = served_by(gateway.url, [t.url for t in twins])
    holder = counts.index(1)
    twins[holder].kill()
    for i in range(1, 5):
        assert chat(gateway.url, turn(i), **{"X-Session-Id": "beta"}).status_code == 200
        stream = {**turn(i), "stream": True}
        response = chat(gateway.url, stream, **{"X-Session-Id": "beta"})
        assert response.status_code == 200
        assert response.content.endswith(b"data: [DONE]\n\n")
    after = served_by(gateway.url, [t.url for t in twins])
    assert after[holder] == 1
    assert after[1 - holder] == 8


def test_all_engines_down_is_a_503_envelope(start_twin, start_gateway) -> None:
    """With every engine gone, the answer is 503 ``engine_unavailable`` and ``/ready`` says so."""
    twins = [start_twin("--seed", "1"), start_twin("--seed", "1")]
    gateway = start_gateway(*(t.url + "/v1" for t in twins))
    for twin in twins:
        twin.kill()
    for body in (turn(0), {**turn(0), "stream": True}):
        response = chat(gateway.url, body)
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "engine_unavailable"
    deadline = time.monotonic() + 5
    while httpx.get(gateway.url + "/ready").status_code != 503:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_hung_engine_is_a_504_within_the_timeout(start_double, start_gateway) -> None:
    """An engine that answers its probes but never a call: 504 after the call's bound (a whole
    answer: ``RGW_REQUEST_TIMEOUT``; a stream's first chunk: ``RGW_FIRST_BYTE_TIMEOUT``)."""
    hung = start_double("hang")
    env = {"RGW_REQUEST_TIMEOUT": "0.5", "RGW_FIRST_BYTE_TIMEOUT": "0.5"}
    gateway = start_gateway(hung.url + "/v1", env=env)
    for stream in (False, True):
        started = time.monotonic()
        response = chat(gateway.url, {**turn(0), "model": "double-model", "stream": stream})
        elapsed = time.monotonic() - started
        assert response.status_code == 504
        assert response.json()["error"]["code"] == "engine_timeout"
        assert elapsed >= 0.5  # not before its bound; the 504 says the bound cut it


def test_engine_5xx_is_retried_on_another_engine(start_double, start_twin, start_gateway) -> None:
    """A 500 from one engine moves the call to a healthy one; the client sees a normal 200."""
    broken = start_double("status:500", model=TWIN_MODEL)
    twin = start_twin("--seed", "1")
    gateway = start_gateway(broken.url + "/v1", twin.url + "/v1")
    for i in range(8):
        for stream in (False, True):
            response = chat(gateway.url, {**turn(i, "x"), "stream": stream})
            assert response.status_code == 200
    name = broken.url.removeprefix("http://")
    assert metric_value(gateway.url, "rehearsal_gateway_engine_errors_total", engine=name) > 0


def test_engine_4xx_is_relayed_faithfully(start_double, start_gateway) -> None:
    """An engine's 4xx reaches the client with its status, message, type and param."""
    for code in (400, 422):
        double = start_double(f"status:{code}")
        gateway = start_gateway(double.url + "/v1")
        response = chat(gateway.url, {**turn(0), "model": "double-model"})
        assert response.status_code == code
        assert response.json() == {
            "error": {
                "message": f"double says {code}",
                "type": "BadRequestError",
                "param": "max_tokens",
                "code": code,
            }
        }


def test_stream_cut_after_first_byte_ends_with_an_error_event(start_double, start_gateway) -> None:
    """A stream the engine breaks mid-way ends with one SSE error event and ``[DONE]``."""
    double = start_double("cut")
    gateway = start_gateway(double.url + "/v1")
    response = chat(gateway.url, {**turn(0), "model": "double-model", "stream": True})
    assert response.status_code == 200
    events = [e for e in response.content.split(b"\n\n") if e]
    assert events[0].startswith(b"data: {")
    error = orjson.loads(events[-2].removeprefix(b"data: "))
    assert error["error"]["code"] == "engine_error"
    assert events[-1] == b"data: [DONE]"


def test_unknown_model_is_a_404_envelope(start_twin, start_gateway) -> None:
    """A model that no engine serves and no alias names is 404 ``model_not_found``."""
    gateway = start_gateway(start_twin("--seed", "1").url + "/v1")
    response = chat(gateway.url, {**turn(0), "model": "no-such-model"})
    assert response.status_code == 404
    assert response.json()["error"] == {
        "message": "the model 'no-such-model' does not exist",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }
