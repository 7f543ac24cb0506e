"""Logs an operator can read: settings as one masked JSON line, refusals with code and param."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.server.conftest import TWIN_MODEL
from tests.support.procs import ROOT, Proc, cli_argv, free_port, start_http_server

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def _lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_serve_logs_its_settings_as_one_masked_json_line(tmp_path: Path) -> None:
    """Every line serve writes is JSON; the settings are one of them, with no secret in clear."""
    port = free_port()
    proc = start_http_server(
        cli_argv("serve", "--port", str(port), "--engine", f"http://127.0.0.1:{free_port()}/v1"),
        port=port, log_path=tmp_path / "serve.log",
        env={"RGW_API_KEYS": "sk-very-secret", "RGW_REDIS_URL": "redis://u:hunter2@127.0.0.1:1/0"},
    )  # fmt: skip
    proc.stop()
    log = proc.log()
    lines = _lines(log)  # raises if any line is not JSON
    settings = [line for line in lines if line["msg"] == "settings"]
    assert len(settings) == 1
    assert settings[0]["settings"]["api_keys"] == ["********"]
    assert settings[0]["settings"]["redis_url"] == "redis://u:********@127.0.0.1:1/0"
    assert "sk-very-secret" not in log
    assert "hunter2" not in log


def test_a_refused_request_logs_its_error_code_and_param(
    start_gateway: Callable[..., Proc], start_twin: Callable[..., Proc]
) -> None:
    """The 400's log line names the error's type, code and param, not only the status."""
    gateway = start_gateway(start_twin().url + "/v1", env={"RGW_API_KEYS": "k"})
    body = {"model": TWIN_MODEL, "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS,
            "rehearsal": {"mode": "parallel", "budget": 99}}  # fmt: skip
    headers = {"Authorization": "Bearer k", "X-Request-Id": "refused-1"}
    refused = httpx.post(
        gateway.url + "/v1/chat/completions", json=body, timeout=30, headers=headers
    )
    assert refused.status_code == 400
    keyless = httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=30,
                         headers={"X-Request-Id": "keyless-1"})  # fmt: skip
    assert keyless.status_code == 401
    lines = {line.get("request_id"): line for line in _lines(gateway.log())}
    error = lines["refused-1"]["error"]
    assert lines["refused-1"]["status"] == 400
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "rehearsal.budget"
    assert "must be between 0 and 8" in error["message"]
    assert lines["keyless-1"]["error"]["code"] == "invalid_api_key"
    assert lines["keyless-1"]["error"]["message"].startswith("missing API key")


def test_cli_without_a_key_says_the_key_is_missing(
    start_gateway: Callable[..., Proc], start_twin: Callable[..., Proc]
) -> None:
    """`chat` with no key against a gateway that wants one says "missing", not "invalid"."""
    gateway = start_gateway(start_twin().url + "/v1", env={"RGW_API_KEYS": "k"})
    env = {k: v for k, v in os.environ.items() if k != "RGW_API_KEY"}
    argv = cli_argv("chat", "hello", "--url", gateway.url)
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.startswith("rehearsal-gateway chat: AuthenticationFailed: missing API key")
    wrong = subprocess.run([*argv, "--api-key", "nope"], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=60, check=False)  # fmt: skip
    assert "invalid API key" in wrong.stderr
