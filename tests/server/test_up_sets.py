"""``rehearsal-gateway up`` with a rehearsal set: two sets of engines, one GPU each, wired in.

As in ``tests/server/test_up.py``, ``tests/support/fake_vllm.py`` stands where ``vllm`` would be
and becomes an engine twin, so the gateway ``up`` starts really sends imagination to the
rehearsal engine and real work to the main one, which the gateway's own metrics show.
"""

from __future__ import annotations

import json
import re
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from rehearsal_gateway.server.launcher.engine_sets import (
    UsageError,
    engine_gpus,
    rehearsal_gpus,
)
from rehearsal_gateway.twin.worlds import load_world
from tests.server import up_support
from tests.server.conftest import FAST_HEALTH, TWIN_MODEL, metric_value
from tests.server.rehearsal_support import opening
from tests.support.procs import cli_argv, free_port, start_http_server

CALLS = "rehearsal_gateway_engine_call_seconds_count"
LINE = re.compile(
    r"((?:engine|rehearsal)\d+): pid (\d+)(?:, GPU \S+)?, http://127\.0\.0\.1:(\d+)/v1"
)
MODEL = up_support.MODEL
REHEARSED = 4


def _started(output: str) -> dict[str, tuple[int, int]]:
    """``{"engine0": (pid, port), "rehearsal0": …}`` as printed by ``up``."""
    return {name: (int(pid), int(port)) for name, pid, port in LINE.findall(output)}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(("--rehearsal-engines", "-1"), "at least 0", id="negative"),
        pytest.param(
            ("--gpus", "0", "--rehearsal-engines", "1"), "needs --rehearsal-gpus", id="no-gpu"
        ),
        pytest.param(("--rehearsal-gpus", "1"), "--rehearsal-gpus needs --gpus", id="main-all"),
        pytest.param(
            ("--gpus", "0,1", "--rehearsal-gpus", "1"), "GPU 1 is given to both sets", id="shared"
        ),
        pytest.param(
            ("--gpus", "0", "--rehearsal-gpus", "1", "--rehearsal-engines", "2"),
            "2 rehearsal engines need 2 GPUs, --rehearsal-gpus lists 1",
            id="too-few",
        ),
        pytest.param(("--gpus", "0", "--rehearsal-gpus", "1,1"), "distinct ids", id="duplicate"),
        pytest.param(
            ("--rehearsal-engines", "1", "--rehearsal-engine", "http://x:1/v1,name=rehearsal0"),
            "unique across both sets",
            id="name-taken",
        ),
    ],
)
def test_rehearsal_set_usage_errors_exit_2_before_starting_anything(
    fake_vllm: Path, records: Path, args: tuple[str, ...], message: str
) -> None:
    """A rehearsal set that would share a GPU, or lacks one, fails at once: no engine started."""
    env = {"FAKE_VLLM_RECORD": str(records)}
    result = up_support.run_up("--model", MODEL, "--vllm", str(fake_vllm), *args, env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert "pid" not in result.stdout
    assert list(records.iterdir()) == []


def test_gpus_per_set() -> None:
    """Without GPUs both sets see every device; with them, each engine gets its own."""
    assert rehearsal_gpus(None, None, engine_gpus(2, None)) == []
    assert rehearsal_gpus(2, None, engine_gpus(1, None)) == [None, None]
    main = engine_gpus(None, "0,1,2")
    assert rehearsal_gpus(None, "3", main) == ["3"]
    assert rehearsal_gpus(1, "3,4", main) == ["3"]  # as --engines takes the first of --gpus
    assert rehearsal_gpus(0, "3", main) == []
    # --gpus' unused ids are free for the rehearsal set.
    assert rehearsal_gpus(None, "1", engine_gpus(1, "0,1")) == ["1"]
    with pytest.raises(UsageError, match="GPU 0,2 is given to both sets"):
        rehearsal_gpus(None, "2,0", main)


def _rehearse(gateway_url: str) -> None:
    """``REHEARSED`` parallel K=3 rehearsals of the retail world, every one answered."""
    world = load_world("retail")

    def one(i: int) -> int:
        body: dict[str, Any] = {
            "model": TWIN_MODEL, "messages": opening(world, world.tasks[i]),
            "tools": world.tool_schemas(),
            "rehearsal": {"mode": "parallel", "budget": 3, "early_exit": False,
                          "deadline_ms": 30_000},
        }  # fmt: skip
        response = httpx.post(
            gateway_url + "/v1/chat/completions",
            json=body,
            headers={"x-session-id": f"s{i}"},
            timeout=60,
        )
        assert response.json().get("choices"), response.text
        return response.status_code

    with ThreadPoolExecutor(REHEARSED) as pool:
        assert list(pool.map(one, range(REHEARSED))) == [200] * REHEARSED


def test_two_sets_each_on_its_gpu_imagination_on_the_rehearsal_set(
    fake_vllm: Path, records: Path, tmp_path: Path
) -> None:
    """--gpus 0 --rehearsal-gpus 1: the same vLLM command on each GPU; the gateway sends every
    imagination to rehearsal0 and every acting call to engine0; SIGTERM stops both sets."""
    port = free_port()
    log_dir = tmp_path / "logs"
    argv = cli_argv(
        "up", "--model", MODEL, "--vllm", str(fake_vllm), "--gpus", "0", "--rehearsal-gpus", "1",
        "--port", str(port), "--log-dir", str(log_dir), "--", "--max-num-seqs", "8",
    )  # fmt: skip
    env = {**FAST_HEALTH, "FAKE_VLLM_RECORD": str(records)}
    up = start_http_server(
        argv, port=port, log_path=tmp_path / "up.log", ready_path="/ready", env=env, timeout=60
    )
    try:
        started = _started(up.log())
        assert sorted(started) == ["engine0", "rehearsal0"], up.log()
        assert "1 engine(s) and 1 rehearsal engine(s) for" in up.log()
        seen = {
            r["cuda_visible_devices"]: r
            for r in (json.loads(f.read_text()) for f in records.glob("*.json"))
        }
        assert sorted(seen) == ["0", "1"]
        for gpu, name in (("0", "engine0"), ("1", "rehearsal0")):
            engine_port = started[name][1]
            assert seen[gpu]["argv"][:6] == ["serve", MODEL, "--host", "127.0.0.1", "--port",
                                             str(engine_port)]  # fmt: skip
            assert seen[gpu]["argv"][6:] == seen["0"]["argv"][6:]  # one command for both sets
            assert (log_dir / f"{name}.log").read_text().startswith("fake vllm: loading")
        settings = next(
            json.loads(line)["settings"] for line in up.log().splitlines()
            if line.startswith("{") and json.loads(line).get("msg") == "settings"
        )  # fmt: skip
        (main,) = settings["engines"]
        (imagining,) = settings["rehearsal_engines"]
        assert (main["name"], main["max_concurrency"]) == ("engine0", 8)
        assert (imagining["name"], imagining["max_concurrency"]) == ("rehearsal0", 8)
        assert imagining["url"] == f"http://127.0.0.1:{started['rehearsal0'][1]}/v1"

        _rehearse(up.url)
        assert metric_value(up.url, CALLS, engine="rehearsal0", role="rehearse") > 0
        assert metric_value(up.url, CALLS, engine="rehearsal0", role="act") == 0
        assert metric_value(up.url, CALLS, engine="engine0", role="act") > 0
        assert metric_value(up.url, CALLS, engine="engine0", role="rehearse") == 0

        up.popen.send_signal(signal.SIGTERM)
        assert up.popen.wait(timeout=30) == 0, up.log()
        for record in seen.values():
            up_support.assert_group_gone(record["pgid"])
        assert not any(up_support.listening(p) for _, p in started.values())
    finally:
        up.stop()


def test_a_rehearsal_engine_dying_at_start_fails_up_and_stops_the_main_set(
    fake_vllm: Path, records: Path, tmp_path: Path
) -> None:
    """The rehearsal set is started as the main one is: one that exits while loading is exit 1,
    with its log tail, and the main engine is stopped too."""
    env = {"FAKE_VLLM_RECORD": str(records), "FAKE_VLLM_FAIL_GPU": "1"}
    argv = ("--model", MODEL, "--vllm", str(fake_vllm), "--gpus", "0", "--rehearsal-gpus", "1")
    result = up_support.run_up(*argv, "--port", "0", "--log-dir", str(tmp_path / "logs"), env=env)
    started = _started(result.stdout)
    try:
        assert result.returncode == 1, result.stdout + result.stderr
        assert "rehearsal0 exited with code 1 while starting" in result.stderr
        assert f"lines of {tmp_path / 'logs' / 'rehearsal0.log'} ---" in result.stderr
        assert sorted(started) == ["engine0", "rehearsal0"]
        for pid, port in started.values():
            up_support.assert_group_gone(pid)
            assert not up_support.listening(port)
    finally:
        up_support.kill_groups([pid for pid, _ in started.values()])
