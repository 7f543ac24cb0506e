"""The fault matrix: each engine fault, driven by a chaos proxy between the gateway and the twin.

Every test sends a bounded batch (half streamed, half whole, concurrently, each with its own
session so they spread over engines) and sorts every request into exactly one bucket:

- **answered**: a 200 with a completion, or a stream of well-formed events ending ``[DONE]``;
- **error**: an OpenAI error envelope with a 4xx/5xx, or a stream whose last event before
  ``[DONE]`` is an error event — every SSE line well formed, the error on a line of its own;
- **hung**: the client's own timeout (longer than every gateway bound) expired first;
- **lost**: anything else: a dropped connection, a body that is no envelope, a broken stream.

Each test asserts 0 hung and 0 lost, and what the fault should give: with a healthy second
engine the calls move and are answered; alone, each is a clear error. The tallies are printed
(``pytest -s``) for the report in docs/benchmarks.md.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest

from tests.server.conftest import TWIN_MODEL
from tests.support.chaos import ChaosProxy

CLIENT_TIMEOUT_S = 20.0  # above every bound the gateway is given below: a hit means "hung"
BOUNDS = {
    "RGW_FIRST_BYTE_TIMEOUT": "3",
    "RGW_CHUNK_TIMEOUT": "1",
    "RGW_REQUEST_TIMEOUT": "6",
    "RGW_HEALTH_INTERVAL": "0.2",
    "RGW_HEALTH_TIMEOUT": "0.5",
}
SENT = 8


@dataclass
class Tally:
    """Where each request of a batch ended up."""

    sent: int = 0
    answered: int = 0
    error: int = 0
    hung: int = 0
    lost: int = 0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def line(self, name: str) -> str:
        return (
            f"{name}: sent={self.sent} answered={self.answered} error={self.error} "
            f"hung={self.hung} lost={self.lost} ({self.seconds:.1f}s)"
        )


def _envelope(body: bytes) -> str | None:
    """The error code of an OpenAI error envelope, or None when ``body`` is not one."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        return None
    if not isinstance(error.get("type"), str):
        return None
    return str(error.get("code"))


def classify_stream(text: bytes) -> tuple[str, str]:
    """("answered" | "error" | "lost", why) for a 200 SSE body."""
    if not text.endswith(b"\n\n"):
        return "lost", "the stream does not end on an event"
    last: Any = None
    done = False
    for event in text[:-2].split(b"\n\n"):
        for line in event.split(b"\n"):
            if line.startswith(b":"):
                continue  # a comment (keep-alive, progress)
            if not line.startswith(b"data: "):
                return "lost", f"not an SSE line: {line[:80]!r}"
            data = line[6:]
            if data == b"[DONE]":
                done = True
                continue
            if done:
                return "lost", "an event after [DONE]"
            try:
                last = orjson.loads(data)
            except orjson.JSONDecodeError:
                return "lost", f"an event that is not JSON: {data[:80]!r}"
    if not done:
        return "lost", "no [DONE]"
    if isinstance(last, dict) and "error" in last:
        code = _envelope(orjson.dumps(last))
        return ("error", f"sse:{code}") if code else ("lost", "an error event with no envelope")
    return "answered", "ok"


def _one(client: httpx.Client, i: int) -> tuple[str, str]:
    stream = i % 2 == 1
    body = {
        "model": TWIN_MODEL,
        "messages": [{"role": "user", "content": f"fault probe {i}"}],
        "max_tokens": 24,
        "stream": stream,
    }
    headers = {"x-session-id": f"s{i}"}
    try:
        response = client.post("/v1/chat/completions", json=body, headers=headers)
    except httpx.TimeoutException:
        return "hung", "client timeout"
    except httpx.HTTPError as exc:
        return "lost", type(exc).__name__
    if response.status_code >= 400:
        code = _envelope(response.content)
        return ("error", f"{response.status_code}:{code}") if code else ("lost", "no envelope")
    if response.status_code != 200:
        return "lost", f"status {response.status_code}"
    if stream:
        return classify_stream(response.content)
    data = orjson.loads(response.content)
    return ("answered", "ok") if data.get("choices") else ("lost", "no choices")


def drive(gateway_url: str, sent: int = SENT, clients: int | None = None) -> Tally:
    """Send ``sent`` requests from ``clients`` at once (one each by default); sort each."""
    tally = Tally(sent=sent)
    started = time.monotonic()
    limits = httpx.Limits(max_connections=clients or sent)
    with (
        httpx.Client(base_url=gateway_url, timeout=CLIENT_TIMEOUT_S, limits=limits) as client,
        ThreadPoolExecutor(clients or sent) as pool,
    ):
        outcomes = list(pool.map(lambda i: _one(client, i), range(sent)))
    tally.seconds = time.monotonic() - started
    for bucket, why in outcomes:
        setattr(tally, bucket, getattr(tally, bucket) + 1)
        (tally.errors if bucket == "error" else tally.notes).append(why)
    return tally


def check(name: str, tally: Tally, *, answered: int | None = None) -> None:
    # The bound in time: no request outlived CLIENT_TIMEOUT_S (``hung``), which is above every
    # bound the gateway is given. Wall time itself is not asserted: a busy host stretches it.
    print(tally.line(name), tally.errors, [n for n in tally.notes if n != "ok"])
    assert tally.hung == 0, tally
    assert tally.lost == 0, tally
    assert tally.answered + tally.error == tally.sent
    if answered is not None:
        assert tally.answered == answered, tally


@pytest.fixture
def chaos(start_twin) -> Iterator[Callable[[], ChaosProxy]]:  # type: ignore[no-untyped-def]
    """Factory: a chaos proxy in front of a fresh twin (``pass`` until told otherwise)."""
    with contextlib.ExitStack() as proxies:  # every proxy stopped, even when one stop() fails

        def _start() -> ChaosProxy:
            twin = start_twin("--seed", "1")
            proxy = ChaosProxy(upstream_port=twin.port).start()
            proxies.callback(proxy.stop)
            return proxy

        yield _start


def _gateway(start_gateway, *urls: str, **env: str):  # type: ignore[no-untyped-def]
    return start_gateway(*(url + "/v1" for url in urls), env={**BOUNDS, **env})


# ---- alone: every request a clear error, none hung, none lost


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        pytest.param("refuse", {"503:engine_unavailable"}, id="killed"),
        pytest.param("hang", {"504:engine_timeout", "503:engine_unavailable"}, id="hung"),
        pytest.param("5xx", {"502:engine_error", "503:engine_unavailable"}, id="5xx"),
        pytest.param("malformed", {"502:engine_error", "503:engine_unavailable"}, id="malformed"),
        pytest.param("reset", {"502:engine_error", "503:engine_unavailable"}, id="reset"),
    ],
)
def test_a_broken_only_engine_gives_clear_errors(chaos, start_gateway, fault: str,
                                                 expected: set[str]) -> None:  # fmt: skip
    """Alone behind a fault, the gateway answers every request with a clear envelope in seconds."""
    proxy = chaos()
    gateway = _gateway(start_gateway, proxy.url)
    proxy.set(fault)
    tally = drive(gateway.url)
    check(f"alone/{fault}", tally, answered=0)
    assert set(tally.errors) <= expected, tally.errors


# ---- beside a healthy engine: every call moves and is answered


@pytest.mark.parametrize("fault", ["refuse", "hang", "5xx", "malformed", "reset"])
def test_a_broken_engine_beside_a_healthy_one_loses_nothing(chaos, start_twin, start_gateway,
                                                            fault: str) -> None:  # fmt: skip
    """Calls on the broken engine move to the healthy one before any byte reached the client."""
    proxy = chaos()
    healthy = start_twin("--seed", "1")
    gateway = _gateway(start_gateway, proxy.url, healthy.url)
    proxy.set(fault)
    tally = drive(gateway.url)
    check(f"beside/{fault}", tally, answered=SENT)


def test_hung_engine_moves_calls_already_waiting_on_it(chaos, start_twin, start_gateway) -> None:
    """Calls in flight when the engine stops answering move once its probes find it hung."""
    proxy = chaos()
    healthy = start_twin("--seed", "1")
    gateway = _gateway(start_gateway, proxy.url, healthy.url)
    with ThreadPoolExecutor(1) as pool:
        proxy.set("hang")  # the probes see it too: ejected within ~2 probe rounds
        future = pool.submit(drive, gateway.url)
        tally = future.result()
    check("beside/hang-in-flight", tally, answered=SENT)


# ---- a reused connection reset before any byte: retried on a fresh one


def test_a_reset_reused_connection_is_retried(chaos, start_gateway) -> None:
    """The next requests are reset as they arrive on pooled sockets: each is retried, answered."""
    proxy = chaos()
    gateway = _gateway(start_gateway, proxy.url)
    check("warm-up", drive(gateway.url), answered=SENT)  # keep-alive sockets now pooled
    proxy.reset_requests(3)  # fewer than the client's reset retries: no call can fail
    tally = drive(gateway.url)
    check("reset/once", tally, answered=SENT)


# ---- after the first byte: a well-formed SSE error event, on its own line


def test_a_stream_cut_mid_event_ends_with_a_clean_error_event(chaos, start_gateway) -> None:
    """A connection closed mid-event: streams end with an error event, none glued to half a line."""
    proxy = chaos()
    gateway = _gateway(start_gateway, proxy.url)
    proxy.set("truncate", cut_after=900)
    tally = drive(gateway.url)
    check("alone/truncate", tally, answered=0)
    assert any(e.startswith("sse:") for e in tally.errors), tally.errors  # cut after first byte


def test_a_stream_that_stalls_ends_at_the_chunk_timeout(chaos, start_gateway) -> None:
    """An engine that goes silent mid-stream: an error event after RGW_CHUNK_TIMEOUT (1 s)."""
    proxy = chaos()
    gateway = _gateway(start_gateway, proxy.url)
    proxy.set("stall", cut_after=900)
    tally = drive(gateway.url)
    check("alone/stall", tally, answered=0)


def test_slow_bytes_are_answered_or_bounded(chaos, start_gateway) -> None:
    """An engine that drips its answers: each within the request bound, or a clear 504."""
    proxy = chaos()
    gateway = _gateway(start_gateway, proxy.url, RGW_REQUEST_TIMEOUT="2")
    proxy.set("slow", drip_bytes=32, drip_s=0.15)
    tally = drive(gateway.url)
    check("alone/slow", tally)
    assert tally.error > 0  # the drip outlasts the 2 s bound
    assert all(e in ("504:engine_timeout", "sse:engine_timeout") for e in tally.errors)


def test_a_stream_past_the_overall_bound_ends_with_an_error_event(chaos, start_gateway) -> None:
    """A dripping stream that started in time but outlasts RGW_REQUEST_TIMEOUT: error event."""
    proxy = chaos()
    gateway = _gateway(start_gateway, proxy.url, RGW_REQUEST_TIMEOUT="2")
    proxy.set("slow", drip_bytes=24, drip_s=0.05)
    tally = drive(gateway.url)
    check("alone/slow-stream", tally)
    assert "sse:engine_timeout" in tally.errors, tally.errors  # cut after its first byte


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_rehearsal_on_a_hung_engine_ends_by_its_deadline_plus_one_commit(
    start_double, start_gateway, stream: bool
) -> None:
    """An engine that passes its probes but never answers a call: the rehearsal's calls are cut
    at ``deadline_ms`` + ``RGW_COMMIT_TIMEOUT`` (0.5 s + 1 s here), with a 504 or an SSE error."""
    from rehearsal_gateway.twin.worlds import load_world
    from tests.server.rehearsal_support import opening

    world = load_world("retail")
    hung = start_double("hang", model=TWIN_MODEL)
    gateway = start_gateway(hung.url + "/v1", env={"RGW_COMMIT_TIMEOUT": "1"})
    body = {
        "model": TWIN_MODEL, "messages": opening(world, world.tasks[0]),
        "tools": world.tool_schemas(), "stream": stream,
        "rehearsal": {"mode": "parallel", "budget": 2, "deadline_ms": 500},
    }  # fmt: skip
    started = time.monotonic()
    response = httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=CLIENT_TIMEOUT_S)
    elapsed = time.monotonic() - started
    if stream:
        assert response.status_code == 200
        assert classify_stream(response.content) == ("error", "sse:engine_timeout")
    else:
        assert response.status_code == 504
        assert _envelope(response.content) == "engine_timeout"
    assert elapsed > 1.4  # not cut before its deadline and commit bound; the 504 says it was cut
