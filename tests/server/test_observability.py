"""Observability end to end: what one scripted session leaves in /metrics, in `top` and in logs.

One gateway with two uvicorn workers (multiprocess metrics, Redis store, an API key) in front of
an engine twin whose policy always errs (``--skill 0``) and whose imagination is faithful
(``--fidelity 1``). The module's traffic runs once; each step records /metrics before and after,
and each test checks what one step (or the whole session) must have moved, exactly.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rehearsal_gateway.server.http.auth import key_digest, tenant_of
from rehearsal_gateway.server.telemetry.logs import JsonFormatter, request_id_from
from tests.deploy import promql
from tests.server.conftest import TWIN_MODEL
from tests.server.rehearsal_support import (
    Stack,
    assistant_turn,
    chat,
    opening,
    rehearsal_of,
    run_committed,
    running_stack,
)
from tests.support.procs import cli_argv

API_KEY = "sk-obs-test-key-7f3a9c"
WRONG_KEY = "sk-wrong-secret-41d8e2"
SECRET_TEXT = "my-password-is-hunter2-93b1"
P = "rehearsal_gateway_"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Samples:
    """Every sample of a /metrics page, parsed with prometheus-client's own parser."""
    text = httpx.get(url + "/metrics", timeout=5).text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


@dataclass
class Step:
    """One step of the script: the metrics around it and what its answers said."""

    before: Samples
    after: Samples
    answers: list[Any] = field(default_factory=list)

    def delta(self, name: str, **labels: str) -> float:
        return total(self.after, name, **labels) - total(self.before, name, **labels)


@dataclass
class Session:
    stack: Stack
    steps: dict[str, Step]
    log_path: Path

    def log_lines(self) -> list[dict[str, Any]]:
        return [
            json.loads(line)
            for line in self.log_path.read_text().splitlines()
            if line.startswith('{"ts"')
        ]

    def request_line(self, request_id: str) -> dict[str, Any]:
        lines = [x for x in self.log_lines() if x.get("request_id") == request_id]
        assert len(lines) == 1, lines
        return lines[0]


def _step(url: str, requests: int, action: Callable[[], list[Any]]) -> Step:
    """Run ``action`` (which sends ``requests`` chat requests) between two scrapes."""
    before = scrape(url)
    answers = action()
    goal = total(before, P + "requests_total") + requests
    deadline = time.monotonic() + 10
    # A request is counted once its last byte is out, a moment after the client has it.
    while (after := scrape(url)) and total(after, P + "requests_total") < goal:
        assert time.monotonic() < deadline, "requests were not counted"
        time.sleep(0.02)
    return Step(before, after, answers)


def _trace(stack: Stack, rehearsal_id: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {API_KEY}"}
    url = f"{stack.gateway.url}/v1/rehearsals/{rehearsal_id}"
    trace: dict[str, Any] = httpx.get(url, headers=headers, timeout=10).json()
    return trace


def _script(stack: Stack) -> dict[str, Step]:
    """The scripted session; each step's answers are kept for the tests to compare with."""
    url, world, sdk = stack.gateway.url, stack.world, stack.sdk(api_key=API_KEY)
    auth = {"Authorization": f"Bearer {API_KEY}"}
    plain = {"model": TWIN_MODEL, "messages": [{"role": "user", "content": "hello"}]}
    endpoint = url + "/v1/chat/completions"
    task = world.tasks[0]

    def passthrough() -> list[Any]:
        one = httpx.post(endpoint, json=plain, headers={**auth, "X-Request-Id": "obs-plain-1"})
        streamed = {**plain, "stream": True, "stream_options": {"include_usage": True}}
        with httpx.stream("POST", endpoint, json=streamed, headers=auth, timeout=30) as two:
            lines = [line for line in two.iter_lines() if line.startswith("data: {")]
        usage = json.loads(lines[-1][6:])["usage"]
        return [one, two, usage]

    def parallel() -> list[Any]:
        completion = chat(sdk, world, opening(world, task), mode="parallel", budget=4,
                          commit="select", seed=11,
                          headers={"X-Request-Id": "obs-parallel"})  # fmt: skip
        return [completion, _trace(stack, rehearsal_of(completion)["id"])]

    def sequential() -> list[Any]:
        completion = chat(sdk, world, opening(world, task), mode="sequential", budget=2,
                          commit="select", early_exit=False, seed=5)  # fmt: skip
        return [completion, _trace(stack, rehearsal_of(completion)["id"])]

    def agreeing() -> list[Any]:
        # Within one request the note of earlier attempts rules out each mistake in turn, so a
        # policy that always errs runs out of mistakes, takes the right action twice and stops.
        completion = chat(sdk, world, opening(world, task), mode="sequential", budget=8,
                          commit="select", seed=5)  # fmt: skip
        return [completion, _trace(stack, rehearsal_of(completion)["id"])]

    def degraded() -> list[Any]:
        completion = chat(sdk, world, opening(world, task), mode="parallel", budget=4,
                          deadline_ms=5, seed=11)  # fmt: skip
        return [completion]

    steps = {
        "passthrough": _step(url, 2, passthrough),
        "parallel": _step(url, 1, parallel),
        "sequential": _step(url, 1, sequential),
        "early_exit": _step(url, 1, agreeing),
    }
    first = steps["early_exit"].answers[0]

    def tool_result() -> list[Any]:
        results = run_committed(world, world.new_state(task), first)
        messages = [*opening(world, task), assistant_turn(first)]
        messages += [
            {"role": "tool", "tool_call_id": i, "content": json.dumps(r)} for i, r in results
        ]
        return [chat(sdk, world, messages, mode="off"), results]

    def secrets() -> list[Any]:
        wrong = httpx.post(endpoint, json=plain, headers={"Authorization": f"Bearer {WRONG_KEY}"})
        told = {**plain, "messages": [{"role": "user", "content": f"remember {SECRET_TEXT}"}]}
        right = httpx.post(endpoint, json=told, headers={**auth, "X-Request-Id": "obs-secret"})
        return [wrong, right]

    steps["tool_result"] = _step(url, 1, tool_result)
    steps["degraded"] = _step(url, 1, degraded)
    steps["secrets"] = _step(url, 2, secrets)
    return steps


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """Gateway (2 workers, API key) + twin (skill 0, fidelity 1, H100 latency / 10) + Redis."""
    logs = tmp_path_factory.mktemp("observability")
    metrics_dir = tmp_path_factory.mktemp("prom-multiproc")
    env = {"RGW_WORKERS": "2", "RGW_METRICS_DIR": str(metrics_dir), "RGW_API_KEYS": API_KEY,
           # Every imagined veto acts: this suite counts what rehearsal did, not what trust let it.
           "RGW_TRUST_ENABLED": "false"}  # fmt: skip
    twin = ("--skill", "0", "--fidelity", "1", "--seed", "3", "--latency", "h100",
            "--latency-scale", "0.1")  # fmt: skip
    with running_stack(logs, twin_args=twin, env=env, process=True) as stack:
        steps = _script(stack)
        yield Session(stack, steps, stack.gateway.log_path)


def _counts(step: Step, role: str) -> float:
    return step.delta(P + "engine_call_seconds_count", role=role)


def test_passthrough_counts_requests_tokens_and_engine_calls(session: Session) -> None:
    """Two pass-throughs: requests, duration, overhead, one engine call each, their tokens."""
    step = session.steps["passthrough"]
    one, _, stream_usage = step.answers
    assert step.delta(P + "requests_total", mode="passthrough", outcome="ok") == 2
    assert step.delta(P + "requests_total") == 2
    assert step.delta(P + "request_duration_seconds_count", mode="passthrough") == 2
    assert step.delta(P + "overhead_seconds_count", mode="passthrough") == 2
    assert _counts(step, "passthrough") == 2
    assert step.delta(P + "engine_call_seconds_count") == 2
    usage = one.json()["usage"]
    for kind, key in (("prompt", "prompt_tokens"), ("completion", "completion_tokens")):
        expected = usage[key] + stream_usage[key]
        assert expected > 0
        assert step.delta(P + "tokens_total", role="passthrough", kind=kind) == expected
    assert step.delta(P + "rehearsal_duration_seconds_count") == 0
    assert step.delta(P + "in_flight_requests") == 0


def _vetoes_by_code(trace: dict[str, Any]) -> Counter[tuple[str, str]]:
    return Counter(
        (observation["outcome"].split(":", 1)[1], observation["source"])
        for trajectory in trace["trace"]
        for step in trajectory["steps"]
        for observation in step["observations"]
        if observation["outcome"].startswith("veto:")
    )


def _assert_rehearsal(step: Step, mode: str) -> dict[str, Any]:
    completion, trace = step.answers
    summary = rehearsal_of(completion)
    calls = trace["engine_calls"]
    assert step.delta(P + "requests_total", mode=mode, outcome="ok") == 1
    assert step.delta(P + "request_duration_seconds_count", mode=mode) == 1
    assert step.delta(P + "overhead_seconds_count", mode=mode) == 1
    assert step.delta(P + "rehearsal_duration_seconds_count", mode=mode) == 1
    assert step.delta(P + "commit_duration_seconds_count", commit="select") == 1
    for role in ("act", "rehearse", "commit"):
        assert _counts(step, role) == calls.get(role, 0), role
    assert step.delta(P + "imagined_observation_seconds_count") == calls["rehearse"] > 0
    for role, usage in summary["tokens"].items():
        for kind in ("prompt", "completion", "cached"):
            assert step.delta(P + "tokens_total", role=role, kind=kind) == usage[kind]
        assert usage["prompt"] > 0
        assert usage["completion"] > 0
    assert step.delta(P + "degraded_total") == 0
    assert step.delta(P + "real_tool_call_seconds_count") == 0
    return summary


def test_parallel_counts_its_veto_and_every_engine_call(session: Session) -> None:
    """Parallel K=4 with a planted mistake: its veto by code and source, calls, tokens by role."""
    step = session.steps["parallel"]
    summary = _assert_rehearsal(step, "parallel")
    vetoes = _vetoes_by_code(step.answers[1])
    assert summary["vetoes"] + summary["checked_vetoes"] == sum(vetoes.values()) >= 1
    for (code, source), count in vetoes.items():
        assert step.delta(P + "vetoes_total", code=code, source=source) == count
    assert step.delta(P + "vetoes_total") == summary["vetoes"] + summary["checked_vetoes"]
    assert step.delta(P + "commits_total", path=summary["commit_path"], check="ok") == 1
    assert step.delta(P + "early_exits_total") == 0


def test_sequential_counts_calls_without_vetoes(session: Session) -> None:
    """Sequential K=2, no early exit: two acting calls, one imagined call per unchecked attempt."""
    step = session.steps["sequential"]
    summary = _assert_rehearsal(step, "sequential")
    calls = step.answers[1]["engine_calls"]
    imagined = [o for t in step.answers[1]["trace"] for s in t["steps"] for o in s["observations"]]
    # Every observation not decided by the schema check is one rehearsal call (a reflected
    # action select falls back to is verified by one more).
    assert calls["act"] == 2
    assert calls["rehearse"] == sum(o["source"] == "imagined" for o in imagined)
    assert summary["early_exit"] is False
    assert step.delta(P + "early_exits_total") == 0
    assert step.delta(P + "vetoes_total") == summary["vetoes"] + summary["checked_vetoes"]


def test_agreeing_attempts_count_one_early_exit(session: Session) -> None:
    """Attempts that agree after the mistakes are ruled out: one early exit is counted."""
    step = session.steps["early_exit"]
    summary = _assert_rehearsal(step, "sequential")
    assert summary["early_exit"] is True
    assert step.delta(P + "early_exits_total", mode="sequential") == 1
    assert step.delta(P + "early_exits_total") == 1


def test_tool_result_counts_one_real_call_and_one_fidelity(session: Session) -> None:
    """The second turn carries the real result: one real-call latency, one fidelity score."""
    step = session.steps["tool_result"]
    _, results = step.answers
    assert len(results) == 1
    assert step.delta(P + "real_tool_call_seconds_count") == 1
    assert step.delta(P + "fidelity_count") == 1
    assert step.delta(P + "fidelity_count", outcome="ok") == 1
    assert 0.0 <= step.delta(P + "fidelity_sum") <= 1.0
    assert step.delta(P + "requests_total", mode="passthrough", outcome="ok") == 1
    assert _counts(step, "passthrough") == 1
    assert step.delta(P + "rehearsal_duration_seconds_count") == 0


def test_deadline_counts_a_degraded_answer(session: Session) -> None:
    """A 5 ms deadline on a slow engine: a degraded answer, counted by reason and outcome."""
    step = session.steps["degraded"]
    (completion,) = step.answers
    assert rehearsal_of(completion)["degraded"] == "deadline"
    assert step.delta(P + "requests_total", mode="parallel", outcome="degraded") == 1
    assert step.delta(P + "requests_total") == 1
    assert step.delta(P + "degraded_total", reason="deadline") == 1
    assert step.delta(P + "degraded_total") == 1
    assert step.delta(P + "imagined_observation_seconds_count") == 0
    assert step.delta(P + "rehearsal_duration_seconds_count", mode="parallel") == 1
    assert step.delta(P + "engine_errors_total") == 0


def test_two_workers_report_session_totals(session: Session) -> None:
    """Whichever worker answers /metrics, the counters are the whole session's totals."""
    expected = {
        ("passthrough", "ok"): 4, ("parallel", "ok"): 1, ("sequential", "ok"): 2,
        ("parallel", "degraded"): 1, ("passthrough", "client_error"): 1,
    }  # fmt: skip
    for _ in range(4):  # a new connection each time: both workers answer some of them
        samples = scrape(session.stack.gateway.url)
        for (mode, outcome), count in expected.items():
            assert total(samples, P + "requests_total", mode=mode, outcome=outcome) == count
        assert total(samples, P + "requests_total") == sum(expected.values())
        assert total(samples, P + "real_tool_call_seconds_count") == 1
        assert total(samples, P + "fidelity_count") == 1
        assert total(samples, P + "store_errors_total") == 0
        assert total(samples, P + "in_flight_requests") == 0
    started = {x["pid"] for x in session.log_lines() if x["msg"].startswith("Started server")}
    assert len(started) == 2, "two worker processes"


def test_deploy_queries_name_only_live_series(session: Session) -> None:
    """Dashboard and rule PromQL name only series the live gateway or the twin exposes."""
    stack = session.stack
    live = promql.exposed_names(httpx.get(stack.gateway.url + "/metrics", timeout=5).text)
    live |= promql.exposed_names(httpx.get(stack.twin.url + "/metrics", timeout=5).text)
    known = live | promql.recorded_names()
    assert promql.unknown_names(promql.dashboard_exprs(), known) == {}
    assert promql.unknown_names(promql.rule_exprs(), known) == {}


def test_top_shows_rehearsal_and_real_call_latency(session: Session) -> None:
    """`top --once` against the live gateway lists rehearsal and real-call latency together."""
    argv = cli_argv("top", "--url", session.stack.gateway.url, "--once")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    # A latency row: phase, p50, p95 ("826.9 ms", "2.18 s" or "—"), count; another pane may follow.
    timing = r"(?:[\d.]+ \w+|—)"

    def count(phase: str) -> str:
        found = re.search(rf"^{phase}\s+{timing}\s+{timing}\s+([\d,]+)", done.stdout, re.M)
        assert found is not None, done.stdout
        return found.group(1)

    assert count("rehearsal") == "4"  # parallel, sequential twice, degraded
    assert count("real tool call") == "1"
    assert "rehearsal p95 / real call p95 " in done.stdout


def test_request_log_line_has_the_rehearsal_fields(session: Session) -> None:
    """The parallel request's one JSON line: ids, tenant hash, budget, latency split, tokens."""
    completion, _ = session.steps["parallel"].answers
    summary = rehearsal_of(completion)
    line = session.request_line("obs-parallel")
    assert line["logger"] == "rehearsal_gateway.request"
    assert line["rehearsal_id"] == summary["id"]
    assert line["tenant"] == tenant_of(key_digest(API_KEY))
    assert (line["mode"], line["budget"], line["status"], line["outcome"]) == (
        "parallel", 4, 200, "ok",
    )  # fmt: skip
    assert set(line["latency_ms"]) == {"act", "rehearse", "commit", "total", "overhead"}
    assert line["latency_ms"]["total"] >= line["latency_ms"]["act"] > 0
    assert line["tokens"] == summary["tokens"]
    assert line["engines"] == [session.stack.twin.url.removeprefix("http://")]
    degraded = [x for x in session.log_lines() if x.get("degraded") == "deadline"]
    assert len(degraded) == 1
    assert degraded[0]["outcome"] == "degraded"


def test_request_id_is_echoed_or_minted(session: Session) -> None:
    """A sane X-Request-Id comes back as sent; otherwise (and on streams) one is minted."""
    one, two, _ = session.steps["passthrough"].answers
    assert one.headers["x-request-id"] == "obs-plain-1"
    assert two.headers["x-request-id"].startswith("req_")
    assert session.request_line(two.headers["x-request-id"])["tokens"]["passthrough"]
    wrong, _ = session.steps["secrets"].answers
    assert wrong.status_code == 401
    assert wrong.headers["x-request-id"].startswith("req_")
    assert request_id_from([(b"x-request-id", b"bad id\x00" * 40)]).startswith("req_")
    assert request_id_from([(b"x-request-id", b"trace-1:span/2")]) == "trace-1:span/2"


def test_secrets_never_reach_the_log(session: Session) -> None:
    """Neither a key in Authorization nor a string in a message appears in the gateway's log."""
    wrong, right = session.steps["secrets"].answers
    assert (wrong.status_code, right.status_code) == (401, 200)
    text = session.log_path.read_text()
    for secret in (API_KEY, WRONG_KEY, SECRET_TEXT, "Bearer"):
        assert secret not in text, secret
    line = session.request_line("obs-secret")
    assert "messages" not in line
    assert line["status"] == 200


def test_formatter_writes_one_json_object_per_record() -> None:
    """Extras become fields; an exception becomes an ``exc`` string; nothing else is added."""
    import logging

    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "n=%d", (3,), None)
    record.request_id = "r1"
    line = json.loads(JsonFormatter().format(record))
    assert {k: line[k] for k in ("level", "logger", "msg", "request_id")} == {
        "level": "warning", "logger": "x", "msg": "n=3", "request_id": "r1",
    }  # fmt: skip
    assert set(line) == {"ts", "level", "logger", "msg", "pid", "request_id"}


def test_content_logging_is_opt_in_and_never_logs_keys(start_twin, start_gateway) -> None:
    """With RGW_LOG_CONTENT=true the request's messages are logged; the API key still is not."""
    twin = start_twin()
    env = {"RGW_LOG_CONTENT": "true", "RGW_API_KEYS": API_KEY}
    gateway = start_gateway(twin.url + "/v1", env=env)
    body = {"model": TWIN_MODEL, "messages": [{"role": "user", "content": SECRET_TEXT}]}
    headers = {"Authorization": f"Bearer {API_KEY}", "X-Request-Id": "obs-content"}
    response = httpx.post(gateway.url + "/v1/chat/completions", json=body, headers=headers)
    assert response.status_code == 200
    deadline = time.monotonic() + 5
    while "obs-content" not in gateway.log() and time.monotonic() < deadline:
        time.sleep(0.02)
    line = next(json.loads(x) for x in gateway.log().splitlines() if '"obs-content"' in x)
    assert line["messages"] == body["messages"]
    assert API_KEY not in gateway.log()


def test_documented_buckets_match_the_code() -> None:
    """docs/metrics.md lists each bucket layout exactly as server/telemetry/families.py has it."""
    from rehearsal_gateway.server.telemetry import families

    text = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    for name in ("OVERHEAD_BUCKETS", "REQUEST_BUCKETS", "REAL_CALL_BUCKETS", "FIDELITY_BUCKETS"):
        line = next(x for x in text.splitlines() if x.startswith(f"- `{name}`"))
        documented = tuple(float(v) for v in line.rpartition(": ")[2].split(", "))
        assert documented == getattr(families, name), name
