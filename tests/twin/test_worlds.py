"""The scripted worlds: size, reference plans, planted mistakes."""

from __future__ import annotations

import pytest

from rehearsal_gateway.twin.worlds import WORLD_NAMES, load_world, world_for_tools

CASES = [
    pytest.param(world, task.id, id=task.id)
    for world in WORLD_NAMES
    for task in load_world(world).all_tasks
]


@pytest.mark.parametrize("name", WORLD_NAMES)
def test_world_has_enough_tools_and_tasks(name: str) -> None:
    """Each world offers ≥6 tools (reads and writes) and ≥12 tasks."""
    world = load_world(name)
    assert len(world.tools) >= 6
    assert len(world.tasks) >= 12
    assert any(t.writes for t in world.tools.values())
    assert any(not t.writes for t in world.tools.values())


@pytest.mark.parametrize(("name", "task_id"), CASES)
def test_reference_plan_reaches_goal(name: str, task_id: str) -> None:
    """Running a task's reference plan succeeds at every step and reaches the goal state."""
    world = load_world(name)
    task = world.task(task_id)
    state = world.new_state(task)
    assert not world.check(task, state)
    for call in task.plan:
        result = world.call(state, call.name, call.arguments)
        assert not (isinstance(result, dict) and "error" in result), (call, result)
    assert world.check(task, state)


@pytest.mark.parametrize(("name", "task_id"), CASES)
def test_each_planted_mistake_produces_its_error(name: str, task_id: str) -> None:
    """Every planted mistake, made at its step, earns the world's matching error."""
    world = load_world(name)
    task = world.task(task_id)
    kinds = set()
    for step in range(len(task.plan)):
        for mistake in world.mistakes(task, step):
            state = world.new_state(task)
            for call in task.plan[:step]:
                world.call(state, call.name, call.arguments)
            result = world.call(state, mistake.call.name, mistake.call.arguments)
            assert isinstance(result, dict), result
            kinds.add(mistake.kind)
            if mistake.kind == "tempting_destructive":  # it works, and the task is lost
                assert "error" not in result, (mistake, result)
                assert world.tools[mistake.call.name].risk == "destructive"
                for call in task.plan[step:]:
                    world.call(state, call.name, call.arguments)
                assert not world.check(task, state)
                continue
            assert mistake.error in result.get("error", ""), (mistake, result)
    writes = any(world.tools[call.name].writes for call in task.plan)
    assert (
        {"missing_arg", "write_before_read"} <= kinds if writes else "tempting_destructive" in kinds
    )


def test_worlds_plant_every_mistake_kind() -> None:
    """Across worlds, the five mistake kinds all occur."""
    kinds = {
        m.kind
        for name in WORLD_NAMES
        for task in load_world(name).all_tasks
        for step in range(len(task.plan))
        for m in load_world(name).mistakes(task, step)
    }
    assert kinds == {
        "wrong_id", "missing_arg", "wrong_enum", "write_before_read", "tempting_destructive",
    }  # fmt: skip


def test_states_are_private_copies() -> None:
    """Two states of one world do not share data."""
    world = load_world("bank")
    task = world.tasks[0]
    first, second = world.new_state(task), world.new_state(task)
    for call in task.plan:
        world.call(first, call.name, call.arguments)
    assert world.check(task, first)
    assert not world.check(task, second)


def test_world_for_tools_and_task_lookup() -> None:
    """Tools select their world; the first user message selects the task."""
    worlds = [load_world(n) for n in WORLD_NAMES]
    assert world_for_tools(worlds, ["get_card", "block_card"]).name == "bank"
    assert world_for_tools(worlds, ["get_card", "get_weather"]) is None
    retail = load_world("retail")
    task = retail.tasks[3]
    assert retail.task_for(f"Hello!  {task.instruction}") is task


def test_unknown_world_is_refused() -> None:
    """load_world names the valid worlds when given a wrong one."""
    with pytest.raises(ValueError, match="airline"):
        load_world("casino")


@pytest.mark.parametrize("name", WORLD_NAMES)
def test_every_tool_has_a_risk_class_and_hints_that_say_it(name: str) -> None:
    """Reads are read_only, cancellations and transfers destructive; the MCP hints agree."""
    world = load_world(name)
    classes = world.risk_classes()
    assert set(classes.values()) == {"read_only", "write", "destructive"}
    for entry in world.tool_schemas(annotated=True):
        hints, tool = entry["annotations"], entry["function"]["name"]
        assert hints["readOnlyHint"] == (classes[tool] == "read_only")
        assert hints["destructiveHint"] == (classes[tool] == "destructive")
    assert "annotations" not in world.tool_schemas()[0]
    assert len(world.tempting_tasks) == 2
