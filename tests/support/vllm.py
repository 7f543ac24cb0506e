"""Run a real vLLM (the CPU build) on loopback, for tests and benchmarks.

Two models: a tiny random Qwen3 (``start_vllm``: wire shapes) and the real
Qwen2.5-Coder-0.5B-Instruct (``start_real_vllm``: behaviour, docs/real-model.md). `make vllm-env`
(scripts/vllm_env.sh) builds the separate ``.venv-vllm`` and ``.cache/tiny-qwen3``, `make
real-model` the real checkpoint; this module only starts and stops the server. The tiny model's
flags are those a production deployment for EnvACE-Qwen3 uses (hermes tool parser, qwen3
reasoning parser, cached token counts in usage), so the wire format the tests see is the one the
gateway will see.

A missing environment is an error, not a skip: a suite that silently skips its real-engine half
would let the engine twin drift from vLLM unnoticed. The real model's 2.4 GB checkpoint is the one
exception (its suite skips, naming `make real-model`), because `make test` builds it first.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tests.support.procs import ROOT, Proc, free_port, start_http_server

VLLM_VENV = ROOT / ".venv-vllm"
VLLM_BIN = VLLM_VENV / "bin" / "vllm"
TINY_QWEN3_DIR = ROOT / ".cache" / "tiny-qwen3"
SERVED_MODEL_NAME = "tiny-qwen3"
MAX_MODEL_LEN = 2048
# Cold start measured at 25-33 s on an idle 2-core machine; leave room for a busy one.
START_TIMEOUT_S = 240.0

VLLM_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB; the default would reserve far more than a test needs
    "VLLM_HOST_IP": "127.0.0.1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    # Our .venv's settings must not leak into the other interpreter.
    "PYTHONPATH": "",
    "VIRTUAL_ENV": str(VLLM_VENV),
}


class VllmEnvMissing(RuntimeError):
    """The vLLM environment or the tiny model has not been built on this machine."""


class RealModelMissing(VllmEnvMissing):
    """The real model's checkpoint has not been built on this machine."""


def check_vllm_env() -> None:
    """Raise `VllmEnvMissing`, naming the fix, unless the environment and model are in place."""
    missing = [
        str(path.relative_to(ROOT))
        for path in (VLLM_BIN, VLLM_VENV / ".vllm-env-stamp", TINY_QWEN3_DIR / "config.json")
        if not path.exists()
    ]
    if missing:
        raise VllmEnvMissing(
            "the real-vLLM tests need the vLLM CPU environment, and "
            + ", ".join(missing)
            + " is missing: run `make vllm-env` (about 70 s once, then cached)"
        )


def vllm_argv(port: int, *extra: str) -> list[str]:
    """The `vllm serve` command line for the tiny model on ``port``, plus ``extra`` flags."""
    return [
        str(VLLM_BIN),
        "serve",
        str(TINY_QWEN3_DIR),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--served-model-name",
        SERVED_MODEL_NAME,
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--reasoning-parser",
        "qwen3",
        "--enable-prompt-tokens-details",
        "--enforce-eager",  # skips graph capture: starts in ~30 s instead of ~50 s
        "--max-model-len",
        str(MAX_MODEL_LEN),
        "--dtype",
        "bfloat16",
        "--seed",
        "0",
        *extra,
    ]


def start_vllm(log_path: Path, extra_args: Sequence[str] = ()) -> Proc:
    """Start a real vLLM server on a free loopback port and wait for ``/health``.

    The caller owns the returned process and must ``stop()`` it; it uses ~2.5 GB of memory, so
    run one at a time. ``log_path`` receives the server's whole output (shown on a failed start).
    """
    check_vllm_env()
    port = free_port()
    return start_http_server(
        vllm_argv(port, *extra_args),
        port=port,
        log_path=log_path,
        env=VLLM_ENV,
        timeout=START_TIMEOUT_S,
    )


REAL_MODEL_DIR = ROOT / ".cache" / "real-qwen2.5-coder-0.5b"
REAL_MODEL_NAME = "qwen2.5-coder-0.5b"
REAL_MAX_MODEL_LEN = 4096
BARE_JSON_PLUGIN = ROOT / "tests" / "vllm" / "bare_json_tool_parser.py"
# Loading 2.4 GB of fp32 weights comes on top of the tiny model's cold start.
REAL_START_TIMEOUT_S = 480.0

REAL_VLLM_ENV = {
    **VLLM_ENV,
    # A long prefill on a busy 2-core machine outlives vLLM's default execute timeout, and the
    # engine dies with it (docs/real-model.md): the timeout must cover the slowest step.
    "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "600",
    # The tool-parser plugin imports its pure half as `tests.vllm.bare_json`.
    "PYTHONPATH": str(ROOT),
}


def check_real_model() -> None:
    """Raise `RealModelMissing`, naming the fix, unless the real checkpoint is in place."""
    check_vllm_env()
    if not (REAL_MODEL_DIR / ".real-model-stamp").exists():
        raise RealModelMissing(
            f"the real-model tests need {REAL_MODEL_DIR.relative_to(ROOT)}: run `make real-model`"
            " (about 3 minutes once, then cached)"
        )


def real_vllm_argv(port: int, *extra: str) -> list[str]:
    """The `vllm serve` command line for the real model on ``port``, plus ``extra`` flags.

    fp32, because bf16 is far slower on an AVX2 CPU; the ``bare_json`` tool parser, because the
    model writes its calls as bare or fenced JSON (tests/vllm/bare_json_tool_parser.py); no
    reasoning parser, because the model writes no ``<think>``.
    """
    return [
        str(VLLM_BIN),
        "serve",
        str(REAL_MODEL_DIR),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--served-model-name",
        REAL_MODEL_NAME,
        "--enable-auto-tool-choice",
        "--tool-parser-plugin",
        str(BARE_JSON_PLUGIN),
        "--tool-call-parser",
        "bare_json",
        "--enable-prompt-tokens-details",
        "--enforce-eager",
        "--max-model-len",
        str(REAL_MAX_MODEL_LEN),
        "--dtype",
        "float32",
        "--seed",
        "0",
        *extra,
    ]


def start_real_vllm(log_path: Path, extra_args: Sequence[str] = ()) -> Proc:
    """Start vLLM serving the real model on a free loopback port and wait for ``/health``.

    Like `start_vllm`, the caller owns the process (~5 GB of memory: run one at a time).
    """
    check_real_model()
    port = free_port()
    return start_http_server(
        real_vllm_argv(port, *extra_args),
        port=port,
        log_path=log_path,
        env=REAL_VLLM_ENV,
        timeout=REAL_START_TIMEOUT_S,
    )
