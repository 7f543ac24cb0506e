"""The bfcl-multi-turn suite against bfcl-eval itself: its tasks, environments and checker."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import inspect
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from rehearsal_gateway.clients.eval.bfcl import NOT_OFFERED, BfclSuite, BfclTask


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> BfclSuite:
    return BfclSuite(tmp_path_factory.mktemp("bfcl"))


def _bfcl_call(task: BfclTask, text: str) -> tuple[str, str]:
    """A ground-truth call string (``cd(folder='x')``, ``sort('f')``) as a model's tool call."""
    node = ast.parse(text, mode="eval").body
    assert isinstance(node, ast.Call)
    assert isinstance(node.func, ast.Name)
    name = node.func.id
    arguments = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}
    if node.args:  # positional: named by the environment method's own signature
        method = None
        for class_name in task.entry["involved_classes"]:
            module_name = task.bfcl.execution.CLASS_FILE_PATH_MAPPING[class_name]
            method = method or getattr(
                getattr(importlib.import_module(module_name), class_name), name, None
            )
        assert method is not None
        names = [p for p in inspect.signature(method).parameters if p != "self"]
        arguments.update(zip(names, (ast.literal_eval(a) for a in node.args), strict=False))
    return name, json.dumps(arguments)


def _ground_truth_trajectory(task: BfclTask) -> list[list[dict[str, Any]]]:
    """What a perfect model would have committed: each turn's calls in one step, then an answer."""
    trajectory = []
    for turn in task.ground_truth:
        calls = [list(_bfcl_call(task, text)) for text in turn]
        steps = [{"calls": calls}] if calls else []
        trajectory.append([*steps, {"text": "Done."}])
    return trajectory


def _checker_directly(task: BfclTask, decoded: list[list[list[str]]]) -> dict[str, Any]:
    """BFCL's multi_turn_checker called by hand on BFCL call strings (a fresh instance name)."""
    return task.bfcl.checker.multi_turn_checker(  # type: ignore[no-any-return]
        decoded, task.ground_truth, task.entry, task.category, f"direct_{uuid.uuid4().hex[:8]}"
    )


@pytest.mark.parametrize("task_id", ["multi_turn_base_0", "multi_turn_base_1", "multi_turn_base_7"])
def test_known_good_trajectory_passes(suite: BfclSuite, task_id: str) -> None:
    """The ground truth, committed as tool calls, is what BFCL's checker passes, and so do we."""
    task = suite.start(task_id)
    assert _checker_directly(task, [[turn] for turn in task.ground_truth])["valid"]
    verdict = task.score(_ground_truth_trajectory(task))
    assert verdict.valid, verdict


def test_known_bad_trajectory_fails_as_bfcl_says(suite: BfclSuite) -> None:
    """A wrong argument in turn 0 fails with the very error BFCL's checker gives for it."""
    task = suite.start("multi_turn_base_0")
    trajectory = _ground_truth_trajectory(task)
    name, arguments = trajectory[0][0]["calls"][-1]
    wrong = {key: f"{value}-x" for key, value in json.loads(arguments).items()}
    trajectory[0][0]["calls"][-1] = [name, json.dumps(wrong)]
    verdict = task.score(trajectory)
    decoded = [[task.decode([tuple(c) for c in turn[0]["calls"]])] for turn in trajectory]
    direct = _checker_directly(task, decoded)  # type: ignore[arg-type]
    assert not verdict.valid
    assert not direct["valid"]
    assert verdict.error_type == direct["error_type"] == "multi_turn:instance_state_mismatch"


def test_missing_turns_are_force_terminated(suite: BfclSuite) -> None:
    """Fewer answered turns than BFCL's ground truth has is BFCL's force-terminated failure."""
    task = suite.start("multi_turn_base_0")
    verdict = task.score(_ground_truth_trajectory(task)[:-1], force_quit=True)
    assert (verdict.valid, verdict.error_type) == (False, "multi_turn:force_terminated")


def test_text_and_undecodable_steps_are_skipped(suite: BfclSuite) -> None:
    """Chat and calls whose arguments are not JSON do not count, as in BFCL's eval_runner."""
    task = suite.start("multi_turn_base_1")
    trajectory = _ground_truth_trajectory(task)
    trajectory[0].insert(0, {"text": "Let me look."})
    trajectory[0].insert(0, {"calls": [["ls", "{not json"]]})
    assert task.score(trajectory).valid
    assert task.decode([("ls", "{not json")]) is None


def test_execution_is_bfcl_environments(suite: BfclSuite) -> None:
    """Executing the ground truth here gives the results BFCL's own execution gives."""
    task = suite.start("multi_turn_base_0")
    ours = []
    for turn in task.ground_truth:
        ours += task.execute([_bfcl_call(task, text) for text in turn]) or []
    task.release()
    theirs = []
    name = f"direct_{uuid.uuid4().hex[:8]}"
    for turn in task.ground_truth:
        results, _ = task.bfcl.execution.execute_multi_turn_func_call(
            turn, task.entry["initial_config"], task.entry["involved_classes"], name, task.id
        )
        theirs += results
    assert ours == theirs
    assert any(task.is_error(r) for r in task.execute([("cd", '{"folder": "no-such-dir"}')]) or [])
    assert not task.is_error(ours[0])


def test_python_names_are_never_evaluated(suite: BfclSuite, tmp_path: Path) -> None:
    """A "tool" named like a builtin fails as an unknown tool does, and runs nothing."""
    task = suite.start("multi_turn_base_0")
    target = tmp_path / "written-by-open"
    calls = [
        ("open", json.dumps({"file": str(target), "mode": "w"})),
        ("__import__", '{"name": "os"}'),
    ]
    results = task.execute(calls)
    assert results is not None
    assert all(task.is_error(r) for r in results)
    assert all(NOT_OFFERED in r for r in results)
    assert not target.exists()
    unknown = task.execute([("no_such_tool", "{}")])
    assert unknown == ["Error during execution: name 'no_such_tool' is not defined"]


def _types(schema: Any) -> set[str]:
    if isinstance(schema, dict):
        found = {schema["type"]} if isinstance(schema.get("type"), str) else set()
        return found.union(*(_types(v) for v in schema.values()))
    if isinstance(schema, list):
        return set().union(*(_types(v) for v in schema))
    return set()


def test_tools_are_json_schema_as_bfcl_converts_them(suite: BfclSuite) -> None:
    """BFCL's docs say "dict"; the tools sent are BFCL's OpenAI conversion, JSON Schema only."""
    task = suite.start("multi_turn_base_0")
    raw = [f["parameters"] for f in task.entry["function"]]
    assert "dict" in _types(raw)
    tools = next(task.turns()).tools
    assert {t["function"]["name"] for t in tools} == {f["name"] for f in task.entry["function"]}
    parameters = [t["function"]["parameters"] for t in tools]
    assert _types(parameters) <= {"object", "string", "integer", "number", "boolean", "array"}


def test_missed_function_turn_adds_the_held_out_docs(tmp_path: Path) -> None:
    """In miss_func, the held-out turn offers the missing tool with BFCL's own prompt."""
    suite = BfclSuite(tmp_path, "miss_func")
    task = suite.start(suite.task_ids()[0])
    held = {str(k): [f["name"] for f in v] for k, v in task.entry["missed_function"].items()}
    turns = list(task.turns())
    index = int(next(iter(held)))
    before = {t["function"]["name"] for t in turns[index - 1].tools}
    after = {t["function"]["name"] for t in turns[index].tools}
    assert after - before == set(held[str(index)])
    prompt = task.bfcl.prompts.DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC
    assert turns[index].messages == [{"role": "user", "content": prompt}]


def test_task_filter_and_categories(suite: BfclSuite, tmp_path: Path) -> None:
    """Globs pick task ids in BFCL's order; an unknown category is refused by name."""
    assert suite.task_ids(["multi_turn_base_1?"])[:2] == [
        "multi_turn_base_10",
        "multi_turn_base_11",
    ]
    assert len(suite.task_ids()) == 200
    with pytest.raises(ValueError, match="unknown BFCL category 'nope'"):
        BfclSuite(tmp_path, "nope")


def test_makefile_installs_the_release_this_suite_names() -> None:
    """`make install` and the suite's error message name the same bfcl-eval release."""
    from rehearsal_gateway.clients.eval.bfcl import BFCL_EVAL_REQUIREMENT

    makefile = (Path(__file__).resolve().parents[3] / "Makefile").read_text()
    assert f"BFCL_EVAL := {BFCL_EVAL_REQUIREMENT}\n" in makefile
    assert importlib.metadata.version("bfcl-eval") == BFCL_EVAL_REQUIREMENT.split("==")[1]
