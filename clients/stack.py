"""A local engine twin and gateway for the client commands that start their own (demo, eval).

``children()`` owns every process started through ``spawn()`` and stops them (with their process
groups) however the command ends; ``wait_ready()`` polls a health URL while watching the child;
``store_settings()`` gives the gateway Redis under a key prefix of the run's own (dropped after),
or the in-process store when no Redis answers.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from rehearsal_gateway.server.launcher.processes import free_ports, stop_process_groups

STOP_GRACE_S = 5.0  # how long each child gets to stop before it is killed
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"


@dataclass
class Child:
    """One started process and the file its output goes to."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self, chars: int = 1500) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


@contextlib.contextmanager
def children() -> Iterator[list[Child]]:
    """Every process started into the yielded list, stopped with their groups at the end.

    All are asked to stop at once and given one shared grace period, so a command interrupted
    mid-run (requests still in flight) is gone within seconds; stragglers are killed.
    """
    started: list[Child] = []
    try:
        yield started
    finally:
        stop_process_groups([child.popen for child in reversed(started)], STOP_GRACE_S)


def spawn(
    started: list[Child], name: str, argv: list[str], workdir: Path, env: dict[str, str]
) -> Child:
    """Start ``argv`` in its own session, its output in ``workdir/<name>.log``."""
    log = workdir / f"{name}.log"
    with log.open("wb") as sink:
        popen = subprocess.Popen(
            argv,
            env={**os.environ, **env},
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    child = Child(name, popen, log)
    started.append(child)
    return child


def add_port_options(parser: argparse.ArgumentParser) -> None:
    """``--port`` and ``--twin-port`` of a command that starts its own gateway and twin."""
    parser.add_argument(
        "--port", type=int, default=0, help="the gateway's port (default: a free one)"
    )
    parser.add_argument(
        "--twin-port", type=int, default=0, help="the engine twin's port (default: a free one)"
    )


def chosen_ports(args: argparse.Namespace) -> tuple[int, int]:
    """(twin, gateway) ports: the ones asked for, free ones for the rest."""
    twin, gateway = free_ports(2)
    return args.twin_port or twin, args.port or gateway


def wait_ready(child: Child, url: str, timeout: float = 30.0) -> None:
    """Return once ``url`` answers 200; raise if the child exits or the time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.popen.poll() is not None:
            raise RuntimeError(f"{child.name} exited early:\n{child.tail(2000)}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{child.name} did not become ready at {url}")


def redis_url(choice: str) -> str | None:
    """The Redis the gateway should use: ``auto`` means the local one, when it answers."""
    if choice == "none":
        return None
    if choice != "auto":
        return choice
    import redis

    client = redis.Redis.from_url(DEFAULT_REDIS, socket_timeout=0.5, socket_connect_timeout=0.5)
    try:
        return DEFAULT_REDIS if client.ping() else None
    except redis.RedisError:
        return None
    finally:
        client.close()


@contextlib.contextmanager
def store_settings(choice: str, label: str) -> Iterator[dict[str, str]]:
    """The gateway's store settings; a Redis prefix of this run's own, dropped afterwards."""
    url = redis_url(choice)
    if url is None:
        yield {}
        return
    import redis

    prefix = f"rgw-{label}-{uuid.uuid4().hex[:12]}:"
    try:
        yield {"RGW_REDIS_URL": url, "RGW_REDIS_PREFIX": prefix}
    finally:
        client = redis.Redis.from_url(url, socket_timeout=2)
        # If Redis went away meanwhile, nothing is lost: every key carries a TTL
        # (server/store/keys.py).
        with contextlib.suppress(redis.RedisError), contextlib.closing(client):
            for key in client.scan_iter(match=prefix + "*"):
                client.delete(key)
