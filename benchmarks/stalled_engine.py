"""An engine that passes ``/health`` but answers no call: how long do the calls waiting on it wait?

Starts two engine twins, a chaos proxy in front of the first that forwards the probes and
swallows every other call (``swallow``, ``tests/support/chaos.py``), and a gateway per case:

- ``alone``: the wedged engine only; every call should get a clear error;
- ``beside``: the wedged engine and a healthy one; every call should be answered.

Each case runs twice, with canaries off (``RGW_ENGINE_STALL_AFTER_S=0``) and with the settings
given (the defaults unless ``--stall-after`` / ``--canary-timeout`` say otherwise), and sends
``--requests`` (8) requests at once, half of them streamed, each with its own session so they
spread over both engines. It prints, per run, how each request ended (``answered``, ``error``
with its code, or ``waiting`` when the client's ``--client-timeout`` (40 s) ran out) and the
median and longest time to that end. Canaries off, the calls on the wedged engine wait for
``RGW_REQUEST_TIMEOUT`` (600 s), so they show as ``waiting``.

    python -m benchmarks.stalled_engine [--requests 8] [--client-timeout 40]

Cost: about ``--client-timeout`` seconds per canary-off case and a few seconds per other one.

``--vllm`` measures instead what keeps a live engine in, on a real vLLM (CPU build, tiny Qwen3,
``make vllm-env``): one 600-token non-streamed generation, ``vllm:generation_tokens_total`` read
from its ``/metrics`` while it runs, and one one-token canary sent a second into it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rehearsal_gateway.server.engines.engine import generated_tokens  # noqa: E402
from tests.support.chaos import ChaosProxy  # noqa: E402
from tests.support.procs import Proc, cli_argv, free_port, start_http_server  # noqa: E402
from tests.support.vllm import SERVED_MODEL_NAME, start_vllm  # noqa: E402

MODEL = "EnvACE-Qwen3-8B"


def start(argv: list[str], workdir: Path, name: str, env: dict[str, str] | None = None) -> Proc:
    port = free_port()
    return start_http_server(
        cli_argv(*argv, "--port", str(port)), port=port, log_path=workdir / f"{name}.log", env=env
    )


async def one(client: httpx.AsyncClient, i: int, wait_s: float) -> tuple[str, float]:
    """(how request ``i`` ended, seconds to that end)."""
    body = {
        "model": MODEL, "max_tokens": 24, "stream": i % 2 == 1,
        "messages": [{"role": "user", "content": f"stalled engine probe {i}"}],
    }  # fmt: skip
    started = time.monotonic()
    try:
        response = await client.post(
            "/v1/chat/completions", json=body, headers={"x-session-id": f"s{i}"}, timeout=wait_s
        )
    except httpx.TimeoutException:
        return "waiting", time.monotonic() - started
    seconds = time.monotonic() - started
    if response.status_code != 200:
        return f"error {response.status_code}", seconds
    if i % 2 == 1 and b'"error"' in response.content:
        return "error (stream)", seconds
    return "answered", seconds


async def drive(url: str, requests: int, wait_s: float) -> list[tuple[str, float]]:
    async with httpx.AsyncClient(base_url=url) as client:
        return await asyncio.gather(*(one(client, i, wait_s) for i in range(requests)))


def run_case(
    workdir: Path,
    engines: list[str],
    env: dict[str, str],
    proxy: ChaosProxy,
    args: argparse.Namespace,
) -> str:
    proxy.set("pass")
    engine_args = [arg for url in engines for arg in ("--engine", url)]
    gateway = start(["serve", *engine_args], workdir, "gateway", env=env)
    try:
        proxy.set("swallow")
        outcomes = asyncio.run(drive(gateway.url, args.requests, args.client_timeout))
    finally:
        gateway.stop()
    ends = Counter(end for end, _ in outcomes)
    seconds = [s for _, s in outcomes]
    summary = ", ".join(f"{count} {end}" for end, count in sorted(ends.items()))
    return f"{summary}; median {statistics.median(seconds):.1f} s, longest {max(seconds):.1f} s"


async def on_vllm(workdir: Path) -> None:
    """The generation counter during one long whole answer, and a canary answered beside it."""
    engine = start_vllm(workdir / "vllm.log")
    try:
        async with httpx.AsyncClient(base_url=engine.url, timeout=300) as client:
            long = {
                "model": SERVED_MODEL_NAME, "max_tokens": 600, "ignore_eos": True,
                "temperature": 0, "messages": [{"role": "user", "content": "Count to 1000."}],
            }  # fmt: skip
            canary = {
                "model": SERVED_MODEL_NAME, "max_tokens": 1, "temperature": 0,
                "messages": [{"role": "user", "content": "Reply with OK."}],
            }  # fmt: skip
            started = time.monotonic()
            call = asyncio.create_task(client.post("/v1/chat/completions", json=long))
            samples: list[str] = []
            answered = ""
            while not call.done():
                exposition = (await client.get("/metrics")).text
                at = time.monotonic() - started
                samples.append(f"{at:.2f} s: {generated_tokens(exposition) or 0:.0f}")
                if not answered and at > 1.0:
                    sent = time.monotonic()
                    reply = await client.post("/v1/chat/completions", json=canary)
                    answered = f"{reply.status_code} in {time.monotonic() - sent:.3f} s"
                    answered += f", sent {sent - started:.2f} s into the generation"
                await asyncio.sleep(0.25)
            usage = (await call).json()["usage"]
            print(f"generation: {usage['completion_tokens']} tokens in "
                  f"{time.monotonic() - started:.2f} s")  # fmt: skip
            print("vllm:generation_tokens_total meanwhile:", "; ".join(samples))
            print("canary:", answered or "not sent (the generation ended within a second)")
    finally:
        engine.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--client-timeout", type=float, default=40.0)
    parser.add_argument("--stall-after", type=float, default=None)
    parser.add_argument("--canary-timeout", type=float, default=None)
    parser.add_argument("--vllm", action="store_true", help="the counter and a canary on vLLM")
    args = parser.parse_args()
    if args.vllm:
        with tempfile.TemporaryDirectory(prefix="rgw-stalled-") as tmp:
            asyncio.run(on_vllm(Path(tmp)))
        return
    canary: dict[str, str] = {}
    if args.stall_after is not None:
        canary["RGW_ENGINE_STALL_AFTER_S"] = str(args.stall_after)
    if args.canary_timeout is not None:
        canary["RGW_ENGINE_CANARY_TIMEOUT_S"] = str(args.canary_timeout)
    with tempfile.TemporaryDirectory(prefix="rgw-stalled-") as tmp:
        workdir = Path(tmp)
        wedged_twin = start(["twin", "--seed", "1"], workdir, "twin-wedged")
        healthy = start(["twin", "--seed", "1"], workdir, "twin-healthy")
        proxy = ChaosProxy(upstream_port=wedged_twin.port).start()
        try:
            wedged = f"{proxy.url}/v1,name=wedged"
            cases = {"alone": [wedged], "beside": [wedged, healthy.url + "/v1,name=healthy"]}
            runs = (("canaries off", {"RGW_ENGINE_STALL_AFTER_S": "0"}), ("canaries on", canary))
            for name, engines in cases.items():
                for label, env in runs:
                    line = run_case(workdir, engines, env, proxy, args)
                    print(f"{name:>6} | {label:<12} | {line}", flush=True)
        finally:
            proxy.stop()
            healthy.stop()
            wedged_twin.stop()


if __name__ == "__main__":
    main()
