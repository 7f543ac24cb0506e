#!/usr/bin/env bash
# The test command behind `make test`: Redis up (started and stopped here if needed), then pytest.
# pytest's exit 5 ("no tests collected") is a failure: an empty run proves nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/redis.sh
source scripts/redis.sh
ensure_redis || exit 1
trap stop_redis_if_started EXIT

.venv/bin/python -m pytest "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
    echo "pytest collected no tests: treating as a failure" >&2
    rc=1
fi
exit "$rc"
