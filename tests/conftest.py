"""Fixtures shared by every suite: real servers on loopback, started and stopped per need."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st

from tests.support.procs import Proc, cli_argv, free_port, start_http_server
from tests.support.vllm import VllmEnvMissing, start_vllm

# Hypothesis's default 200 ms deadline per example measures the machine, not the code: on a
# loaded 2-core machine a pure parser example overran it. Examples stay bounded by count.
settings.register_profile("project", deadline=None)
settings.load_profile("project")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build Hypothesis's Unicode tables before any test runs.

    In a fresh clone the first text strategy builds them (a pass over every code point, cached
    in ``.hypothesis/``): 1.5 s on a quiet machine, past pytest-timeout's 120 s under CPU stress.
    That is the test tool's one-time set-up, so it runs here, outside every test's timeout.
    """
    st.text().validate()


@pytest.fixture
def start_twin(tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    """Factory: ``start_twin("--world", "retail", "--skill", "0.7")`` -> a running engine twin."""
    started: list[Proc] = []

    def _start(*args: str, env: dict[str, str] | None = None) -> Proc:
        port = free_port()
        proc = start_http_server(
            cli_argv("twin", "--host", "127.0.0.1", "--port", str(port), *args),
            port=port,
            log_path=tmp_path / f"twin-{port}.log",
            env=env,
        )
        started.append(proc)
        return proc

    yield _start
    for proc in started:
        proc.stop()


@pytest.fixture(scope="session")
def vllm_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    """A real vLLM CPU server serving the tiny Qwen3 as ``tiny-qwen3``, shared by the session.

    Tests using it carry ``@pytest.mark.vllm`` and a ``timeout`` mark that covers its cold start
    (~30 s). A missing ``.venv-vllm`` fails the test with the fix (`make vllm-env`), never skips.
    """
    try:
        proc = start_vllm(tmp_path_factory.mktemp("vllm") / "vllm-serve.log")
    except VllmEnvMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    yield proc
    proc.stop()
