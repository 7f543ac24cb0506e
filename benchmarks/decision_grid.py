"""What the decisions benchmark runs: its grid of twins, worlds, tasks, seeds and rehearsal
shapes, the configurations drawn from it, and the command line that narrows it
(``benchmarks/decisions.py`` runs them).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from typing import Any

from benchmarks.decision_facts import Config, K, Twin
from rehearsal_gateway.twin.worlds import WORLD_NAMES, World

DESCRIPTION = (
    "Does rehearsal make an agent better or worse? The gateway's decisions across fidelity."
)
NEW_POLICY = "anchored"  # used once the gateway accepts it


@dataclass(frozen=True)
class Grid:
    """What to run: twins (fidelity × skill), worlds, tasks per world, seeds, turn limit."""

    fidelities: tuple[float, ...] = (1.0, 0.8, 0.5, 0.3, 0.0)
    skills: tuple[float, ...] = (0.5, 0.8)
    worlds: tuple[str, ...] = WORLD_NAMES
    tasks: int = 12
    seeds: tuple[int, ...] = (0, 1, 2)
    # 1: the twins' fidelity is what the gateway faces, grounding or not (see the docstring).
    grounding_gain: float = 1.0
    max_turns: int = 6  # the demo's: enough for a plan of 2-3 steps, two slips and the answer
    policies: tuple[str, ...] = ("select", "reflect", "anchored")
    # Tool risk classes given to the gateway per configuration (``Config.classes``).
    classes: tuple[str, ...] = ("unknown", "reads", "no-reads", "confirm")
    tempting: bool = True  # also each world's tasks where a destructive call is tempting
    modes: tuple[str, ...] = ("parallel", "sequential")
    # Trajectories per rehearsed turn ("auto": learned per tool) and imagined steps per trajectory.
    budgets: tuple[int | str, ...] = (K,)
    depths: tuple[int, ...] = (1,)

    def tasks_of(self, world: World) -> tuple[Any, ...]:
        return world.tasks[: self.tasks] + (world.tempting_tasks if self.tempting else ())

    @classmethod
    def quick(cls) -> Grid:
        """A tiny grid for the test that keeps the benchmark running."""
        return cls(
            fidelities=(1.0, 0.0), skills=(0.5,), worlds=("retail",), tasks=3, seeds=(0,),
            classes=("unknown", "no-reads"),
        )  # fmt: skip

    @classmethod
    def compounding(cls, seeds: tuple[int, ...]) -> Grid:
        """The bounded grid of the compounding plot: anchored parallel, K = 1, 2, 4, 8 at depth
        1 and 2, and auto, at four fidelities, two skills, four tasks per world (and the tempting
        ones), the world's risk classes given."""
        return cls(
            fidelities=(1.0, 0.8, 0.5, 0.0), skills=(0.5, 0.8), tasks=4, seeds=seeds,
            policies=("anchored",), classes=("reads",), modes=("parallel",),
            budgets=(1, 2, 4, 8, "auto"), depths=(1, 2),
        )  # fmt: skip

    def shapes(self) -> list[tuple[int | str, int]]:
        """(budget, depth) pairs to run: every budget at every depth, ``auto`` at depth 1 only
        (it learns how many trajectories pay, not how deep)."""
        first = min(self.depths)
        return [(b, d) for d in self.depths for b in self.budgets if b != "auto" or d == first]


def configurations(grid: Grid, policies: tuple[str, ...]) -> list[Config]:
    """Per twin: rehearsal off, and every rehearsed shape the grid names (auto: anchored only)."""
    configs: list[Config] = []
    for fidelity in grid.fidelities:
        for skill in grid.skills:
            twin = Twin(fidelity, skill)
            configs.append(Config(twin, "off"))
            configs += [
                Config(twin, m, p, classes, budget, depth)
                for m in grid.modes
                for p in policies
                for classes in grid.classes
                for budget, depth in grid.shapes()
                if budget != "auto" or p == NEW_POLICY  # auto is the anchored rule's
            ]
    return configs


def grid_of(args: argparse.Namespace) -> Grid:
    """The grid the command line asks for: full, ``--quick`` or ``--compounding``, narrowed."""
    seeds = tuple(range(args.seed_offset, args.seed_offset + args.seeds))
    grid = Grid.quick() if args.quick else Grid(seeds=seeds)
    grid = Grid.compounding(seeds) if args.compounding else grid
    changes: dict[str, Any] = {}
    for name in ("fidelities", "skills"):
        if getattr(args, name):
            changes[name] = tuple(float(v) for v in getattr(args, name).split(","))
    if args.worlds:
        changes["worlds"] = tuple(w.strip() for w in args.worlds.split(","))
    if args.tasks:
        changes["tasks"] = args.tasks
    if args.max_turns:
        changes["max_turns"] = args.max_turns
    if args.grounding_gain is not None:
        changes["grounding_gain"] = args.grounding_gain
    for name in ("policies", "classes", "modes"):
        if getattr(args, name):
            changes[name] = tuple(v.strip() for v in getattr(args, name).split(","))
    if args.budgets:
        changes["budgets"] = tuple(
            v.strip() if v.strip() == "auto" else int(v) for v in args.budgets.split(",")
        )
    if args.depths:
        changes["depths"] = tuple(int(v) for v in args.depths.split(","))
    return replace(grid, **changes)


def parser() -> argparse.ArgumentParser:
    """``python -m benchmarks.decisions``'s flags (its docstring says what they run)."""
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--seeds", type=int, default=3, help="seeds per task (paired across runs)")
    parser.add_argument(
        "--seed-offset", type=int, default=0,
        help="first seed (seeds OFFSET..OFFSET+SEEDS-1): check a change on seeds not studied",
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="a tiny grid (the test uses it)")
    parser.add_argument("--json", metavar="PATH", help="also write every figure as JSON")
    parser.add_argument("--fidelities", help="comma-separated, instead of the full sweep")
    parser.add_argument("--skills", help="comma-separated, instead of 0.5,0.8")
    parser.add_argument("--worlds", help="comma-separated, instead of all three")
    parser.add_argument("--tasks", type=int, help="tasks per world, instead of all 12")
    parser.add_argument("--max-turns", type=int, help="the agent's turn limit, instead of 6")
    parser.add_argument(
        "--grounding-gain", type=float, help="the twins' --grounding-gain, instead of 1"
    )
    parser.add_argument("--policies", help="commit policies, instead of select,reflect,anchored")
    parser.add_argument(
        "--classes",
        help="risk classes given to the gateway: unknown,reads,no-reads,confirm (default all)",
    )
    parser.add_argument("--modes", help="rehearsal modes, instead of parallel,sequential")
    parser.add_argument("--budgets", help="comma-separated K (integers or auto), instead of 4")
    parser.add_argument("--depths", help="comma-separated depths, instead of 1")
    parser.add_argument(
        "--compounding", action="store_true",
        help="the compounding grid (Grid.compounding); the other flags narrow it",
    )  # fmt: skip
    return parser
