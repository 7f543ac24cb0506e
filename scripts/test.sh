#!/usr/bin/env bash
# The test command behind `make test`: Redis up (started and stopped here if needed), then pytest.
# With no arguments it runs the pure core's suite first under a 100% branch-coverage gate, then
# everything else with server/'s coverage measured (floor 90%). pytest's exit 5 ("no tests
# collected") is a failure: an empty run proves nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/redis.sh
source scripts/redis.sh
ensure_redis || exit 1
trap stop_redis_if_started EXIT

run_pytest() {
    .venv/bin/python -m pytest "$@"
    local rc=$?
    if [ "$rc" -eq 5 ]; then
        echo "pytest collected no tests: treating as a failure" >&2
        rc=1
    fi
    return "$rc"
}

if [ "$#" -gt 0 ]; then
    run_pytest "$@"
    exit $?
fi

echo "== rehearsal/ core, 100% branch coverage required =="
run_pytest tests/rehearsal -q --cov=rehearsal_gateway.rehearsal --cov-branch --cov-report=term-missing:skip-covered \
    --cov-fail-under=100 || exit 1
echo "== everything else, server/ coverage at least 90% (in-process gateways and processes alike) =="
run_pytest --ignore=tests/rehearsal --cov=rehearsal_gateway.server --cov-report=term-missing:skip-covered \
    --cov-fail-under=90
