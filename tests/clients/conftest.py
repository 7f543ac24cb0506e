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
