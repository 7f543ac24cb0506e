"""`rehearsal-gateway chat` and `trace` as a user runs them, against a live gateway + twin."""

from __future__ import annotations

import re
import subprocess

from rehearsal_gateway.clients.cli import build_parser
from tests.clients.conftest import API_KEY
from tests.server.rehearsal_support import Stack
from tests.support.procs import ROOT, cli_argv


def _cli(stack: Stack, *args: str, key: str = API_KEY) -> subprocess.CompletedProcess[str]:
    argv = cli_argv(*args, "--url", stack.gateway.url, "--api-key", key)
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)


def test_help_lists_the_client_commands() -> None:
    """The top-level parser offers chat, trace and demo next to serve and twin."""
    choices = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert {"chat", "trace", "demo", "serve", "twin", "top"} <= set(choices)


def test_chat_one_shot_then_trace(stack: Stack) -> None:
    """chat shows the committed call and the imagined trajectories; trace prints that id."""
    task = stack.world.tasks[6].instruction
    # select walks every sampled action, so the trace shows the vetoed ones too (anchored, the
    # default, stops at a clean anchor).
    chat = _cli(stack, "chat", task, "--world", "retail", "--seed", "4", "--show-trace",
                "--commit", "select", "--no-execute")  # fmt: skip
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout.startswith("committed: get_order(")
    assert "VETO" in chat.stdout or "error" in chat.stdout
    rehearsal_id = re.search(r"rehearsal (rh_\w+):", chat.stdout)
    assert rehearsal_id is not None
    shown = _cli(stack, "trace", rehearsal_id.group(1))
    assert shown.returncode == 0, shown.stderr
    assert "candidates (sampled actions):" in shown.stdout
    assert "imagined trajectories:" in shown.stdout
    assert "committed: get_order(" in shown.stdout
    assert "why: " in shown.stdout


def test_chat_follows_calls_to_an_answer(stack: Stack) -> None:
    """Without --no-execute, chat runs each committed call on the world until a text answer."""
    chat = _cli(stack, "chat", stack.world.tasks[0].instruction, "--world", "retail", "--seed", "1")
    assert chat.returncode == 0, chat.stderr
    assert "real result: " in chat.stdout
    assert chat.stdout.rstrip().splitlines()[-2].startswith("committed: answer: ")


def test_trace_unknown_id_fails_clearly(stack: Stack) -> None:
    """An unknown id prints why on stderr and exits 1, with nothing on stdout."""
    shown = _cli(stack, "trace", "rh_000000000000000000000000")
    assert shown.returncode == 1
    assert shown.stdout == ""
    assert "no rehearsal 'rh_000000000000000000000000'" in shown.stderr


def test_chat_wrong_key_fails_clearly(stack: Stack) -> None:
    """A refused key is one line on stderr and exit 1, not a traceback."""
    chat = _cli(stack, "chat", "hello", key="wrong-key")
    assert chat.returncode == 1
    assert chat.stderr.startswith("rehearsal-gateway chat: AuthenticationFailed")


def test_url_with_or_without_v1(stack: Stack) -> None:
    """``--url`` takes the gateway's URL as the SDKs do (``…/v1``) as well as without it."""
    chat = _cli(stack, "chat", stack.world.tasks[6].instruction, "--world", "retail",
                "--seed", "4", "--no-execute", "--url", stack.gateway.url + "/v1/")  # fmt: skip
    assert chat.returncode == 0, chat.stderr
    rehearsal_id = re.search(r"rehearsal (rh_\w+):", chat.stdout)
    assert rehearsal_id is not None
    shown = _cli(stack, "trace", rehearsal_id.group(1), "--url", stack.gateway.url + "/v1")
    assert shown.returncode == 0, shown.stderr
    assert "committed: get_order(" in shown.stdout


def test_trace_into_a_closed_pipe_is_quiet(stack: Stack) -> None:
    """``trace ID | head`` whose reader is gone leaves no traceback on stderr."""
    chat = _cli(stack, "chat", stack.world.tasks[6].instruction, "--world", "retail",
                "--seed", "4", "--no-execute")  # fmt: skip
    rehearsal_id = re.search(r"rehearsal (rh_\w+):", chat.stdout)
    assert rehearsal_id is not None
    argv = cli_argv("trace", rehearsal_id.group(1), "--json", "--url", stack.gateway.url,
                    "--api-key", API_KEY)  # fmt: skip
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert proc.stderr is not None
        proc.stdout.close()  # the reader leaves before the trace is printed
        stderr = proc.stderr.read().decode()
        proc.stderr.close()
        assert proc.wait(timeout=60) == 141
    finally:  # never left running, however the checks above end
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert stderr == ""


def test_the_quickstart_sentence_is_done_as_asked(stack: Stack) -> None:
    """docs/quickstart.md's sentence: its order is looked up, then cancelled, then answered."""
    chat = _cli(stack, "chat", "Please cancel order W1002, I no longer need it.", "--world",
                "retail", "--seed", "4")  # fmt: skip
    assert chat.returncode == 0, chat.stderr
    committed = [line for line in chat.stdout.splitlines() if line.startswith("committed: ")]
    assert committed[0] == 'committed: get_order({"order_id": "W1002"})'
    assert any(
        'cancel_order({"order_id": "W1002", "reason": "no_longer_needed"})' in line
        for line in committed
    )
    assert committed[-1].startswith("committed: answer: ")
