"""`rehearsal-gateway top`: a live terminal view of a running gateway, read from its /metrics.

``clients/top_frame.py`` turns the metrics into a `TopFrame`; this module draws a frame with rich
and runs the loop that fetches, times and redraws, so the drawing is tested from a fixed frame.
"""

from __future__ import annotations

import argparse
import io
import os
import time
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from . import vetoes
from .top_frame import TOKEN_KINDS, MetricsSnapshot, TopFrame, build_frame, parse_snapshot

DEFAULT_URL = "http://127.0.0.1:8000"  # as the other client commands (clients/trace.py)

if TYPE_CHECKING:
    # httpx is imported where it is used (top_frame does the same with prometheus_client): they
    # are most of the import time, and the CLI imports every subcommand's module for its parser.
    import httpx


class GatewayUnreachable(Exception):
    """The gateway's /metrics could not be read; the message says why in a few words."""


def format_seconds(value: float | None) -> str:
    if value is None:
        return "—"
    if value < 1:
        return f"{value * 1000:.1f} ms"
    if value < 120:
        return f"{value:.2f} s"
    return f"{value / 60:.1f} min"


def format_count(value: float) -> str:
    return f"{value:,.0f}"


def _breakdown(counts: dict[str, float]) -> str:
    shown = [f"{key} {format_count(value)}" for key, value in sorted(counts.items()) if value]
    return ", ".join(shown) if shown else "none"


def render(frame: TopFrame, interval_s: float) -> RenderableType:
    """The whole view for one frame."""
    header = Text.assemble(
        ("rehearsal-gateway top", "bold"),
        f"  {frame.url}  every {interval_s:g}s, quantiles since start",
    )
    rate = "—" if frame.requests_per_s is None else f"{frame.requests_per_s:.1f}"
    traffic = Text(
        f"requests/s {rate}   in flight {format_count(frame.in_flight)}   "
        f"requests {format_count(frame.requests)} ({_breakdown(frame.outcomes)})"
    )
    # Two panes side by side, twice: the whole view fits an 80 x 24 terminal.
    return Group(
        header,
        traffic,
        _side_by_side(_latency_table(frame), _rehearsal_table(frame)),
        _side_by_side(_tokens_table(frame), _engines_table(frame)),
    )


def _side_by_side(left: Table, right: Table) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column()
    grid.add_row(left, right)
    return grid


def _pane(title: str, *, show_header: bool = True, caption: str | None = None) -> Table:
    return Table(
        title=title, caption=caption, box=box.SIMPLE_HEAD, title_justify="left",
        caption_justify="left", show_header=show_header, show_edge=False, pad_edge=False,
    )  # fmt: skip


def _latency_table(frame: TopFrame) -> Table:
    ratio = frame.p95_ratio()
    caption = "rehearsal p95 / real call p95 " + ("—" if ratio is None else f"{ratio:.2f}")
    table = _pane("Latency", caption=caption)
    table.add_column("phase")
    for name in ("p50", "p95", "count"):
        table.add_column(name, justify="right")
    for row in frame.latencies:
        table.add_row(
            row.label, format_seconds(row.p50), format_seconds(row.p95), format_count(row.count)
        )
    return table


def _rehearsal_table(frame: TopFrame) -> Table:
    table = _pane("Rehearsal", show_header=False)
    table.add_column("signal")
    table.add_column("value")
    fidelity = "—" if frame.fidelity_mean is None else f"{frame.fidelity_mean:.2f}"
    table.add_row("fidelity", f"{fidelity} (n {format_count(frame.fidelity_count)})")
    table.add_row("vetoes", vetoes.render(frame.vetoes))
    table.add_row("early exits", format_count(frame.early_exits))
    table.add_row("degraded", _breakdown(frame.degraded))
    table.add_row("store errors", format_count(frame.store_errors))
    return table


def _tokens_table(frame: TopFrame) -> Table:
    table = _pane("Tokens by role")
    table.add_column("role")
    for kind in TOKEN_KINDS:
        table.add_column(kind, justify="right")
    for role in sorted(frame.tokens):
        kinds = frame.tokens[role]
        table.add_row(role, *(format_count(kinds.get(kind, 0.0)) for kind in TOKEN_KINDS))
    return table


def _engines_table(frame: TopFrame) -> Table:
    table = _pane("Engines")
    table.add_column("engine")
    table.add_column("health")
    table.add_column("queue", justify="right")
    for engine in frame.engines:
        health = {True: "up", False: "DOWN", None: "?"}[engine.healthy]
        queue = "—" if engine.queue_depth is None else format_count(engine.queue_depth)
        table.add_row(engine.name, health, queue)
    return table


def render_unreachable(url: str, reason: str, retry_s: float | None) -> RenderableType:
    """The view shown while the gateway cannot be read."""
    message = f"Cannot read {metrics_url(url)}: {reason}."
    if retry_s is not None:
        message += f"\nRetrying every {retry_s:g}s; Ctrl-C to quit."
    return Panel(Text(message), title="gateway unreachable", box=box.ASCII, expand=False)


def render_text(view: RenderableType, width: int = 100) -> str:
    """A view as plain text at a fixed width (no colour): what the snapshot tests compare."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, force_terminal=False)
    console.print(view)
    return "".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines())


def metrics_url(url: str) -> str:
    """``/metrics`` of the gateway at ``url`` (given with or without ``/v1``, as the SDKs take)."""
    return url.rstrip("/").removesuffix("/v1") + "/metrics"


def fetch_metrics(client: httpx.Client, url: str) -> MetricsSnapshot:
    """Read and parse the gateway's /metrics, or raise GatewayUnreachable saying why."""
    import httpx

    try:
        response = client.get(metrics_url(url))
    except httpx.ConnectError as exc:
        raise GatewayUnreachable("connection refused or host unknown") from exc
    except httpx.TimeoutException as exc:
        raise GatewayUnreachable("timed out") from exc
    except httpx.HTTPError as exc:
        raise GatewayUnreachable(type(exc).__name__) from exc
    if response.status_code != 200:
        raise GatewayUnreachable(f"HTTP {response.status_code}")
    try:
        return parse_snapshot(response.text)
    except ValueError as exc:
        raise GatewayUnreachable("the answer is not Prometheus text exposition") from exc


class Poller:
    """Fetches one frame per call, keeping the previous snapshot to turn counters into rates."""

    def __init__(self, client: httpx.Client, url: str, interval_s: float) -> None:
        self._client, self._url, self._interval_s = client, url, interval_s
        self._previous: tuple[MetricsSnapshot, float] | None = None

    def poll(self, retry: bool) -> tuple[RenderableType, bool]:
        """The next view, and whether the gateway answered."""
        try:
            snapshot = fetch_metrics(self._client, self._url)
        except GatewayUnreachable as exc:
            self._previous = None
            return render_unreachable(
                self._url, str(exc), self._interval_s if retry else None
            ), False
        now = time.monotonic()
        if self._previous is None:
            frame = build_frame(self._url, snapshot)
        else:
            previous, then = self._previous
            frame = build_frame(self._url, snapshot, previous, now - then)
        self._previous = (snapshot, now)
        return render(frame, self._interval_s), True


def run(url: str, interval_s: float, once: bool, console: Console | None = None) -> int:
    """The I/O loop: 0 on Ctrl-C (live) or a rendered frame (--once), 1 if unreachable once."""
    import httpx

    console = console or Console()
    try:
        with httpx.Client(timeout=httpx.Timeout(max(interval_s, 1.0))) as client:
            poller = Poller(client, url, interval_s)
            if once:
                view, answered = poller.poll(retry=False)
                console.print(view)
                return 0 if answered else 1
            with Live(console=console, auto_refresh=False) as live:
                while True:
                    view, _ = poller.poll(retry=True)
                    live.update(view, refresh=True)
                    time.sleep(interval_s)
    except KeyboardInterrupt:
        return 0


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be a positive number of seconds")
    return value


def _command(args: argparse.Namespace) -> int:
    return run(args.url, args.interval, args.once)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `top` subcommand."""
    parser = subparsers.add_parser(
        "top",
        help="live terminal view of a running gateway's metrics",
        description="Show a gateway's traffic, rehearsal vs real tool-call latency, fidelity, "
        "tokens and engines, read from its /metrics and refreshed every interval.",
        epilog="examples:\n  rehearsal-gateway top --url http://127.0.0.1:8000\n"
        "  rehearsal-gateway top --once   # one frame, then exit (for scripts)",
    )
    default_url = os.environ.get("RGW_URL", DEFAULT_URL)
    parser.add_argument(
        "--url",
        default=default_url,
        help=f"the gateway's URL, with or without /v1 (env RGW_URL; default {DEFAULT_URL})",
    )
    parser.add_argument(
        "--interval", type=_positive_float, default=1.0, help="seconds between refreshes"
    )
    parser.add_argument(
        "--once",
        action="store_true",
        help="print one frame and exit (non-zero when the gateway cannot be read)",
    )
    parser.set_defaults(func=_command)
