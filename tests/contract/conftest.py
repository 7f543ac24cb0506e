"""The engines the contract suite runs against, behind one parametrized ``engine`` fixture.

Every test in this folder takes ``engine`` and so runs twice: against the engine twin (always) and
against a real vLLM CPU server (marked ``vllm``; ``-m "not vllm"`` leaves it out). Both servers
start once per session. When the twin and vLLM disagree, the twin is what must change.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from openai import OpenAI

from tests.support.procs import Proc, cli_argv, free_port, start_http_server

# The vLLM cold start (~30 s, more on a busy machine) is paid inside the first test's budget.
VLLM_TIMEOUT_S = 300


@dataclass(frozen=True)
class Engine:
    """One engine under contract: its kind, where it answers, and the model name it serves."""

    kind: str
    url: str
    model: str

    @property
    def is_vllm(self) -> bool:
        return self.kind == "vllm"


def _engine_for(kind: str, proc: Proc) -> Engine:
    models = httpx.get(proc.url + "/v1/models", timeout=10).json()
    return Engine(kind=kind, url=proc.url, model=models["data"][0]["id"])


@pytest.fixture(scope="session")
def contract_twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    """One engine twin for the whole contract suite: no simulated latency, no planted mistakes."""
    port = free_port()
    log = tmp_path_factory.mktemp("contract-twin") / "twin.log"
    argv = ["--host", "127.0.0.1", "--port", str(port), "--latency", "zero", "--skill", "1.0"]
    proc = start_http_server(cli_argv("twin", *argv, "--seed", "0"), port=port, log_path=log)
    yield proc
    proc.stop()


@pytest.fixture(
    params=[
        pytest.param("twin", id="twin"),
        pytest.param(
            "vllm", id="vllm", marks=[pytest.mark.vllm, pytest.mark.timeout(VLLM_TIMEOUT_S)]
        ),
    ]
)
def engine(request: pytest.FixtureRequest) -> Engine:
    """The engine a contract test runs against: the twin, then the real vLLM."""
    fixture = "contract_twin" if request.param == "twin" else "vllm_engine"
    proc: Proc = request.getfixturevalue(fixture)
    return _engine_for(request.param, proc)


@pytest.fixture
def client(engine: Engine) -> Iterator[OpenAI]:
    """The official OpenAI SDK pointed at ``engine``; no retries, so every failure shows."""
    sdk = OpenAI(base_url=engine.url + "/v1", api_key="contract", max_retries=0, timeout=60)
    yield sdk
    sdk.close()


@pytest.fixture
def http(engine: Engine) -> Iterator[httpx.Client]:
    """A plain HTTP client on ``engine``, for checks on the raw JSON the SDK would hide."""
    with httpx.Client(base_url=engine.url, timeout=60) as raw:
        yield raw
