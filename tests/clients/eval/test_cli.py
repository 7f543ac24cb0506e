"""`rehearsal-gateway eval` as a user runs it: a real gateway + twin on loopback, BFCL for real."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from rehearsal_gateway.clients.eval.bfcl import BFCL_EVAL_REQUIREMENT, BfclSuite
from tests.server.rehearsal_support import Stack, running_stack
from tests.support.procs import ROOT, cli_argv, free_port


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A twin (skill 0.5, fidelity 0.95) behind one gateway, shared by this module."""
    with running_stack(
        tmp_path_factory.mktemp("eval"), twin_args=("--skill", "0.5", "--fidelity", "0.95")
    ) as running:
        yield running


def _eval(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli_argv("eval", *args), cwd=ROOT, capture_output=True, text=True, timeout=timeout,
        check=False,
    )  # fmt: skip


def _episodes(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_bfcl_slice_end_to_end(stack: Stack, tmp_path: Path) -> None:
    """Three BFCL tasks × off/parallel-2: table, JSON, CSV and PNG agree; scores are BFCL's."""
    out = tmp_path / "run"
    done = _eval(
        "--gateway", stack.gateway.url + "/v1", "--suite", "bfcl-multi-turn", "--limit", "3",
        "--modes", "off,parallel", "--budgets", "2", "--concurrency", "2", "--out", str(out),
        "--plot",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Outcomes — bfcl-multi-turn, 3 tasks" in done.stdout
    assert "parallel-2" in done.stdout
    episodes = _episodes(out)
    assert Counter(e["cell"] for e in episodes) == {"off": 3, "parallel-2": 3}
    suite = BfclSuite(tmp_path / "bfcl")
    for episode in episodes:
        assert episode["requests"] > 0
        assert episode["user_turns"] == len(suite.ground_truth[episode["task"]])
        rescored = suite.start(episode["task"]).score(episode["trajectory"])
        assert rescored.valid == episode["success"]
        assert rescored.error_type == episode["verdict"].get("error_type")
        calls = sum(len(s.get("calls", [])) for turn in episode["trajectory"] for s in turn)
        assert calls == episode["calls"]
    rehearsed = [e for e in episodes if e["cell"] == "parallel-2"]
    assert sum(e["engine_calls"] for e in rehearsed) > sum(e["requests"] for e in rehearsed)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["simulation"] is False
    assert summary["complete"] is True
    assert summary["manifest"]["package"] == f"bfcl-eval {BFCL_EVAL_REQUIREMENT.split('==')[1]}"
    cells = {c["cell"]: c for c in summary["cells"]}
    for name, cell in cells.items():
        mine = [e for e in episodes if e["cell"] == name]
        assert cell["successes"] == sum(e["success"] for e in mine)
        assert cell["tool_errors"] == sum(e["tool_errors"] for e in mine)
        assert cell["turns"] == sum(e["requests"] for e in mine)
    assert cells["parallel-2"]["paired"] == 3
    rows = list(csv.DictReader((out / "summary.csv").read_text().splitlines()))
    assert [r["cell"] for r in rows] == ["off", "parallel-2"]
    assert int(rows[1]["tool_errors"]) == cells["parallel-2"]["tool_errors"]
    assert (out / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_killed_run_resumes_without_redoing_a_task(stack: Stack, tmp_path: Path) -> None:
    """SIGKILL mid-run, rerun with the same --out: finished episodes stay, none is run twice."""
    out = tmp_path / "run"
    args = [
        "--gateway", stack.gateway.url, "--suite", "bfcl-multi-turn", "--limit", "6",
        "--modes", "off", "--concurrency", "1", "--out", str(out),
    ]  # fmt: skip
    first = subprocess.Popen(
        cli_argv("eval", *args), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    log = out / "episodes.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and first.poll() is None:
        if log.exists() and len(log.read_bytes().splitlines()) >= 2:
            break
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    before = log.read_text().splitlines(keepends=True)
    kept = [json.loads(line) for line in before if line.endswith("\n")]
    assert 2 <= len(kept) < 6
    done = _eval(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(kept)} of 6 episodes done" in done.stdout
    after = _episodes(out)
    assert sorted(e["task"] for e in after) == sorted({e["task"] for e in after})
    assert len(after) == 6
    assert after[: len(kept)] == kept  # the first run's episodes, untouched and not redone


def test_unreachable_gateway_is_a_clear_error(tmp_path: Path) -> None:
    """Nothing listening: exit 2, one message naming the URL and what to do, no traceback."""
    url = f"http://127.0.0.1:{free_port()}"
    done = _eval("--gateway", url, "--suite", "worlds", "--out", str(tmp_path / "run"), timeout=60)
    assert done.returncode == 2
    assert f"cannot reach the gateway at {url}" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "run" / "episodes.jsonl").exists()


def test_missing_suite_package_is_a_clear_error(tmp_path: Path) -> None:
    """bfcl-eval not importable: exit 2 with the install line, before any gateway is needed."""
    script = (
        "import sys; sys.modules['bfcl_eval'] = None\n"  # what an absent package looks like
        "from clients.cli import main\n"
        f"sys.exit(main(['eval', '--gateway', 'http://127.0.0.1:9', '--out', {str(tmp_path)!r}]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    message = " ".join(done.stderr.split())
    assert "bfcl-eval is not installed" in message
    assert f"pip install --no-deps '{BFCL_EVAL_REQUIREMENT}'" in message
    assert "Traceback" not in done.stderr


def test_another_experiment_in_the_same_dir_is_refused(stack: Stack, tmp_path: Path) -> None:
    """Rerunning into a run directory with other sampling is refused, naming the field."""
    out = tmp_path / "run"
    base = ["--gateway", stack.gateway.url, "--suite", "worlds", "--worlds", "retail",
            "--limit", "1", "--modes", "off", "--out", str(out)]  # fmt: skip
    assert _eval(*base).returncode == 0
    done = _eval(*base, "--temperature", "0.9")
    assert done.returncode == 2
    assert "holds a different run (sampling:" in " ".join(done.stderr.split())


def test_raw_bfcl_docs_get_the_400_that_says_how(stack: Stack, tmp_path: Path) -> None:
    """BFCL's docs as they ship are refused with the fix; BFCL's conversion of them is served."""
    task = BfclSuite(tmp_path).start("multi_turn_base_0")
    messages = task.entry["question"][0]
    raw = [{"type": "function", "function": f} for f in task.entry["function"]]
    tools = next(task.turns()).tools
    with stack.sdk() as client:
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="EnvACE-Qwen3-8B", messages=messages, tools=raw)
        served = client.chat.completions.create(
            model="EnvACE-Qwen3-8B", messages=messages, tools=tools
        )
    assert "not 'dict'" in str(refused.value)
    assert "convert_to_tool" in str(refused.value)
    assert served.choices[0].message.tool_calls


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_worlds_suite_on_a_local_twin_says_it_is_a_simulation(tmp_path: Path) -> None:
    """No --gateway: eval starts its own twin + gateway (on the ports asked for), labels every
    table, and stops them."""
    out = tmp_path / "run"
    port = free_port()
    done = _eval(
        "--suite", "worlds", "--worlds", "retail", "--limit", "3", "--modes", "off,parallel",
        "--budgets", "2", "--out", str(out), "--redis", "none", "--port", str(port),
        "--twin-port", str(free_port()),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"started an engine twin and a gateway at http://127.0.0.1:{port}" in done.stdout
    assert done.stdout.count("SIMULATION") >= 2
    summary = json.loads((out / "summary.json").read_text())
    assert summary["simulation"] is True
    rehearsed = summary["cells"][1]
    assert rehearsed["cell"] == "parallel-2"
    assert rehearsed["engine_calls_per_turn"] > 1
    assert rehearsed["outcome_checked"] > 0  # the feedback loop measured fidelity


def test_refused_cells_make_a_nonzero_exit_with_the_reason(stack: Stack, tmp_path: Path) -> None:
    """A budget over the gateway's cap: each such episode is refused, the reason printed, exit 1."""
    done = _eval(
        "--gateway", stack.gateway.url, "--suite", "worlds", "--worlds", "retail", "--limit", "1",
        "--modes", "off,parallel", "--budgets", "99", "--commit", "anchored",
        "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    message = " ".join(done.stdout.split())
    assert "refused: parallel-99: the gateway refused 1 episode(s): 400 rehearsal.budget:" in (
        message
    )
    assert "must be between 0 and 8" in message


@pytest.mark.parametrize(
    ("args", "says"),
    [
        pytest.param(("--modes", "dance"), "--modes: unknown dance", id="unknown-mode"),
        pytest.param(("--budgets", "x"), "--budgets must be comma-separated ints", id="budgets"),
        pytest.param(("--commit", "best"), "invalid choice: 'best'", id="commit-choice"),
    ],
)
def test_invalid_arguments_exit_2_with_one_line(args: tuple[str, ...], says: str) -> None:
    """A wrong argument exits 2 before anything starts, saying what is wrong."""
    done = _eval("--suite", "worlds", *args, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in done.stderr
    assert "Traceback" not in done.stderr
