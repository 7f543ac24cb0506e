"""The process-owning gateway tunes CPython's collector once started; an embedded one does not.

Each case runs in a fresh interpreter (a freeze is for the whole process), driving the app's
real lifespan through the ASGI lifespan protocol. Its one engine is a port nothing listens on,
so the start-up health checks fail fast and the app starts degraded, as it would.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.procs import ROOT, free_port

PROBE = """
import asyncio, gc, sys
from rehearsal_gateway.server.app import GC_THRESHOLDS, app_from_environment, create_app
from rehearsal_gateway.server.settings import GatewaySettings

async def start_and_stop(app):
    messages = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    seen = {}

    async def receive():
        if messages[0]["type"] == "lifespan.shutdown":
            seen["frozen"] = gc.get_freeze_count()
            seen["thresholds"] = gc.get_threshold()
        return messages.pop(0)

    async def send(message):
        assert not message["type"].endswith("failed"), message

    await app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send)
    return seen

app = app_from_environment() if sys.argv[1] == "serve" else create_app(GatewaySettings())
seen = asyncio.run(start_and_stop(app))
print(seen["frozen"], seen["thresholds"] == GC_THRESHOLDS)
"""


@pytest.mark.parametrize(("how", "tuned"), [("serve", True), ("embedded", False)])
def test_only_the_process_owner_freezes_the_heap(how: str, tuned: bool) -> None:
    env = {"RGW_ENGINES": f"http://127.0.0.1:{free_port()}/v1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, how], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    frozen, thresholds = done.stdout.split()
    if tuned:
        assert int(frozen) > 10_000  # start-up's objects: FastAPI, pydantic, the app itself
        assert thresholds == "True"
    else:
        assert int(frozen) == 0
        assert thresholds == "False"
