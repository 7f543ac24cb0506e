#!/usr/bin/env bash
# The server suite at the declared minimums: a throwaway venv (.venv-minimums) with every runtime
# dependency of pyproject.toml at its lower bound (scripts/minimums.py prints them), their own
# dependencies as pip resolves them, and the pinned test tools; then pytest on the given test
# files, or on MINIMUM_TESTS: the files that start the gateway over real HTTP and drive chat,
# streams, rehearsal and Redis. A lower bound that cannot install or fails here is raised to the
# lowest version that passes; nothing else may claim to be supported.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${MIN_VENV:-.venv-minimums}"
PYTHON="${PYTHON:-python3}"
MINIMUM_TESTS=(
    tests/server/test_chat.py
    tests/server/test_engine_http.py
    tests/server/test_faults.py
    tests/server/test_rehearsal.py
    tests/server/test_store.py
    tests/server/test_relayed.py
    tests/server/test_auth.py
)
if [ ! -f "$VENV/.minimums" ] || [ pyproject.toml -nt "$VENV/.minimums" ]; then
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    # shellcheck disable=SC2046  # one requirement per line, none with spaces
    "$VENV/bin/python" -m pip install -q $("$PYTHON" scripts/minimums.py) \
        $("$PYTHON" scripts/minimums.py --tools)
    "$VENV/bin/python" -m pip install -q --no-deps -e .
    "$VENV/bin/python" -m pip check
    "$PYTHON" scripts/minimums.py > "$VENV/.minimums"
fi
echo "== at the declared minimums =="
"$VENV/bin/python" -m pip list --format=freeze | grep -iE "^($(
    "$PYTHON" scripts/minimums.py | sed -E 's/\[.*\]//; s/==.*//' | paste -sd'|'
))==" || true
# shellcheck source=scripts/redis.sh
source scripts/redis.sh
ensure_redis || exit 1
trap stop_redis_if_started EXIT
if [ "$#" -eq 0 ]; then set -- "${MINIMUM_TESTS[@]}"; fi
# anyio's pytest plugin (anyio comes with httpx and starlette) is not ours to run, and the release
# pip picks beside these minimums imports a name pytest 9 deprecates, an error under our filters.
"$VENV/bin/python" -m pytest -q -p no:cacheprovider -p no:anyio "$@"
