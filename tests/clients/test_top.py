"""`rehearsal-gateway top`: the view computed from a fixed /metrics page, and the I/O loop against
real sockets on loopback (a served snapshot, a closed port, Ctrl-C)."""

from __future__ import annotations

import argparse
import http.server
import io
import math
import os
import pty
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from rich.console import Console

from rehearsal_gateway.clients import top, top_frame
from tests.deploy.promql import exposed_names, spec_names
from tests.support.procs import ROOT, free_port

FIXTURES = Path(__file__).parent / "fixtures"
METRICS_TEXT = (FIXTURES / "metrics.txt").read_text()
URL = "http://127.0.0.1:8000"


def _snapshot(text: str = METRICS_TEXT) -> top_frame.MetricsSnapshot:
    return top_frame.parse_snapshot(text)


def _requests_page(count: float) -> str:
    return (
        "# TYPE rehearsal_gateway_requests_total counter\n"
        f'rehearsal_gateway_requests_total{{mode="off",outcome="ok"}} {count}\n'
    )


def test_fixture_uses_only_contract_names() -> None:
    """The snapshot fixture exposes exactly the gateway families that docs/metrics-spec.md names."""
    names = {name for name in exposed_names(METRICS_TEXT) if not name.endswith("_created")}
    gateway_spec = {name for name in spec_names() if name.startswith(top_frame.PREFIX)}
    assert names == gateway_spec


def test_snapshot_renders_expected_text() -> None:
    """A fixed /metrics page renders to the stored frame at a 100-column terminal."""
    frame = top_frame.build_frame(URL, _snapshot())
    expected = (FIXTURES / "top_frame.txt").read_text()
    assert top.render_text(top.render(frame, 1.0), width=100) == expected


def test_frame_numbers_from_fixture() -> None:
    """The frame's numbers are the fixture's: totals, fidelity mean, ratio, engines."""
    frame = top_frame.build_frame(URL, _snapshot())
    assert frame.requests == 75
    assert frame.in_flight == 3
    assert frame.fidelity_mean == pytest.approx((15 * 0.92 + 3 * 0.98 + 2 * 0.35) / 20)
    assert frame.vetoes == {"imagined": 6, "SCHEMA_INVALID": 2}  # by kind (clients/vetoes.py)
    assert frame.latency("rehearsal").p50 == pytest.approx(0.5 + 0.5 * 17 / 26)
    assert frame.p95_ratio() == pytest.approx(
        frame.latency("rehearsal").p95 / frame.latency("real tool call").p95  # type: ignore[operator]
    )
    assert frame.engines == (
        top_frame.EngineRow("engine-0", True, 2.0),
        top_frame.EngineRow("engine-1", False, 0.0),
    )
    assert frame.requests_per_s is None


def test_requests_per_second_from_counter_deltas() -> None:
    """Requests/s is the counter's increase between two refreshes over the time between them."""
    frame = top_frame.build_frame(
        URL, _snapshot(_requests_page(75)), _snapshot(_requests_page(65)), 2.0
    )
    assert frame.requests_per_s == pytest.approx(5.0)


def test_counter_reset_counts_from_zero() -> None:
    """A counter that went down (gateway restarted) counts its new value, as rate() does."""
    frame = top_frame.build_frame(
        URL, _snapshot(_requests_page(4)), _snapshot(_requests_page(90)), 1.0
    )
    assert frame.requests_per_s == pytest.approx(4.0)


@pytest.mark.parametrize(
    ("q", "buckets", "expected"),
    [
        pytest.param(0.5, [(1.0, 10.0), (2.0, 20.0), (math.inf, 20.0)], 1.0, id="bucket-edge"),
        pytest.param(0.75, [(1.0, 10.0), (2.0, 20.0), (math.inf, 20.0)], 1.5, id="interpolated"),
        pytest.param(0.25, [(1.0, 10.0), (math.inf, 10.0)], 0.25, id="first-bucket-from-zero"),
        pytest.param(0.99, [(1.0, 10.0), (math.inf, 20.0)], 1.0, id="beyond-last-bound"),
        pytest.param(0.5, [(1.0, 0.0), (math.inf, 0.0)], None, id="no-observations"),
        pytest.param(0.5, [], None, id="no-buckets"),
    ],
)
def test_bucket_quantile(
    q: float, buckets: list[tuple[float, float]], expected: float | None
) -> None:
    """Quantiles interpolate in cumulative buckets as Prometheus' histogram_quantile does."""
    assert top_frame.bucket_quantile(q, buckets) == expected


def test_gauges_from_several_workers() -> None:
    """Per-worker engine gauges combine: healthy only if all workers agree, deepest queue wins."""
    text = (
        "# TYPE rehearsal_gateway_engine_healthy gauge\n"
        'rehearsal_gateway_engine_healthy{engine="e0",pid="1"} 1.0\n'
        'rehearsal_gateway_engine_healthy{engine="e0",pid="2"} 0.0\n'
        "# TYPE rehearsal_gateway_engine_queue_depth gauge\n"
        'rehearsal_gateway_engine_queue_depth{engine="e0",pid="1"} 3.0\n'
        'rehearsal_gateway_engine_queue_depth{engine="e0",pid="2"} 7.0\n'
    )
    assert top_frame.build_frame(URL, _snapshot(text)).engines == (
        top_frame.EngineRow("e0", False, 7.0),
    )


def test_empty_page_renders_placeholders() -> None:
    """A gateway that has served nothing yet renders dashes, not errors."""
    text = top.render_text(top.render(top_frame.build_frame(URL, _snapshot("")), 1.0))
    assert "rehearsal p95 / real call p95 —" in text
    assert "fidelity       — (n 0)" in text


@dataclass
class Page:
    """What the loopback server answers to every GET."""

    url: str = ""
    status: int = 200
    body: str = METRICS_TEXT


@pytest.fixture
def page() -> Iterator[Page]:
    """A real HTTP server on loopback answering every GET with the page's status and body."""
    served = Page()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            payload = served.body.encode()
            self.send_response(served.status)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:
            """Keep the test output quiet."""

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    served.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield served
    server.shutdown()
    server.server_close()
    thread.join()


def _run_once(url: str) -> tuple[int, str]:
    buffer = io.StringIO()
    console = Console(file=buffer, width=100, color_system=None, force_terminal=False)
    code = top.run(url, 1.0, once=True, console=console)
    return code, buffer.getvalue()


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
def test_once_renders_a_live_gateway(page: Page, suffix: str) -> None:
    """--once reads a real /metrics over HTTP (URL with or without /v1), prints one frame."""
    code, output = _run_once(page.url + suffix)
    assert code == 0
    assert "real tool call" in output
    assert "engine-1   DOWN" in output


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        pytest.param(404, '{"detail":"Not Found"}', "HTTP 404", id="no-metrics-route"),
        pytest.param(200, "<html>hi</html>", "not Prometheus text exposition", id="not-metrics"),
    ],
)
def test_once_wrong_answer_is_explained(page: Page, status: int, body: str, reason: str) -> None:
    """A server that answers something other than metrics gets a clear message and exit 1."""
    page.status, page.body = status, body
    code, output = _run_once(page.url)
    assert code == 1
    assert reason in output


def test_once_unreachable_gateway_exits_nonzero() -> None:
    """--once against a closed loopback port prints why it cannot read /metrics and exits 1."""
    url = f"http://127.0.0.1:{free_port()}"
    code, output = _run_once(url)
    assert code == 1
    assert "gateway unreachable" in output
    assert f"Cannot read {url}/metrics: connection refused or host unknown." in output
    assert "Retrying" not in output


# A user's shell starts the program with SIGINT at its default; a child inherits an ignored
# SIGINT from its parent (something in a long test session may ignore it), and Python then
# installs no KeyboardInterrupt at all. The script restores Python's own handler first.
_LIVE_SCRIPT = """
import argparse, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from rehearsal_gateway.clients import top
parser = argparse.ArgumentParser()
top.register(parser.add_subparsers())
args = parser.parse_args(sys.argv[1:])
sys.exit(args.func(args))
"""


def test_live_mode_retries_and_exits_cleanly_on_ctrl_c() -> None:
    """Live mode keeps retrying an unreachable gateway, says so, and exits 0 on SIGINT.

    Its output goes to a pseudo-terminal, as in a user's shell: to a pipe, rich's live display
    shows nothing until it stops. SIGINT goes only once the program has said it is retrying: on
    a loaded machine a fixed sleep could land during its imports, which is Python's own
    KeyboardInterrupt, not ours.
    """
    url = f"http://127.0.0.1:{free_port()}"
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-c", _LIVE_SCRIPT, "top", "--url", url, "--interval", "0.1"],
        cwd=ROOT,
        stdout=follower,
        stderr=subprocess.PIPE,
        env={**os.environ, "COLUMNS": "100", "TERM": "xterm", "PYTHONUNBUFFERED": "1"},
    )
    os.close(follower)
    seen = b""
    try:
        deadline = time.monotonic() + 60  # a bound against a program that never says it
        while b"Retrying every 0.1s" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(leader, 4096)
                except OSError:  # the terminal closed: the program ended
                    break
                seen += chunk
        assert b"Retrying every 0.1s" in seen, seen[-500:]
        assert proc.poll() is None  # still running, retrying
        proc.send_signal(signal.SIGINT)
        # Keep reading the terminal, as a user's does: a full pseudo-terminal blocks the
        # program's last redraw, which is a stuck test, not a stuck program. The bound is
        # against a hang, not a speed test.
        deadline = time.monotonic() + 90
        while proc.poll() is None and time.monotonic() < deadline:
            if select.select([leader], [], [], 0.5)[0]:
                try:
                    os.read(leader, 65536)
                except OSError:  # the terminal closed: the program ended
                    break
        _, stderr = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        os.close(leader)
    assert proc.returncode == 0, stderr.decode()
    assert b"Traceback" not in stderr


def test_register_adds_top_subcommand() -> None:
    """`top` parses --url, --interval and --once, and rejects a non-positive interval."""
    parser = argparse.ArgumentParser()
    top.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["top", "--url", "http://gw:9000", "--interval", "2.5", "--once"])
    assert (args.url, args.interval, args.once, args.func) == (
        "http://gw:9000",
        2.5,
        True,
        top._command,
    )
    with pytest.raises(SystemExit):
        parser.parse_args(["top", "--interval", "0"])


def test_frame_fits_an_80_by_24_terminal() -> None:
    """At 80 columns the whole view is at most 24 lines, every pane and engine in it, uncut."""
    frame = top_frame.build_frame(URL, _snapshot())
    text = top.render_text(top.render(frame, 1.0), width=80)
    lines = text.splitlines()
    assert len(lines) <= 24
    assert max(len(line) for line in lines) <= 80
    for shown in (
        "Latency",
        "Rehearsal",
        "Tokens by role",
        "Engines",
        "engine-1   DOWN",
        "rehearse",
    ):
        assert shown in text
    assert "…" not in text


def test_url_defaults_to_rgw_url(monkeypatch: pytest.MonkeyPatch) -> None:
    """`top` reads RGW_URL as `chat` and `trace` do."""
    monkeypatch.setenv("RGW_URL", "http://gw.example:9000")
    parser = argparse.ArgumentParser()
    top.register(parser.add_subparsers(dest="command"))
    assert parser.parse_args(["top"]).url == "http://gw.example:9000"
