"""Counter and gauge series kept as plain tallies, added to prometheus_client's on read.

``GatewayMetrics`` (``server/telemetry/metrics.py``) hands these out in place of
prometheus_client's labelled children when the gateway runs as one process; with several
workers every update is written through to the shared files instead, so a scrape sees all of
them. A tally spares the request path prometheus_client's lock and argument checks, and its
flush uses the child's public ``inc`` only. Histograms are observed directly: a tally of bucket
counts could only be flushed through the child's private buckets
(docs/decisions/0002-lean-wire-and-tallied-metrics.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class CounterTally:
    """A counter series whose increments wait in a plain number until the registry is read.

    prometheus_client takes a lock and checks its arguments on every ``inc``, several times per
    request. A tally is two opcodes' work per update, and every read of the registry (``/metrics``,
    ``get_sample_value``) flushes first (``FlushTallies``), so no reader sees a stale value.
    """

    __slots__ = ("amount", "child")

    def __init__(self, child: Any) -> None:
        self.child = child
        self.amount: float = 0

    def inc(self, amount: float = 1) -> None:
        self.amount += amount

    def flush(self) -> None:
        amount, self.amount = self.amount, 0
        if amount > 0:  # a counter never goes down; a read must never fail over one that tried
            self.child.inc(amount)


class GaugeTally(CounterTally):
    """A gauge series moved up and down in a plain number, added to the gauge on read.

    The in-flight gauge moves twice per request, and a plain number is a fraction of
    prometheus_client's locked ``inc``/``dec``.
    """

    __slots__ = ()

    def dec(self, amount: float = 1) -> None:
        self.amount -= amount

    def flush(self) -> None:
        amount, self.amount = self.amount, 0
        if amount:  # a gauge goes down as well as up
            self.child.inc(amount)


class FlushTallies:
    """A collector that yields nothing: registered first, it flushes the tallies before the
    registry's own collectors are read."""

    def __init__(self, tallies: list[Tally]) -> None:
        self.tallies = tallies

    def collect(self) -> Iterable[Any]:
        for tally in self.tallies:
            tally.flush()
        return ()


Tally = CounterTally | GaugeTally
