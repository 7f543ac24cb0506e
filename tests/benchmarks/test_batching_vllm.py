"""`python -m benchmarks.batching_vllm` runs tiny against the real vLLM CPU engine.

Its figures agree with --json, and batching does on real vLLM what it is for: a rehearsal of
four distinct forced actions costs vLLM fewer HTTP requests batched than one by one (the act,
one batch of imaginations and the commit, against the act, one call per imagination and the
commit). Times and CPU are printed, not asserted: they are what the benchmark is for.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.procs import ROOT


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_batched_rehearsal_takes_fewer_vllm_requests(tmp_path: Path) -> None:
    out = tmp_path / "batching_vllm.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.batching_vllm", "--rounds", "1", "--engine-rounds", "1",
         "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=590, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(out.read_text())
    batched, single = figures["batched"], figures["one by one"]
    assert batched["imagined"] >= 2  # distinct actions, so a batch had something to join
    assert single["http"] >= 2 + batched["imagined"]  # the act, each imagination, the commit
    assert batched["http"] < single["http"]
    assert set(figures["engine_alone"]) == {"batch", "calls, one seed", "calls, a seed each"}
    for key in ("wall_s", "gateway_ms", "api_server_ms"):
        assert batched[key] > 0
        assert single[key] > 0
    assert f"| HTTP requests vLLM answered | {batched['http']:.3g} | {single['http']:.3g} |" in (
        done.stdout
    )
