# Sourced by the project's scripts: make sure a Redis server answers on 127.0.0.1:6379.
# If none answers we start one (installing Debian's redis-server when it is missing) and
# record its pid, so that the caller can stop exactly what it started.
REDIS_PORT="${REDIS_PORT:-6379}"
REDIS_STARTED_PID=""

redis_answers() {
    timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/${REDIS_PORT} && printf 'PING\r\n' >&3 && head -c 5 <&3" 2>/dev/null | grep -q PONG
}

ensure_redis() {
    if redis_answers; then
        echo "redis: using the server already answering on 127.0.0.1:${REDIS_PORT}"
        return 0
    fi
    if ! command -v redis-server >/dev/null 2>&1; then
        echo "redis: redis-server is missing; installing Debian's redis-server package"
        if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q redis-server >/dev/null 2>&1 \
            || { $SUDO apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q redis-server >/dev/null; } \
            || { echo "redis: could not install redis-server" >&2; return 1; }
    fi
    mkdir -p .cache/redis
    redis-server --daemonize yes --bind 127.0.0.1 --port "${REDIS_PORT}" --save "" --appendonly no \
        --dir "$PWD/.cache/redis" --pidfile "$PWD/.cache/redis/redis.pid" \
        --logfile "$PWD/.cache/redis/redis.log" || return 1
    for _ in $(seq 1 50); do
        redis_answers && break
        sleep 0.1
    done
    redis_answers || { echo "redis: started but not answering" >&2; return 1; }
    REDIS_STARTED_PID="$(cat .cache/redis/redis.pid)"
    echo "redis: started redis-server (pid ${REDIS_STARTED_PID}) on 127.0.0.1:${REDIS_PORT}"
}

stop_redis_if_started() {
    if [ -n "${REDIS_STARTED_PID}" ]; then
        kill "${REDIS_STARTED_PID}" 2>/dev/null || true
        echo "redis: stopped the server this script started"
        REDIS_STARTED_PID=""
    fi
}
