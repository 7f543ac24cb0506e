"""``rehearsal-gateway up``: engines started, waited for, fronted by the gateway, and stopped.

The fast tests put ``tests/support/fake_vllm.py`` where ``vllm`` would be: it records what it
was given and becomes an engine twin, so the gateway really proxies to it. The last test runs the
real thing: the vLLM CPU build serving the tiny Qwen3, end to end through the ``openai`` SDK.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from rehearsal_gateway.server.launcher.up import ENVACE_FLAGS, UsageError, batch_slots
from tests.contract.wire import USER_ASKS, WEATHER_TOOL, forced_tool_call_extra
from tests.server.conftest import FAST_HEALTH, TWIN_MODEL, metric_value
from tests.server.up_support import (
    INSTALL_HINT,
    MODEL,
    assert_group_gone,
    engines_in,
    kill_groups,
    listening,
    run_up,
)
from tests.support.procs import ROOT, Proc, cli_argv, free_port, start_http_server
from tests.support.vllm import (
    MAX_MODEL_LEN,
    SERVED_MODEL_NAME,
    START_TIMEOUT_S,
    TINY_QWEN3_DIR,
    VLLM_BIN,
    VLLM_ENV,
    VllmEnvMissing,
    check_vllm_env,
)


@pytest.mark.parametrize(
    ("args", "env"),
    [
        pytest.param(("--vllm", "/nonexistent/bin/vllm"), {}, id="explicit"),
        pytest.param((), {"PATH": "/nonexistent"}, id="default-lookup"),
    ],
)
def test_missing_vllm_exits_2_saying_how_to_install(
    args: tuple[str, ...], env: dict[str, str]
) -> None:
    """No vLLM executable: exit 2 with the install command and the --vllm way out."""
    assert not (Path(sys.executable).parent / "vllm").exists(), "this venv has a vllm after all"
    result = run_up("--model", MODEL, *args, env=env)
    assert result.returncode == 2, result.stderr
    assert INSTALL_HINT in result.stderr
    assert "--vllm" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(("--gpus", "0,1", "--engines", "3"), "3 engines need 3 GPUs", id="gpus"),
        pytest.param(("--engines", "0"), "at least 1", id="zero"),
        pytest.param(("--gpus", "0,0"), "distinct ids", id="duplicate-gpu"),
        pytest.param(("--", "--port", "9"), "--port is set by up", id="reserved-port"),
        pytest.param(("--vllm-arg=--served-model-name=x",), "up's own", id="reserved-name"),
        pytest.param(("--workers", "2"), "--redis", id="serve-rule"),
        pytest.param(("--engine", "ftp://x"), "--engine=", id="serve-settings"),
    ],
)
def test_usage_errors_exit_2_before_starting_anything(
    fake_vllm: Path, records: Path, args: tuple[str, ...], message: str
) -> None:
    """Bad flags, or settings serve would reject, fail at once: exit 2, no engine started."""
    env = {"FAKE_VLLM_RECORD": str(records)}
    result = run_up("--model", MODEL, "--vllm", str(fake_vllm), *args, env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert "pid" not in result.stdout
    assert list(records.iterdir()) == []


def test_busy_gateway_port_exits_2(fake_vllm: Path, records: Path) -> None:
    """The gateway's port is taken: say so before loading any model."""
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        env = {"FAKE_VLLM_RECORD": str(records)}
        result = run_up("--model", MODEL, "--vllm", str(fake_vllm), "--port", str(port), env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "cannot listen" in result.stderr
    assert list(records.iterdir()) == []


def test_engine_dying_at_start_fails_with_its_log_and_stops_the_others(
    fake_vllm: Path, records: Path, tmp_path: Path
) -> None:
    """One engine exits while loading: exit 1, its log tail shown, the other engine stopped."""
    env = {"FAKE_VLLM_RECORD": str(records), "FAKE_VLLM_FAIL_GPU": "1"}
    argv = ("--model", MODEL, "--vllm", str(fake_vllm), "--gpus", "0,1", "--port", "0")
    result = run_up(*argv, "--log-dir", str(tmp_path / "logs"), env=env)
    engines = engines_in(result.stdout)
    try:
        assert result.returncode == 1, result.stdout + result.stderr
        assert "engine1 exited with code 1 while starting" in result.stderr
        assert "CUDA out of memory (fake)" in result.stderr
        assert f"lines of {tmp_path / 'logs' / 'engine1.log'} ---" in result.stderr
        assert sorted(engines) == ["engine0", "engine1"]
        for pid, port in engines.values():
            assert_group_gone(pid)
            assert not listening(port)
    finally:
        kill_groups([pid for pid, _ in engines.values()])


def test_engine_silent_past_the_timeout_fails_and_is_killed(fake_vllm: Path, records: Path) -> None:
    """An engine that never answers /health: exit 1 after --start-timeout, its group killed."""
    env = {"FAKE_VLLM_RECORD": str(records), "FAKE_VLLM_HANG": "1"}
    argv = ("--model", MODEL, "--vllm", str(fake_vllm), "--start-timeout", "3", "--port", "0")
    started = time.monotonic()
    result = run_up(*argv, env=env)
    assert time.monotonic() - started < 55  # 3 s, plus starting two processes on a busy host
    assert result.returncode == 1, result.stdout + result.stderr
    assert "engine0 did not answer /health within 3 s" in result.stderr
    assert "fake vllm: loading /models/EnvACE-Qwen3-8B" in result.stderr
    (record,) = [json.loads(f.read_text()) for f in records.glob("*.json")]
    assert_group_gone(record["pgid"])  # its helper ignores SIGTERM: only SIGKILL ends it


def test_ctrl_c_while_engines_load_stops_them(
    fake_vllm: Path, records: Path, tmp_path: Path
) -> None:
    """Ctrl-C before the engines are healthy: exit 130, every engine group gone."""
    env = {**os.environ, "FAKE_VLLM_RECORD": str(records), "FAKE_VLLM_HANG": "1"}
    argv = cli_argv(
        "up", "--model", MODEL, "--vllm", str(fake_vllm), "--engines", "2", "--port", "0"
    )
    log = tmp_path / "up.log"
    with log.open("wb") as sink:
        up = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=sink, stderr=sink)
    try:
        deadline = time.monotonic() + 120  # both engines spawned (imports take long when busy)
        while len(list(records.glob("*.json"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(list(records.glob("*.json"))) == 2, log.read_text()
        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=30) == 128 + signal.SIGINT, log.read_text()
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
    assert "interrupted while the engines were starting" in log.read_text()
    for record in map(_load, records.glob("*.json")):
        assert_group_gone(record["pgid"])


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_two_engines_one_gpu_each_behind_the_gateway(
    fake_vllm: Path, records: Path, tmp_path: Path, stop: signal.Signals
) -> None:
    """--gpus 0,1: two engines with EnvACE flags, a GPU each, both proxied; a stop ends all."""
    port = free_port()
    log_dir = tmp_path / "logs"
    argv = cli_argv(
        "up", "--model", MODEL, "--vllm", str(fake_vllm), "--gpus", "0,1",
        "--port", str(port), "--api-key", "sk-up", "--log-dir", str(log_dir),
        "--vllm-arg=--max-model-len=2048", "--", "--dtype", "bfloat16",
    )  # fmt: skip
    env = {**FAST_HEALTH, "FAKE_VLLM_RECORD": str(records)}
    up = start_http_server(
        argv, port=port, log_path=tmp_path / "up.log", ready_path="/ready", env=env, timeout=60
    )
    try:
        seen = {r["cuda_visible_devices"]: r for r in map(_load, records.glob("*.json"))}
        assert sorted(seen) == ["0", "1"]
        engines = engines_in(up.log())
        for gpu, record in seen.items():
            engine_port = engines[f"engine{gpu}"][1]
            assert record["argv"] == [
                "serve", MODEL, "--host", "127.0.0.1", "--port", str(engine_port),
                "--served-model-name", "EnvACE-Qwen3-8B", "--max-num-seqs", "128",
                *ENVACE_FLAGS, "--max-model-len=2048", "--dtype", "bfloat16",
            ]  # fmt: skip
            assert record["rgw_env"] == []  # the gateway's settings (and keys) stay with it
            assert (log_dir / f"engine{gpu}.log").read_text().startswith("fake vllm: loading")
        assert f"logs in {log_dir}" in up.log()
        # The gateway's slots per engine are vLLM's batch (RGW_REHEARSAL_ENGINE_SHARE's base).
        settings = next(
            json.loads(line)["settings"] for line in up.log().splitlines()
            if line.startswith("{") and json.loads(line).get("msg") == "settings"
        )  # fmt: skip
        assert [spec["max_concurrency"] for spec in settings["engines"]] == [128, 128]

        auth = {"authorization": "Bearer sk-up"}
        assert httpx.get(up.url + "/v1/models").status_code == 401  # serve's --api-key applies
        models = httpx.get(up.url + "/v1/models", headers=auth).json()
        assert [card["id"] for card in models["data"]] == [TWIN_MODEL]
        twins = [f"http://127.0.0.1:{p}" for _, p in engines.values()]
        for session in range(20):
            body = {"model": TWIN_MODEL, "messages": [{"role": "user", "content": "hello"}]}
            headers = {**auth, "x-session-id": f"s{session}"}
            response = httpx.post(up.url + "/v1/chat/completions", json=body, headers=headers)
            assert response.status_code == 200, response.text
            if all(metric_value(t, "vllm:request_success_total") for t in twins):
                break
        assert all(metric_value(t, "vllm:request_success_total") > 0 for t in twins)

        up.popen.send_signal(stop)
        assert up.popen.wait(timeout=30) == 0, up.log()
        for record in seen.values():
            assert_group_gone(record["pgid"])
        assert not any(listening(p) for _, p in engines.values())
        assert not listening(port)
    finally:
        up.stop()


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


@pytest.mark.vllm
@pytest.mark.timeout(START_TIMEOUT_S + 180)
def test_up_with_real_vllm_end_to_end_then_ctrl_c(tmp_path: Path) -> None:
    """The real vLLM CPU engine: up, the SDK through the gateway (a hermes tool call), Ctrl-C."""
    try:
        check_vllm_env()
    except VllmEnvMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    port = free_port()
    argv = [
        str(Path(sys.executable).parent / "rehearsal-gateway"), "up",
        "--model", str(TINY_QWEN3_DIR.relative_to(ROOT)), "--engines", "1", "--port", str(port),
        "--vllm", str(VLLM_BIN.relative_to(ROOT)), "--served-model-name", SERVED_MODEL_NAME,
        "--", "--max-model-len", str(MAX_MODEL_LEN), "--dtype", "bfloat16", "--enforce-eager",
        "--seed", "0",
    ]  # fmt: skip
    started = time.monotonic()
    up = start_http_server(
        argv,
        port=port,
        log_path=tmp_path / "up.log",
        ready_path="/ready",
        env={**VLLM_ENV, **FAST_HEALTH},
        timeout=START_TIMEOUT_S,
    )
    try:
        print(f"up: gateway ready {time.monotonic() - started:.1f} s after start")
        ((pid, engine_port),) = engines_in(up.log()).values()
        assert "--enable-prefix-caching" in up.log()
        _chat_through(up)
        up.popen.send_signal(signal.SIGINT)
        assert up.popen.wait(timeout=60) == 0, up.log()[-4000:]
        assert not listening(engine_port)
        assert_group_gone(pid, timeout=10)
    finally:
        up.stop()
        kill_groups([pid for pid, _ in engines_in(up.log()).values()])


def _chat_through(up: Proc) -> None:
    with openai.OpenAI(base_url=up.url + "/v1", api_key="x", max_retries=0, timeout=120) as client:
        hello = client.chat.completions.create(
            model=SERVED_MODEL_NAME,
            messages=[{"role": "user", "content": "Say hello."}],
            max_tokens=16,
            seed=3,
        )
        assert hello.choices[0].finish_reason in ("stop", "length")
        assert hello.usage is not None
        assert hello.usage.completion_tokens > 0
        called = client.chat.completions.create(
            model=SERVED_MODEL_NAME,
            messages=USER_ASKS,  # type: ignore[arg-type]
            tools=[WEATHER_TOOL],  # type: ignore[list-item]
            max_tokens=64,
            seed=4,
            extra_body=forced_tool_call_extra(),
        )
    choice = called.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"city": "Paris"}  # type: ignore[union-attr]


PRIORITY = (("--engine-scheduling", "priority"), ["--scheduling-policy", "priority"])


@pytest.mark.parametrize(("flag", "policy"), [((), []), PRIORITY], ids=["fcfs", "priority"])
def test_engine_scheduling_reaches_every_engine(
    fake_vllm: Path, records: Path, flag: tuple[str, ...], policy: list[str]
) -> None:
    """The gateway's --engine-scheduling priority starts each engine with vLLM's flag for it."""
    env = {"FAKE_VLLM_RECORD": str(records), "FAKE_VLLM_HANG": "1"}
    argv = ("--model", MODEL, "--vllm", str(fake_vllm), "--start-timeout", "2", "--port", "0")
    result = run_up(*argv, *flag, env=env)
    assert result.returncode == 1, result.stdout + result.stderr  # the fake never answers
    (record,) = map(_load, records.glob("*.json"))
    assert record["argv"][-len(ENVACE_FLAGS) - len(policy) :] == [*ENVACE_FLAGS, *policy]


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ([], (128, ("--max-num-seqs", "128"))),
        (["--dtype", "bfloat16", "--max-num-seqs", "8"], (8, ())),
        (["--max-num-seqs=16"], (16, ())),
    ],
    ids=["default", "flag", "equals"],
)
def test_the_gateways_slots_are_vllms_batch(
    extra: list[str], expected: tuple[int, tuple[str, ...]]
) -> None:
    """up passes the gateway's slots per engine to vLLM, or takes the user's --max-num-seqs."""
    assert batch_slots(extra, 128) == expected


def test_several_workers_share_one_batch() -> None:
    """Each worker has its own slots: together they fill vLLM's batch, no more."""
    assert batch_slots([], 64, workers=2) == (64, ("--max-num-seqs", "128"))
    assert batch_slots(["--max-num-seqs", "256"], 64, workers=4) == (64, ())
    assert batch_slots(["--max-num-seqs=3"], 64, workers=4) == (1, ())  # never no slot at all


@pytest.mark.parametrize(
    "extra", [["--max-num-seqs"], ["--max-num-seqs=0"], ["--max-num-seqs", "x"]]
)
def test_a_bad_max_num_seqs_is_a_usage_error(extra: list[str]) -> None:
    with pytest.raises(UsageError, match="--max-num-seqs must be a positive integer"):
        batch_slots(extra, 128)
