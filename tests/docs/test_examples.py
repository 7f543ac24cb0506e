"""Every code example in the README and the task docs runs against a live twin + gateway.

Fenced blocks carry a tag after the language: ``runnable`` (executed; ``127.0.0.1:8000`` is
rewritten to the live gateway, ``127.0.0.1:8100`` to its engine), ``server`` (a long-running
``rehearsal-gateway`` command: started on free ports, must answer ``/health``, then stopped),
``make`` (a Makefile target that must exist; ``make demo`` itself runs in
tests/clients/test_demo.py), ``vllm`` (needs a GPU and the weights: its flags are checked against
the ones the gateway relies on, not executed) or ``real-vllm`` (the real model's serve command: its
flags are those tests/support/vllm.py serves it with, so what the page says is what the
real-model suite runs).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.rehearsal_support import Stack, running_stack
from tests.support.procs import ROOT, free_port, start_http_server
from tests.support.vllm import real_vllm_argv

PAGES = [
    "README.md",
    "docs/quickstart.md",
    "docs/rehearsal-knobs.md",
    "docs/configuration.md",
    "docs/serving-envace-vllm.md",
    "docs/limits.md",
    "docs/evaluation.md",
    "docs/real-model.md",
]
FENCE = re.compile(r"^```(python|bash)([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
TAGS = {"runnable", "server", "make", "vllm", "real-vllm"}
VLLM_FLAGS = (
    "--enable-auto-tool-choice",
    "--tool-call-parser hermes",
    "--reasoning-parser qwen3",
    "--enable-prefix-caching",
    "--max-model-len",
)


def _blocks() -> list[tuple[str, str, str, str]]:
    """(id, language, tag, code) of every fenced python/bash block of PAGES."""
    found = []
    for page in PAGES:
        text = (ROOT / page).read_text()
        for number, match in enumerate(FENCE.finditer(text), start=1):
            language, tag, code = match.group(1), match.group(2).strip(), match.group(3)
            found.append((f"{page}#{number}", language, tag, code))
    return found


BLOCKS = _blocks()


def _params(tag: str) -> list[object]:
    return [pytest.param(lang, code, id=ident) for ident, lang, t, code in BLOCKS if t == tag]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A retail twin behind a gateway with no API keys and one model-name switch, as the docs'
    examples assume."""
    env = {"RGW_MODEL_SWITCH": "parallel-4"}
    with running_stack(
        tmp_path_factory.mktemp("docs"), twin_args=("--skill", "0.6"), env=env
    ) as running:
        yield running


def _env() -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def test_every_block_is_tagged() -> None:
    """No example escapes this suite: each python/bash block says how it is exercised."""
    untagged = [ident for ident, _, tag, _ in BLOCKS if tag not in TAGS]
    assert untagged == []
    assert len(_params("runnable")) >= 5


@pytest.mark.parametrize(("language", "code"), _params("runnable"))
def test_runnable_example(stack: Stack, language: str, code: str) -> None:
    """The example exits 0 against the live gateway and prints something."""
    code = code.replace("http://127.0.0.1:8000", stack.gateway.url)
    code = code.replace("http://127.0.0.1:8100", stack.twin.url)  # the engine (`doctor`)
    shell = ["bash", "-euo", "pipefail", "-c", code]
    argv = [sys.executable, "-c", code] if language == "python" else shell
    env = {**_env(), "RGW_URL": stack.gateway.url}  # what the CLI examples default to
    done = subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip()
    assert "null" not in done.stdout.split()


@pytest.mark.parametrize(("language", "code"), _params("server"))
def test_server_example(tmp_path: Path, language: str, code: str) -> None:
    """The long-running command starts and answers /health on its port."""
    assert language == "bash"
    port = free_port()
    command = " ".join(line.rstrip("\\").strip() for line in code.strip().splitlines())
    command = re.sub(r"--port \d+", f"--port {port}", command)
    proc = start_http_server(
        ["bash", "-c", f"exec env {command}" if "=" in command.split()[0] else f"exec {command}"],
        port=port, log_path=tmp_path / "server.log", env=_env(),
    )  # fmt: skip
    proc.stop()


@pytest.mark.parametrize(("language", "code"), _params("make"))
def test_make_targets_exist(language: str, code: str) -> None:
    """Each `make X` an example names is a target of the Makefile."""
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    named = re.findall(r"^make ([\w-]+)", code, re.MULTILINE)
    assert named
    assert set(named) <= targets


@pytest.mark.parametrize(("language", "code"), _params("vllm"))
def test_vllm_commands_carry_the_flags(language: str, code: str) -> None:
    """Every `vllm serve` line has the parsers and the prefix cache the gateway relies on."""
    commands = [
        " ".join(c.split()) for c in code.replace("\\\n", " ").splitlines() if "vllm serve" in c
    ]
    assert commands
    for command in commands:
        for flag in VLLM_FLAGS:
            assert flag in command


@pytest.mark.parametrize(("language", "code"), _params("real-vllm"))
def test_real_model_command_is_the_suites(language: str, code: str) -> None:
    """The real model's `vllm serve` line carries every flag the real-model suite serves it with."""
    commands = [
        " ".join(c.split()) for c in code.replace("\\\n", " ").splitlines() if "vllm serve" in c
    ]
    assert len(commands) == 1
    words = commands[0].split()
    flags = [arg for arg in real_vllm_argv(8100) if arg.startswith("--")]
    assert flags
    assert [flag for flag in flags if flag not in words] == []
    for flag in ("--tool-call-parser", "--dtype", "--max-model-len"):
        argv = real_vllm_argv(8100)
        assert words[words.index(flag) + 1] == argv[argv.index(flag) + 1]
