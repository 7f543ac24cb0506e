"""`python -m benchmarks.decisions --quick` runs end to end, so the benchmark cannot rot.

Structure only: every cell of the tiny grid is printed and agrees with --json, the paired counts
fit their pairs, and the figures today's gateway can give are there (never n/a). No figure's
value and no time is asserted: those are what the benchmark is for.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.decision_grid import grid_of, parser
from tests.support.procs import ROOT

RUNS = {"off", "parallel select", "parallel reflect", "sequential select", "sequential reflect"}
ROW = re.compile(r"^\| (\d\.\d) \| (\d\.\d) \| ([a-z -]+) \| ([\d.]+)/(\d+) \| ([\d.]+) \|", re.M)
TASKS = 3 + 2  # three retail tasks and its two where a destructive call is tempting


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_quick_grid_runs_end_to_end(tmp_path: Path) -> None:
    """Two twins × every run: rows printed, JSON agrees, pairs add up, trust section present."""
    out = tmp_path / "decisions.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.decisions", "--quick", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=230, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    document = json.loads(out.read_text())
    policies, classes = document["grid"]["policies"], document["grid"]["classes"]
    assert classes == ["unknown", "no-reads"]
    runs = {"off"} | {f"{m} {p}" for m in ("parallel", "sequential") for p in policies}
    assert runs >= RUNS
    runs |= {f"{run} no-reads" for run in runs - {"off"}}
    printed = {(float(f), float(s), run): (float(ok), int(n), float(err))
               for f, s, run, ok, n, err in ROW.findall(done.stdout)}  # fmt: skip
    assert set(printed) == {(f, 0.5, run) for f in (1.0, 0.0) for run in runs}
    for cell in document["cells"]:
        key = (cell["fidelity"], cell["skill"], cell["run"])
        assert printed[key] == (round(cell["success"], 1), cell["tasks"], cell["tool_errors"])
        assert cell["tasks"] == TASKS
        for count in ("writes_failed", "wrong_destructive", "repeats"):
            assert 0 <= cell[count] <= cell["real_calls"]
        assert 0 <= cell["success"] <= cell["tasks"]
        assert cell["failed_requests"] == 0
        if cell["run"] == "off":
            assert cell["worse"] is None
            continue
        assert cell["worse"] + cell["better"] <= cell["pairs"] == TASKS
        assert cell["repaired"] >= 0
        # Today's gateway returns traces, so these are always counted, never n/a.
        assert cell["never_rehearsed"] is not None
        assert cell["schema_invalid_with_valid_rehearsed"] is not None
        assert cell["schema_invalid_with_valid_rehearsed"] <= cell["schema_invalid"]
    trust = {row["run"]: row for row in document["trust"]}
    assert set(trust) == runs - {"off"}
    for row in trust.values():
        assert row["engine_calls_before_low_trust"] is not None  # from the stored traces at least
        assert "trust_tables" in document
        assert row["turns"] > 0
    assert "Trust at fidelity 0.0" in done.stdout
    assert len(document["episodes"]) == len(document["cells"]) * TASKS
    assert re.search(r"wall time [\d.]+ s", done.stdout)


@pytest.mark.parametrize(
    ("argv", "seeds"),
    [
        pytest.param(["--seeds", "3"], (0, 1, 2), id="from-zero"),
        pytest.param(["--seeds", "2", "--seed-offset", "3"], (3, 4), id="offset"),
    ],
)
def test_seed_offset_chooses_seeds_not_studied(argv: list[str], seeds: tuple[int, ...]) -> None:
    """--seed-offset N runs seeds N..N+S-1: a change is checked on seeds it was not tuned on."""
    assert grid_of(parser().parse_args(argv)).seeds == seeds
