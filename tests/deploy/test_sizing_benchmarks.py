"""The sizing in docs/deploy.md comes from benchmarks that must keep running, and its table from
``benchmarks.sizing``, which reads their output."""

from __future__ import annotations

import re
import subprocess
import sys

import redis

from benchmarks import sizing
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
    # What benchmarks.sizing --measure reads from it: bytes, turns per session, commands per turn.
    assert "(private server)" in out
    read = sizing.read_redis_memory(out)
    assert abs(read["trace_bytes"] - rows["trace"][1] / rows["trace"][0]) <= 0.5
    assert read["turns_per_session"] == turns / sessions
    assert read["commands_per_turn"] > 0
    # It wrote under a prefix of its own and dropped every key before exiting.
    with redis.Redis() as client:
        assert list(client.scan_iter(match="rgw-size-*")) == []


def test_gateway_cpu_benchmark_reports_both_modes() -> None:
    """Pass-through and rehearsed CPU per request are measured, and rehearsal costs more."""
    out = benchmark("benchmarks.gateway_cpu", "--requests", "50", "--rounds", "1")
    medians = dict(re.findall(r"^  (\S.*?\S)\s+median ([\d.]+) ms", out, re.M))
    assert medians.keys() == {"pass-through", "parallel K=4"}
    assert float(medians["parallel K=4"]) > float(medians["pass-through"])


def test_router_cpu_benchmark_measures_router_and_gateway() -> None:
    """The router's CPU per engine call and the gateway's per request, both modes, read back."""
    out = benchmark("benchmarks.router_cpu", "--requests", "30", "--rounds", "1")
    assert re.search(r"pass-through\s+router median [\d.]+ ms per engine call, 1\.0 engine", out)
    read = sizing.read_router_cpu(out)
    assert read["calls_per_turn"] >= 2  # the n=K acting call and at least a commit or imagining
    assert read["router_ms"] > 0
    assert read["gateway_ms"] > 0


def test_deploy_page_table_is_what_sizing_prints() -> None:
    """docs/deploy.md's 10/100/1,000-engine table is what ``python -m benchmarks.sizing`` prints."""
    out = benchmark("benchmarks.sizing")
    printed = [line for line in out.splitlines() if line.startswith("|")]
    assert len(printed) == 5
    page = (ROOT / "docs" / "deploy.md").read_text()
    assert "\n".join(printed) in page


def test_sizing_arithmetic() -> None:
    """Pods follow CPU with a floor of two, primaries follow commands and an hour of traces."""
    measured, assumed = sizing.Measured(), sizing.Assumed()
    rows = [sizing.size(n, measured, assumed) for n in (10, 100, 1000)]
    for row in rows:
        assert row.turns_s == row.engines * assumed.turns_per_engine_s
        assert row.gateways == max(2, -(-row.gateway_cores // assumed.gateway_cores))
        assert row.routers == max(2, -(-row.router_cores // assumed.router_cores))
        assert row.primaries >= row.redis_ops_s / assumed.redis_ops
        assert row.primaries >= row.redis_gib_1h / assumed.redis_gib
        assert row.redis_gib > row.redis_gib_1h
    assert [r.gateways for r in rows] == sorted(r.gateways for r in rows)
    assert rows[2].redis_ops_s == 100 * rows[0].redis_ops_s
