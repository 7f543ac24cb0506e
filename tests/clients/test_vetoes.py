"""One count of vetoes everywhere: summary, trace, `chat`, `top`, eval and the metrics agree."""

from __future__ import annotations

import json
import re
import subprocess

import httpx

from rehearsal_gateway.clients import top_frame, vetoes
from rehearsal_gateway.clients.eval.report import _vetoes
from rehearsal_gateway.clients.eval.summary import CellSummary
from tests.clients.conftest import API_KEY
from tests.server.rehearsal_support import Stack
from tests.support.procs import ROOT, cli_argv


def _cli(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    argv = cli_argv(*args, "--url", stack.gateway.url, "--api-key", API_KEY)
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)


def _metric_kinds(stack: Stack) -> dict[str, int]:
    page = httpx.get(stack.gateway.url + "/metrics", timeout=10).text
    return vetoes.from_samples(top_frame.parse_snapshot(page).samples("vetoes_total"))


def test_kinds_render_most_frequent_first() -> None:
    """Kinds are `imagined` or a check's code; the rendering is the one every view prints."""
    assert vetoes.kind("INVALID_PARAMETERS", "imagined") == "imagined"
    assert vetoes.kind("SCHEMA_INVALID", "check") == "SCHEMA_INVALID"
    assert vetoes.render({}) == "0"
    assert vetoes.render({"imagined": 1, "SCHEMA_INVALID": 2}) == "3 (SCHEMA_INVALID 2, imagined 1)"
    row = CellSummary("parallel-4", "parallel", 4, vetoes={"imagined": 1, "SCHEMA_INVALID": 2})
    assert _vetoes(row) == "3 (SCHEMA_INVALID 2, imagined 1)"


def test_chat_trace_top_and_metrics_agree(stack: Stack) -> None:
    """A rehearsal with a schema veto is counted the same by every view of it."""
    before = _metric_kinds(stack)
    task = stack.world.tasks[6].instruction
    chat = _cli(stack, "chat", task, "--world", "retail", "--seed", "4", "--show-trace",
                "--commit", "select", "--no-execute")  # fmt: skip
    assert chat.returncode == 0, chat.stderr
    found = re.search(r"rehearsal (rh_\w+):.* vetoes (.+?), early exit", chat.stdout)
    assert found is not None, chat.stdout
    rehearsal_id, chat_says = found.groups()
    shown_vetoes = chat.stdout.count("[VETO]")
    trace = _cli(stack, "trace", rehearsal_id, "--json")
    stored = json.loads(trace.stdout)

    kinds = vetoes.from_trace(stored)
    assert sum(kinds.values()) == shown_vetoes > 0
    assert vetoes.from_summary(stored) == kinds  # the trace holds the summary's counts too
    assert chat_says == vetoes.render(kinds)
    shown = _cli(stack, "trace", rehearsal_id)
    assert f"vetoes {vetoes.render(kinds)}," in shown.stdout
    after = _metric_kinds(stack)
    assert {k: after.get(k, 0) - before.get(k, 0) for k in after if after[k] != before.get(k)} == (
        kinds
    )
    page = httpx.get(stack.gateway.url + "/metrics", timeout=10).text
    assert top_frame.build_frame(stack.gateway.url, top_frame.parse_snapshot(page)).vetoes == after
