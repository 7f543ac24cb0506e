"""A gateway served in this process: uvicorn in a thread, on a free loopback port.

The app is the real one (``create_app`` with its lifespan, settings read exactly as ``serve``
reads its flags and ``RGW_*`` variables) and clients reach it over real HTTP, so a test cannot
tell it from a ``serve`` process — except that its code runs under this process's coverage. Tests
that need a process of their own (signals, several workers, uvicorn's logging) start one with
``tests.support.procs`` instead.
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI

from rehearsal_gateway.server.app import create_app
from rehearsal_gateway.server.engines.transport import EngineTransport
from rehearsal_gateway.server.launcher import serve
from rehearsal_gateway.server.telemetry.logs import REQUEST_LOGGER, JsonFormatter
from tests.support.procs import free_port

_ENV_LOCK = threading.Lock()


@contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    """``env`` on top of this process's environment, restored afterwards."""
    with _ENV_LOCK:
        saved = dict(os.environ)
        os.environ.update(env)
        try:
            yield
        finally:
            os.environ.clear()
            os.environ.update(saved)


@dataclass
class InProcessGateway:
    """A running in-process gateway and the URL it answers on (``Proc``'s shape)."""

    server: uvicorn.Server
    thread: threading.Thread
    url: str
    port: int
    log_path: Path
    handler: logging.Handler
    argv: list[str] = field(default_factory=list)

    def log(self) -> str:
        """The request log lines (JSON) this gateway wrote."""
        self.handler.flush()
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 15.0) -> None:
        # Also when the thread has already ended (a failed start, a second stop): the request
        # log's handler, and its open file, must still leave the process-wide logger.
        self.server.should_exit = True
        self.thread.join(timeout)
        logging.getLogger(REQUEST_LOGGER).removeHandler(self.handler)
        self.handler.close()
        if self.thread.is_alive():
            raise RuntimeError(f"the in-process gateway on port {self.port} did not stop")

    kill = stop


def start_gateway(
    args: Sequence[str],
    *,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    uvicorn_options: Mapping[str, Any] | None = None,
    prepare_app: Callable[[FastAPI], None] | None = None,
    engine_transport: EngineTransport | None = None,
) -> InProcessGateway:
    """Serve ``rehearsal-gateway serve ARGS`` (no ``--port``: a free one is picked) in a thread.

    ``uvicorn_options`` override what ``serve`` gives uvicorn (say, its stock ``http`` protocol);
    ``prepare_app`` is called with the app before it starts (say, to add a middleware);
    ``engine_transport`` replaces the network to the engines (``server/engines/testing.py``).
    """
    parser = argparse.ArgumentParser(prog="rehearsal-gateway")
    serve.register(parser.add_subparsers(dest="command", required=True))
    port = free_port()
    parsed = parser.parse_args(["serve", "--port", str(port), *args])
    with _environment(env or {}):
        settings = serve.settings_from_args(parsed)
        app = create_app(settings, engine_transport=engine_transport)
    if prepare_app is not None:
        prepare_app(app)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(log_path)
    handler.setFormatter(JsonFormatter())
    request_log = logging.getLogger(REQUEST_LOGGER)
    request_log.addHandler(handler)
    request_log.setLevel(logging.INFO)
    options = {
        **serve.uvicorn_options(settings),
        "timeout_graceful_shutdown": 10,
        **(uvicorn_options or {}),
    }
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_config=None, log_level="warning",
        access_log=False, lifespan="on", **options,
    )  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"gateway-{port}", daemon=True)
    thread.start()
    gateway = InProcessGateway(
        server, thread, f"http://127.0.0.1:{port}", port, log_path, handler, list(args)
    )
    _wait_started(gateway, timeout=30.0)
    return gateway


def _wait_started(gateway: InProcessGateway, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not gateway.thread.is_alive():
            gateway.stop()
            raise RuntimeError(f"the in-process gateway {gateway.argv} exited while starting")
        if gateway.server.started:
            try:
                if httpx.get(gateway.url + "/health", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
        time.sleep(0.02)
    gateway.stop()
    raise RuntimeError(f"the in-process gateway {gateway.argv} did not start in {timeout}s")
