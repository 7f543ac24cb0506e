"""`rehearsal-gateway demo --short`, run as `make demo` runs it: its printed table is parsed and
shows what rehearsal buys, it agrees with --json, and it leaves no process behind."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.support.procs import ROOT, cli_argv, free_port


def _outcome_rows(stdout: str) -> dict[str, list[str]]:
    """The outcome table's rows by run name (cells stripped)."""
    table = stdout.split("Outcomes (seed", 1)[1].split("Cost per turn", 1)[0]
    rows = {}
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("│").split("│")]
        if cells and cells[0] in ("off", "parallel", "sequential"):
            rows[cells[0]] = cells
    return rows


def _alive(marker: str) -> list[str]:
    """Command lines of live processes that mention ``marker``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in text:
            found.append(text)
    return found


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_short_demo_table(tmp_path: Path) -> None:
    """Rehearsal succeeds at least as often with fewer real tool errors; JSON matches; all stop.

    The gateway and the twin listen on the ports asked for (--port, --twin-port)."""
    out = tmp_path / "demo.json"
    gateway_port, twin_port = free_port(), free_port()
    done = subprocess.run(
        cli_argv("demo", "--short", "--json", str(out), "--port", str(gateway_port),
                 "--twin-port", str(twin_port)),
        cwd=ROOT, capture_output=True, text=True, timeout=140, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    rows = _outcome_rows(done.stdout)
    assert set(rows) == {"off", "parallel", "sequential"}
    success = {name: int(re.match(r"(\d+)/", row[1]).group(1)) for name, row in rows.items()}  # type: ignore[union-attr]
    errors = {name: int(row[2]) for name, row in rows.items()}
    for rehearsed in ("parallel", "sequential"):
        assert success[rehearsed] >= success["off"]
        assert errors[rehearsed] < errors["off"]
        assert rows[rehearsed][6] != "-"  # fidelity measured from the feedback loop
    document = json.loads(out.read_text())
    by_name = {run["name"]: run for run in document["runs"]}
    assert {name: by_name[name]["successes"] for name in rows} == success
    assert {name: by_name[name]["tool_errors"] for name in rows} == errors
    port = re.search(r"gateway on http://127\.0\.0\.1:(\d+)", done.stdout)
    assert port is not None
    assert port.group(1) == str(gateway_port)
    assert _alive(f"--port {gateway_port}") == []
    assert _alive(f"--port {twin_port}") == []


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_demo_fails_loudly(tmp_path: Path) -> None:
    """A twin that cannot start (skill out of range) makes the demo exit 1 with its log shown."""
    done = subprocess.run(
        cli_argv("demo", "--short", "--skill", "2"),
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert "demo failed" in done.stdout
    assert "--skill must be within [0, 1]" in done.stdout


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_terminated_demo_stops_its_processes() -> None:
    """A demo sent SIGTERM (a CI timeout, `kill`) still stops the twin and gateway it started."""
    with subprocess.Popen(
        cli_argv("demo", "--short", "--latency-scale", "1"),
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    ) as demo:  # fmt: skip
        assert demo.stdout is not None
        line = ""
        while "gateway on" not in line:
            line = demo.stdout.readline()
            assert line, "the demo ended before its gateway started"
        port = re.search(r"127\.0\.0\.1:(\d+)", line)
        assert port is not None
        (gateway,) = _alive(f"--port {port.group(1)} ")
        twin_port = re.search(r"--engine http://127\.0\.0\.1:(\d+)", gateway)
        assert twin_port is not None
        demo.send_signal(signal.SIGTERM)
        assert demo.wait(timeout=30) != 0
        demo.stdout.read()
    assert _alive(f"--port {port.group(1)} ") == []
    assert _alive(f"--port {twin_port.group(1)} ") == []


def _outcomes(path: Path) -> dict[str, dict[str, object]]:
    """The reproducible part of a ``--json`` document: every run's counts, no timings."""
    runs = json.loads(path.read_text())["runs"]
    keep = ("successes", "tool_errors", "real_calls", "turns", "vetoes", "fidelity", "tokens")
    return {run["name"]: {key: run[key] for key in keep} for run in runs}


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_demo_on_redis_equals_the_in_process_store(tmp_path: Path) -> None:
    """With Redis answering, the demo uses it (keys dropped afterwards) and the outcomes match."""
    import redis

    documents = {}
    for store in ("auto", "none"):
        out = tmp_path / f"{store}.json"
        done = subprocess.run(
            cli_argv("demo", "--short", "--redis", store, "--json", str(out)),
            cwd=ROOT, capture_output=True, text=True, timeout=140, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        expected = "Redis" if store == "auto" else "in-process store"
        assert expected in done.stdout
        documents[store] = _outcomes(out)
    assert documents["auto"] == documents["none"]
    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    try:
        assert list(client.scan_iter(match="rgw-demo-*")) == []
    finally:
        client.close()
