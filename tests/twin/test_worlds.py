"""The scripted worlds: size, reference plans, planted mistakes."""

from __future__ import annotations

import pytest

from rehearsal_gateway.twin.worlds import WORLD_NAMES, load_world, world_for_tools

CASES = [
    pytest.param(world, task.id, id=task.id)
    for world in WORLD_NAMES
    for task in load_world(world).tasks
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
            assert mistake.error in result.get("error", ""), (mistake, result)
            kinds.add(mistake.kind)
    assert {"missing_arg", "write_before_read"} <= kinds


def test_worlds_plant_every_mistake_kind() -> None:
    """Across worlds, the four mistake kinds all occur."""
    kinds = {
        m.kind
        for name in WORLD_NAMES
        for task in load_world(name).tasks
        for step in range(len(task.plan))
        for m in load_world(name).mistakes(task, step)
    }
    assert kinds == {"wrong_id", "missing_arg", "wrong_enum", "write_before_read"}


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
