"""`python -m benchmarks.opcodes` runs tiny end to end: counts for the gateway, the floor, a tree.

The counter must count (the gateway runs more Python per request than the bare floor, and the
gateway's own modules show up by area, where the floor has none), and it must be steady: this
same tree counted again as an ``--against`` tree comes out within a few percent of itself, which
is what makes a cut of a few percent visible where CPU time is not.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.support.procs import ROOT

ROW = re.compile(
    r"^\| (gateway|python floor|bare floor|gateway at \S+) \| ([\d,]+) \| ([\d.]+) \|", re.M
)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_tiny_run_counts_every_front() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.opcodes", "--requests", "20", "--against", str(ROOT)],
        cwd=ROOT, capture_output=True, text=True, timeout=230, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    per = {name: float(count.replace(",", "")) for name, count, _ in ROW.findall(done.stdout)}
    assert set(per) == {"gateway", "python floor", "bare floor", f"gateway at {ROOT.name}"}
    assert per["python floor"] > 1000  # aiohttp and uvicorn alone run thousands
    assert 100 < per["bare floor"] < per["python floor"]  # no ASGI server: httptools and aiohttp
    # Its own logic and its ASGI stack run thousands more than the bare floor.
    assert per["gateway"] > 1000
    assert per["bare floor"] < per["gateway"]
    assert 0.9 < per[f"gateway at {ROOT.name}"] / per["gateway"] < 1.1
    # By area, a column per front: the gateway's own modules run, the floor has none of them.
    http = re.search(r"^\| server/http \| ([\d,]+) \| 0 \| 0 \| ([\d,]+) \|$", done.stdout, re.M)
    assert http is not None, done.stdout
    assert int(http.group(1).replace(",", "")) > 100
    assert re.search(r"^\| uvicorn \| [\d,]+ \| [1-9][\d,]* \| 0 \|", done.stdout, re.M)
    # A pass-through takes the one ASGI stack: Starlette's router and request run for it.
    assert re.search(r"^\| starlette \| [1-9]", done.stdout, re.M), done.stdout


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_rehearsal_profile_counts_a_rehearsed_request() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.opcodes", "--profile", "rehearsal", "--requests", "10"],
        cwd=ROOT, capture_output=True, text=True, timeout=230, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("Python opcodes per rehearsed request"), done.stdout
    per = {name: float(count.replace(",", "")) for name, count, _ in ROW.findall(done.stdout)}
    # K=4 imaginations, the checks and the commit: several times a relay's work.
    assert per["gateway"] > 3 * per["python floor"], done.stdout
    core = re.search(r"^\| rehearsal \| ([\d,]+) \| 0 \| 0 \|$", done.stdout, re.M)
    assert core is not None, done.stdout
    assert int(core.group(1).replace(",", "")) > 1000, done.stdout
