"""The sizing in docs/deploy.md comes from two benchmarks that must keep running."""

from __future__ import annotations

import re
import subprocess
import sys

import redis

from tests.support.procs import ROOT


def benchmark(*argv: str) -> str:
    """Run ``python -m benchmarks.…`` as `make bench` does; its output, once it exited 0."""
    done = subprocess.run(
        [sys.executable, "-m", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_redis_memory_benchmark_measures_every_session() -> None:
    """One memory key per session, traces per rehearsed turn, and the keys dropped afterwards."""
    out = benchmark("benchmarks.redis_memory", "--max-turns", "2")
    sessions, turns = map(int, re.search(r"(\d+) sessions, (\d+) rehearsed turns", out).groups())
    assert sessions == 36
    assert sessions <= turns <= 2 * sessions
    rows = {m[0]: (int(m[1]), int(m[2])) for m in re.findall(r"^(\S+)\s+(\d+)\s+(\d+)", out, re.M)}
    assert rows["memory"][0] == sessions
    assert rows["trace"][0] == turns
    assert rows["trace"][1] > 0
    assert float(re.search(r"per session: ([\d.]+) KiB", out).group(1)) > 0
    assert "1,000 such sessions" in out
    # It wrote under a prefix of its own and dropped every key before exiting.
    assert list(redis.Redis().scan_iter(match="rgw-size-*")) == []


def test_gateway_cpu_benchmark_reports_both_modes() -> None:
    """Pass-through and rehearsed CPU per request are measured, and rehearsal costs more."""
    out = benchmark("benchmarks.gateway_cpu", "--requests", "50", "--rounds", "1")
    medians = dict(re.findall(r"^  (\S.*?\S)\s+median ([\d.]+) ms", out, re.M))
    assert medians.keys() == {"pass-through", "parallel K=4"}
    assert float(medians["parallel K=4"]) > float(medians["pass-through"])
