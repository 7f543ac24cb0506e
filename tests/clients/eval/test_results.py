"""The run directory: a rerun resumes the same experiment and refuses a different one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rehearsal_gateway.clients.eval.episode import Episode
from rehearsal_gateway.clients.eval.results import EPISODES, RunDir, RunMismatch

MANIFEST = {"suite": "worlds", "sampling": {"temperature": 0.6}}


def _episode(task: str) -> Episode:
    return Episode(task=task, cell="off", mode="off", budget=0, seed=0, attempt=task)


def test_episodes_survive_a_reopen(tmp_path: Path) -> None:
    """Appended episodes are read back by key; the manifest is written once."""
    run = RunDir(tmp_path / "run")
    assert run.open(MANIFEST) == {}
    run.append(_episode("t1"))
    run.append(_episode("t2"))
    done = RunDir(tmp_path / "run").open(MANIFEST)
    assert sorted(done) == [("off", 0, "t1"), ("off", 0, "t2")]
    assert json.loads((tmp_path / "run" / "run.json").read_text()) == MANIFEST


def test_a_line_cut_by_a_kill_is_dropped(tmp_path: Path) -> None:
    """A partial last line (killed mid-write) is cut off, and the next append starts clean."""
    run = RunDir(tmp_path)
    run.open(MANIFEST)
    run.append(_episode("t1"))
    with (tmp_path / EPISODES).open("a") as handle:
        handle.write('{"task": "t2", "cell"')
    assert list(run.open(MANIFEST)) == [("off", 0, "t1")]
    run.append(_episode("t3"))
    assert sorted(RunDir(tmp_path).open(MANIFEST)) == [("off", 0, "t1"), ("off", 0, "t3")]


def test_another_experiment_is_refused(tmp_path: Path) -> None:
    """A manifest that differs is refused, naming the field, and nothing is overwritten."""
    RunDir(tmp_path).open(MANIFEST)
    other = {**MANIFEST, "sampling": {"temperature": 0.0}}
    with pytest.raises(RunMismatch, match=r"sampling: .*0.6.* there, .*0.0.* now"):
        RunDir(tmp_path).open(other)
    assert json.loads((tmp_path / "run.json").read_text()) == MANIFEST
