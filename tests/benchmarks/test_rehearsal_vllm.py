"""`python -m benchmarks.rehearsal_vllm` runs tiny against the real vLLM CPU engine.

Structure only: both K rows, vLLM's own prefix-cache share (a fraction of the prompt tokens it
counted), and the seven latency phases (alone; under load through fcfs, priority and yielding
gateways, each with every slot open to rehearsal and with rehearsal held to its share) are
printed and agree with --json. No time, ratio or share is asserted: those are what the
benchmark is for.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.rehearsal_vllm import CITIES, FORCED_CALL, rehearsal_body
from tests.support.procs import ROOT


def test_forced_call_lets_the_model_pick_among_distinct_actions() -> None:
    """K candidates can be K distinct actions: the regex leaves the city to the model."""
    assert len(CITIES) >= 16
    assert all(city in FORCED_CALL["regex"] for city in CITIES)
    body = rehearsal_body(4, seed=1)
    assert body["rehearsal"]["budget"] == 4
    assert body["rehearsal"]["early_exit"] is False


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_tiny_run_on_real_vllm(tmp_path: Path) -> None:
    """One round per K, two plain requests per phase: every figure printed and in the JSON."""
    out = tmp_path / "rehearsal_vllm.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.rehearsal_vllm", "--rounds", "1", "--plain", "2",
         "--load", "1", "--priority-rounds", "1", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=590, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(out.read_text())
    lap = figures["overlap"]
    assert lap["ratio"] == pytest.approx(lap["k4_s"] / lap["k1_s"])
    assert lap["vllm_prefix_queries"] > 0
    assert 0 <= lap["vllm_prefix_share"] <= 1
    assert 0 <= lap["rehearse_cached_share"] <= 1
    assert f"{lap['ratio']:.2f} (target ≤ 1.3)" in done.stdout
    assert f"{lap['vllm_prefix_share']:.1%} of" in done.stdout
    assert set(figures["priorities"]) == {
        "alone", "fcfs", "priority", "yield", "fcfs@0.5", "priority@0.5", "yield@0.5"
    }  # fmt: skip
    for name, row in figures["priorities"].items():
        assert row["n"] == 2
        assert row["vllm_preemptions"] >= 0
        if not name.startswith("yield"):  # only a yielding gateway cancels imaginations
            assert row["gateway_preemptions"] == 0
        assert 0 <= row["running_at_send"] <= 8  # --max-num-seqs
        cells = (
            f"| {row['p50_ms']:.0f} | {row['p90_ms']:.0f} | {row['vs_alone']:.2f} | 2 "
            f"| {row['running_at_send']:g} |"
        )
        if name != "alone":  # the load's own rehearsals: each phase ran at least one
            assert 0 <= row["load_degraded"] <= row["load_rehearsals"] >= 1
            cells += (
                f" {row['load_rehearsals']}, {row['load_p50_s']:.1f} s, {row['load_degraded']} |"
            )
        else:
            cells += "  |"  # alone: no load, an empty cell
        cells += f" {row['vllm_preemptions']:.0f} | {row['gateway_preemptions']:.0f} |"
        assert cells in done.stdout
    assert "rehearsal held to 4 of 8 slots, rehearsal at priority 10" in done.stdout
    assert "rehearsal held to 4 of 8 slots, imagination yields to real work" in done.stdout
