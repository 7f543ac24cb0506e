"""`python -m benchmarks.overhead` runs tiny end to end: three fronts, two profiles, ratios.

Structure only: every front of every profile and client count is printed and agrees with
--json, the CPU ratio to vllm-router is the ratio of the two CPU figures, and the agent body is
the large one. No time or CPU value is asserted: those are what the benchmark is for.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.bodies import AGENT_SYSTEM, AGENT_TOOLS, build_bodies
from benchmarks.overhead import failed
from tests.support.procs import ROOT

ROW = re.compile(r"^\| (small|agent) \((\d+) B\) \| (\d+) \| (direct|vllm-router|gateway) \|", re.M)


def test_agent_body_is_a_realistic_agent_turn() -> None:
    """~500-character system prompt, 8–20 described tools, history with tool results."""
    assert 450 <= len(AGENT_SYSTEM) <= 700
    assert 8 <= len(AGENT_TOOLS) <= 20
    assert all(tool["function"]["description"] for tool in AGENT_TOOLS)
    body = json.loads(build_bodies("agent", 1, seed=1)[0])
    roles = [message["role"] for message in body["messages"]]
    assert roles.count("tool") >= 3
    assert roles.count("user") >= 2
    small, agent = build_bodies("small", 8, seed=2), build_bodies("agent", 8, seed=2)
    assert min(map(len, agent)) > 3 * max(map(len, small))
    assert len(set(agent)) == len(agent)  # every body differs


def run_overhead(
    tmp_path: Path, timeout: int, *args: str
) -> tuple[subprocess.CompletedProcess[str], Any]:
    """One round of ``benchmarks.overhead ARGS``: what it printed, and the rows of its JSON."""
    out = tmp_path / "overhead.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.overhead", "--rounds", "1", *args, "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done, json.loads(out.read_text())


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_tiny_run_prints_every_front(tmp_path: Path) -> None:
    """Both profiles × 1 and 2 clients × three fronts; JSON agrees; ratio is gateway/router."""
    done, rows = run_overhead(tmp_path, 170, "--requests", "30", "--clients", "1", "2")
    printed = {(p, int(c), front) for p, _, c, front in ROW.findall(done.stdout)}
    fronts = {"direct", "vllm-router", "gateway"}
    assert printed == {(p, c, f) for p in ("small", "agent") for c in (1, 2) for f in fronts}
    for row in rows:
        assert set(row["fronts"]) == fronts
        assert row["fronts"]["direct"]["cpu_ms"] is None
        gateway, router = row["fronts"]["gateway"], row["fronts"]["vllm-router"]
        assert all(f["requests"] == 30 and f["errors"] == 0 for f in row["fronts"].values())
        if router["cpu_ms"]:
            assert row["cpu_ratio"] == pytest.approx(gateway["cpu_ms"] / router["cpu_ms"])
        excess = gateway["added_p50_ms"] - router["added_p50_ms"]
        assert row["added_p50_excess_ms"] == pytest.approx(excess)
        assert f"| {row['profile']} | {row['clients']} |" in done.stdout
    by_profile = {row["profile"]: row["body_bytes"] for row in rows}
    assert by_profile["agent"] > 3 * by_profile["small"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_python_floors_are_two_more_fronts(tmp_path: Path) -> None:
    """--floor: both bare relays answer every request as the others do and get their ratios."""
    done, rows = run_overhead(
        tmp_path, 110, "--requests", "20", "--clients", "2", "--profiles", "agent", "--floor"
    )
    (row,) = rows
    router = row["fronts"]["vllm-router"]
    for name in ("python floor", "bare floor"):
        floor = row["fronts"][name]
        assert floor["requests"] == 20
        assert floor["errors"] == 0
        assert floor["cpu_ms"] > 0
        ratio = row["floor_cpu_ratios"][name]
        assert ratio == pytest.approx(floor["cpu_ms"] / router["cpu_ms"])
        assert f"| {name} |" in done.stdout
        assert f"{name} CPU / vllm-router CPU |" in done.stdout
    assert "| agent (" in done.stdout


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_against_runs_another_trees_gateway_as_a_front(tmp_path: Path) -> None:
    """--against DIR: that tree's gateway answers as the others do and gets the CPU ratio."""
    done, rows = run_overhead(
        tmp_path, 110, "--requests", "20", "--clients", "1", "--profiles", "small",
        "--against", str(ROOT),
    )  # fmt: skip
    (row,) = rows
    name = f"gateway at {ROOT.resolve().name}"
    other, gateway = row["fronts"][name], row["fronts"]["gateway"]
    assert (other["requests"], other["errors"]) == (20, 0)
    assert row["vs_trees"] == {name: pytest.approx(gateway["cpu_ms"] / other["cpu_ms"])}
    assert f"| {name} |" in done.stdout
    assert f"gateway CPU / {name} CPU |" in done.stdout


def test_a_lost_request_fails_the_run_unless_only_a_floor_lost_it() -> None:
    """The floors are instruments: their errors are shown, and only the fronts under test fail."""

    def rows(**errors: int) -> list[dict[str, Any]]:
        names = ("direct", "vllm-router", "gateway", "python floor", "bare floor", "gateway at x")
        return [{"fronts": {name: {"errors": errors.get(name.split()[0], 0)} for name in names}}]

    assert not failed(rows())
    assert not failed(rows(python=3, bare=1))
    assert failed(rows(gateway=1))
    assert failed(rows(**{"vllm-router": 1}))
    assert failed(rows(direct=2))
