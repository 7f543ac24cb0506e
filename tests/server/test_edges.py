"""The client side's edges: uploads cut or stalled, slow headers, idle keep-alive connections.

Raw sockets on loopback, so the test controls every byte: a body shorter than its
``Content-Length``, a client that leaves mid-upload, headers sent one byte at a time. Each
ends in bounded time with a clear answer or a closed connection, and none leaves a traceback.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time

import httpx
import pytest

from rehearsal_gateway.server.http.client_gone import CLIENT_GONE_KEY, ClientGone
from rehearsal_gateway.server.http.head_held import HeadHeld
from rehearsal_gateway.server.http.relay import ClientDisconnected, until_disconnect
from tests.server.conftest import metric_value

BODY = b'{"model": "double-model", "messages": [{"role": "user", "content": "x"}]}'
DISCONNECTS = "rehearsal_gateway_client_disconnects_total"


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.settimeout(10)
    return sock


def _head(length: int) -> bytes:
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
        b"content-length: " + str(length).encode() + b"\r\n\r\n"
    )


def _trickle(sock: socket.socket, data: bytes) -> None:
    """Send ``data`` a byte every 50 ms, until the gateway closes the socket."""
    for byte in data:
        try:
            sock.send(bytes([byte]))
        except OSError:
            return
        time.sleep(0.05)


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _wait_metric(url: str, name: str, value: float, **labels: str) -> None:
    deadline = time.monotonic() + 5
    while metric_value(url, name, **labels) < value:
        assert time.monotonic() < deadline, f"{name}{labels} never reached {value}"
        time.sleep(0.05)


def test_client_gone_mid_upload_is_no_500(start_double, start_gateway,
                                          caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    """Half a body, then the client closes: counted, no 500, no ERROR record, no traceback."""
    engine = start_double("echo")
    gateway = start_gateway(engine.url + "/v1")
    caplog.set_level(logging.DEBUG)
    for _ in range(3):
        with _connect(gateway.port) as sock:
            sock.sendall(_head(len(BODY)) + BODY[:20])
            time.sleep(0.1)
    _wait_metric(gateway.url, DISCONNECTS, 3, stage="upload")
    requests = "rehearsal_gateway_requests_total"
    assert metric_value(gateway.url, requests, outcome="error") == 0
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert any("client left while uploading" in r.getMessage() for r in caplog.records)
    assert '"status": 500' not in gateway.log()


def test_a_body_short_of_its_length_gets_408_and_is_let_go(start_double, start_gateway) -> None:
    """A stalled upload is answered 408 (envelope) at RGW_BODY_TIMEOUT and the socket closed."""
    engine = start_double("echo")
    gateway = start_gateway(engine.url + "/v1", env={"RGW_BODY_TIMEOUT": "0.5"})
    with _connect(gateway.port) as sock:
        started = time.monotonic()
        sock.sendall(_head(len(BODY)) + BODY[:20])
        answer = _read_all(sock)  # returns: the gateway closes the connection
        elapsed = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408")
    assert b'"code":"request_timeout"' in answer
    assert elapsed > 0.4  # not before the body timeout; the 408 says it was the timeout
    assert metric_value(gateway.url, DISCONNECTS, stage="body_timeout") == 1


def test_slow_headers_are_cut_at_the_header_timeout(start_double, start_gateway) -> None:
    """Slowloris: a connection that trickles its headers (or sends none) is closed in time."""
    engine = start_double("echo")
    gateway = start_gateway(engine.url + "/v1", env={"RGW_HEADER_TIMEOUT": "0.5"})
    with _connect(gateway.port) as idle, _connect(gateway.port) as trickle:
        _trickle(trickle, _head(len(BODY))[:30])  # 1.5 s of bytes, cut at the 0.5 s timeout
        assert _read_all(trickle) == b""  # closed without an answer
        assert _read_all(idle) == b""
    # A normal request is unaffected by the short header timeout.
    response = httpx.post(gateway.url + "/v1/chat/completions", content=BODY, timeout=10)
    assert response.status_code == 200


def test_a_later_request_that_trickles_its_headers_is_cut_too(start_double, start_gateway) -> None:
    """On a kept-alive connection, the next request's head is bounded as the first one's was.

    A whole head never arms the timer; one that ends a read unfinished does, so this request
    answered in one piece and then a head sent a byte at a time is the case that arms it.
    """
    engine = start_double("echo")
    gateway = start_gateway(engine.url + "/v1", env={"RGW_HEADER_TIMEOUT": "0.5"})
    with _connect(gateway.port) as sock:
        sock.sendall(_head(len(BODY)) + BODY)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        time.sleep(0.7)  # longer than the header timeout: idle keep-alive is not bounded by it
        started = time.monotonic()
        _trickle(sock, _head(len(BODY))[:30])
        assert _read_all(sock) == b""  # closed without an answer
        assert time.monotonic() - started > 0.4  # not before the header timeout


def test_idle_keep_alive_lasts_rgw_keepalive_s(start_double, start_gateway) -> None:
    """The gateway keeps an idle connection RGW_KEEPALIVE_S, then closes it (the reuse race).

    A request written to a socket the server has just closed never reaches the app: that is
    the keep-alive loss of the soak (httpx's 5 s idle expiry against uvicorn's 5 s default).
    The cure is a client idle expiry below the gateway's keep-alive (75 s by default).
    """
    engine = start_double("echo")
    gateway = start_gateway(engine.url + "/v1", env={"RGW_KEEPALIVE_S": "1"})
    request = b"GET /health HTTP/1.1\r\nhost: gw\r\n\r\n"
    with _connect(gateway.port) as sock:
        sock.sendall(request)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        time.sleep(0.5)  # within the keep-alive: the socket still serves
        sock.sendall(request)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        time.sleep(1.5)  # past it: the gateway closed the socket
        assert sock.recv(65536) == b""
    # A client whose idle expiry is below the gateway's never reuses a closed socket.
    limits = httpx.Limits(keepalive_expiry=0.5)
    with httpx.Client(base_url=gateway.url, limits=limits, timeout=10) as client:
        for pause in (0.0, 0.9, 1.0, 1.1):
            time.sleep(pause)
            assert client.post("/v1/chat/completions", content=BODY).status_code == 200


class Recording:
    """A transport that records what is written to it and whether it was closed."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.peer = ("127.0.0.1", 1)

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> object:
        return self.peer if name == "peername" else None


JSON_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n"


def test_a_content_length_head_leaves_with_its_body_in_one_write() -> None:
    recording = Recording()
    transport = HeadHeld(recording)  # type: ignore[arg-type]
    transport.write(JSON_HEAD)
    assert recording.writes == []
    transport.write(b"{}")
    assert recording.writes == [JSON_HEAD + b"{}"]
    # Not held: 100 Continue, a chunked (streamed) head, and what follows them.
    transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    sse = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    transport.write(sse)
    transport.write(b"5\r\ndata:\r\n")
    assert recording.writes[1:] == [b"HTTP/1.1 100 Continue\r\n\r\n", sse, b"5\r\ndata:\r\n"]
    # Everything else is the transport's own.
    assert transport.get_extra_info("peername") == ("127.0.0.1", 1)


def test_a_held_head_is_released_at_the_answers_end_and_before_close() -> None:
    recording = Recording()
    transport = HeadHeld(recording)  # type: ignore[arg-type]
    transport.write(JSON_HEAD)  # a HEAD answer: no body write follows
    transport.release()
    transport.release()  # nothing held: nothing written
    assert recording.writes == [JSON_HEAD]
    transport.write(JSON_HEAD)
    transport.close()
    assert recording.writes == [JSON_HEAD, JSON_HEAD]
    assert recording.closed


def test_head_and_get_answers_on_one_keep_alive_connection(start_double, start_gateway) -> None:
    """A HEAD answer (its head, never a body) is sent, and the connection serves the next one."""
    engine = start_double("echo")
    gateway = start_gateway(engine.url + "/v1")
    with _connect(gateway.port) as sock:
        sock.sendall(b"HEAD /health HTTP/1.1\r\nhost: gw\r\n\r\n")
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            head += sock.recv(65536)
        assert head.startswith(b"HTTP/1.1 405 ")  # the routes are GET only; no body follows
        assert b"content-length: " in head
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: gw\r\nconnection: close\r\n\r\n")
        answer = _read_all(sock)
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert answer.endswith(b'{"status":"ok"}')


async def test_a_client_gone_before_the_work_starts_never_runs_it() -> None:
    """The connection was lost before the route asked: the work is closed unrun, not awaited."""
    ran: list[str] = []

    async def work() -> str:
        ran.append("work")
        return "answer"

    async def receive() -> dict[str, object]:
        raise AssertionError("the signal answers, not receive")

    gone = ClientGone()
    gone.fire()
    with pytest.raises(ClientDisconnected):
        await until_disconnect({CLIENT_GONE_KEY: gone}, receive, work())
    assert ran == []


async def test_a_cancellation_that_is_not_the_clients_stays_a_cancellation() -> None:
    """Work cancelled from elsewhere (shutdown) while the client is still there is not a
    disconnect; a client gone mid-work is, and each task is only cancelled once."""
    gone = ClientGone()
    started = asyncio.Event()

    async def work() -> str:
        started.set()
        await asyncio.sleep(10)
        return "never"

    async def receive() -> dict[str, object]:
        raise AssertionError("the signal answers, not receive")

    task = asyncio.create_task(until_disconnect({CLIENT_GONE_KEY: gone}, receive, work()))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    gone.fire()  # the finished task left the signal: nothing is cancelled twice

    other = ClientGone()
    started.clear()
    task = asyncio.create_task(until_disconnect({CLIENT_GONE_KEY: other}, receive, work()))
    await started.wait()
    other.fire()
    with pytest.raises(ClientDisconnected):
        await task
