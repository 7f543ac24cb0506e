"""A twin + gateway stack shared by the client suites (one per module: starting one costs ~2 s)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.server.rehearsal_support import Stack, running_stack

API_KEY = "client-suite-key"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A retail twin (skill 0.5, fidelity 0.95) behind a gateway that requires ``API_KEY``."""
    with running_stack(
        tmp_path_factory.mktemp("clients"),
        twin_args=("--skill", "0.5", "--fidelity", "0.95"),
        env={"RGW_API_KEYS": API_KEY},
    ) as running:
        yield running


@pytest.fixture(scope="module")
def exact_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A retail twin that plays every task's plan exactly (skill 1, fidelity 1, no latency).

    For the agent frameworks that run a whole task: whatever goes wrong is then the gateway's
    or the framework's, not a planted mistake of the twin's policy.
    """
    with running_stack(
        tmp_path_factory.mktemp("clients-exact"),
        twin_args=("--skill", "1.0", "--fidelity", "1.0", "--latency", "zero"),
        env={"RGW_API_KEYS": API_KEY},
    ) as running:
        yield running
