"""`rehearsal-gateway doctor`: what it finds on real engines and Redis, and its exit codes."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

from tests.support.procs import ROOT, Proc, cli_argv, free_port

REDIS_URL = "redis://127.0.0.1:6379/0"


def _doctor(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("RGW_")}
    return subprocess.run(cli_argv("doctor", *args), cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=90, check=False)  # fmt: skip


def test_a_sound_set_up_exits_0(start_twin: Callable[..., Proc]) -> None:
    """Twin + Redis: the models with max_model_len, prefix caching, Redis's version and latency."""
    twin = start_twin()
    done = _doctor(
        "--engine", twin.url + "/v1", "--redis", REDIS_URL, "--alias", "envace=EnvACE-Qwen3-8B"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("ok    settings: ")
    assert any("serves EnvACE-Qwen3-8B (max_model_len 40960)" in line for line in lines)
    assert any(line.endswith("prefix caching on") for line in lines)
    redis = next(line for line in lines if line.startswith("ok    Redis redis://127.0.0.1:6379/0"))
    assert ", node, round trip " in redis
    assert lines[-1] == "0 problem(s), 0 warning(s)"


def test_what_is_wrong_is_named_with_its_fix(start_twin: Callable[..., Proc]) -> None:
    """A dead engine, a dead Redis and an alias to nothing fail (exit 1), each with its fix."""
    twin = start_twin()
    dead_engine = f"http://127.0.0.1:{free_port()}/v1"
    dead_redis = f"redis://127.0.0.1:{free_port()}/0"
    done = _doctor("--engine", twin.url + "/v1", "--engine", dead_engine, "--redis", dead_redis,
                   "--alias", "envace=NoSuchModel")  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 3, done.stdout
    assert f"({dead_engine}): unreachable: ConnectError" in failed[0]
    assert "fix: start the engine, or point --engine (RGW_ENGINES) at it" in failed[0]
    assert failed[1].startswith("FAIL  alias envace: points at 'NoSuchModel'")
    assert failed[2].startswith(f"FAIL  Redis {dead_redis}: unreachable: ")
    assert "3 problem(s)" in done.stderr


def test_an_engine_that_does_not_tell_is_a_warning_not_a_failure(
    start_double: Callable[..., Proc],
) -> None:
    """No vllm:cache_config_info: prefix caching is 'unknown', a warning; the exit stays 0."""
    double = start_double("ok")
    done = _doctor("--engine", double.url + "/v1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warn  engine" in done.stdout
    assert "prefix caching unknown" in done.stdout
    assert "0 problem(s), 1 warning(s)" in done.stdout


def test_refused_settings_exit_2() -> None:
    """Settings serve would refuse are reported as doctor's failures, exit 2."""
    done = _doctor("--rehearsal-budget", "50")
    assert done.returncode == 2
    assert done.stdout.startswith("FAIL  settings: --rehearsal-budget=50: the default budget")
