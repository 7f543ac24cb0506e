"""The ``worlds`` suite: the twin's scripted tool worlds (airline, retail, bank) as tasks.

Each task is one instruction; the agent works until it answers in text or ``max_steps`` executed
steps pass; every committed call runs on the world's real Python over the task's own state, and
the world's goal-state check is the verdict. Unlike BFCL's tasks, the twin knows these worlds'
reference plans, so on the twin these are the tasks where rehearsal has something to find.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterator, Sequence
from typing import Any

from rehearsal_gateway.twin.worlds import WORLD_NAMES, Task, World, load_world

from .episode import Call, ScriptedTurns, Trajectory, UserTurn, Verdict


class WorldTask:
    """One world task with its private state."""

    def __init__(self, world: World, task: Task) -> None:
        self.world = world
        self.task = task
        self.id = f"{world.name}/{task.id}"
        self.state = world.new_state(task)

    def turns(self) -> Iterator[UserTurn]:
        yield UserTurn(
            messages=[
                {"role": "system", "content": self.world.system_prompt},
                {"role": "user", "content": self.task.instruction},
            ],
            tools=self.world.tool_schemas(),
        )

    def execute(self, calls: Sequence[Call]) -> list[str]:
        results = []
        for name, arguments in calls:
            try:
                parsed: Any = json.loads(arguments or "{}")
            except ValueError:
                parsed = None
            if name not in self.world.tools:
                result: Any = {"error": f"unknown tool {name!r}"}
            else:
                result = self.world.call(self.state, name, parsed)
            results.append(json.dumps(result))
        return results

    def is_error(self, result: str) -> bool:
        parsed = json.loads(result)
        return isinstance(parsed, dict) and "error" in parsed

    def score(self, trajectory: Trajectory, force_quit: bool = False) -> Verdict:
        if self.world.check(self.task, self.state):
            return Verdict(True)
        return Verdict(False, "world:goal_not_reached", f"{self.id}: the goal state is not reached")

    def release(self) -> None:
        """The state is this object's own: nothing to let go of."""


class WorldsSuite(ScriptedTurns):
    """The twin's worlds, every task of each."""

    name = "worlds"

    def __init__(self, worlds: Sequence[str] = WORLD_NAMES, max_steps: int = 12) -> None:
        self.worlds = {name: load_world(name) for name in worlds}
        self.step_limit = max_steps

    def task_ids(self, patterns: Sequence[str] = ()) -> list[str]:
        ids = [f"{name}/{task.id}" for name, world in self.worlds.items() for task in world.tasks]
        if patterns:
            ids = [i for i in ids if any(fnmatch.fnmatchcase(i, p) for p in patterns)]
        return ids

    def start(self, task_id: str) -> WorldTask:
        world_name, task_name = task_id.split("/", 1)
        world = self.worlds[world_name]
        return WorldTask(world, world.task(task_name))

    def manifest(self) -> dict[str, Any]:
        return {"suite": self.name, "worlds": sorted(self.worlds), "step_limit": self.step_limit}
