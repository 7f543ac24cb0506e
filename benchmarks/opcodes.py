"""Python opcodes per pass-through request: the gateway's, the Python floor's, other trees'.

CPU time per request on the project's shared 2-core machine moves by ±15% from one round to the
next, so a cut of a few percent cannot be seen in ``benchmarks/overhead.py`` without many
rounds. The number of Python opcodes a request makes the server run barely moves, and it
says where the Python work is. An opcode is not a fixed cost, though: most of a request's CPU
is spent in the C code those opcodes call (allocation, dicts, orjson, pydantic-core, uvloop,
the kernel), none of which is counted here, so a cut of a tenth of the opcodes can be a few
per cent of the CPU. Use the count to find and compare Python work, and confirm every cut as
CPU time (``benchmarks.gateway_cpu --against``).

Each server runs under ``python -m benchmarks.opcodes trace MODULE ARGS...``, which runs MODULE as
``__main__`` (``clients.cli`` or ``uvicorn``) and counts opcodes per function between SIGUSR1
and SIGUSR2 (a ``sys.settrace`` tracer with ``f_trace_opcodes``; the event loop's thread is the
main thread, where signal handlers run), then writes the counts to ``$OPCODES_OUT`` as JSON.
The driver starts the engine twin at zero latency, the gateway, the floor, the bare floor
(``benchmarks/floor_bare.py``: no ASGI server) and the
gateway of each ``--against`` tree, warms each up, and sends ``--requests`` requests one at a time
between the two signals. ``--profile rehearsal`` sends what ``benchmarks.gateway_cpu`` sends
rehearsed (retail world turns, parallel K=4), so the count is per rehearsed request; the floors
only relay those.

    python -m benchmarks.opcodes [--profile small|agent|rehearsal] [--requests 200] [--top 20]
                                 [--against DIR]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import runpy
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def trace(argv: list[str]) -> None:
    """Run ``argv[0]`` as ``__main__`` with ``argv[1:]``, counting opcodes between signals."""
    counts: collections.Counter[str] = collections.Counter()

    def start_frame(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        code = frame.f_code
        key = f"{code.co_filename}::{code.co_qualname}"
        if code.co_filename == "<string>":  # a generated method (dataclasses): name its class
            key += f" of {type(frame.f_locals.get('self')).__qualname__}"

        def local(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "opcode":
                counts[key] += 1
            return local

        return local

    def start(signum: int, frame: object) -> None:
        counts.clear()
        sys.settrace(start_frame)

    def stop(signum: int, frame: object) -> None:
        sys.settrace(None)
        # Written aside, then renamed: the driver reads the file once it exists, and a file
        # that exists must already hold every count (a busy host showed it empty).
        out = Path(os.environ["OPCODES_OUT"])
        partial = out.with_suffix(".partial")
        partial.write_text(json.dumps(counts))
        os.replace(partial, out)

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    if argv[:1] == ["--path"]:  # another source tree's code (``--against``)
        sys.path.insert(0, argv[1])
        argv = argv[2:]
    sys.argv = argv
    runpy.run_module(argv[0], run_name="__main__", alter_sys=True)


def area(filename: str, trees: list[str]) -> str:
    """A function's file as a short area name: the package, our module's folder, or stdlib."""
    if "site-packages/" in filename:
        return filename.split("site-packages/", 1)[1].split("/", 1)[0]
    for root in (str(ROOT), *(str(Path(t).resolve()) for t in trees)):
        if filename.startswith(root + "/"):
            # Our modules run from the one package's links: name them by their folder.
            parts = filename[len(root) + 1 :].removeprefix("rehearsal_gateway/").split("/")
            return "/".join(parts[:2]) if len(parts) > 2 else parts[0]
    return "stdlib " + filename.rsplit("/", 1)[-1]


def measure(args: argparse.Namespace) -> int:
    import asyncio

    sys.path.insert(0, str(ROOT))
    from benchmarks.bodies import build_bodies
    from benchmarks.overhead import run_round
    from tests.support.procs import cli_argv, free_port, start_http_server

    tracer = [sys.executable, "-m", "benchmarks.opcodes", "trace"]
    if args.profile == "rehearsal":
        bodies = rehearsal_bodies()
    else:
        bodies = build_bodies(args.profile, 64, seed=7)
    with tempfile.TemporaryDirectory(prefix="rgw-opcodes-") as tmp:
        work = Path(tmp)
        twin_port = free_port()
        twin = start_http_server(
            cli_argv("twin", "--port", str(twin_port), "--latency", "zero", "--seed", "1"),
            port=twin_port, log_path=work / "twin.log",
        )  # fmt: skip
        fronts: dict[str, tuple[list[str], dict[str, str]]] = {}
        serve = ["serve", "--engine", f"{twin.url}/v1", "--log-level", "warning", "--port"]
        fronts["gateway"] = ([*tracer, "rehearsal_gateway.clients.cli", *serve], {})
        floor = ["uvicorn", "benchmarks.floor_relay:app", "--http", "httptools", "--loop",
                 "uvloop", "--log-level", "warning", "--no-access-log", "--port"]  # fmt: skip
        fronts["python floor"] = ([*tracer, *floor], {"FLOOR_ENGINE": twin.url})
        bare = ["benchmarks.floor_bare", "--port"]  # no ASGI server: httptools and our transport
        fronts["bare floor"] = ([*tracer, *bare], {"FLOOR_ENGINE": twin.url})
        for tree in args.against:
            path = str(Path(tree).resolve())
            fronts[f"gateway at {Path(tree).name}"] = (
                [*tracer, "--path", path, "rehearsal_gateway.clients.cli", *serve],
                {},
            )
        counted: dict[str, collections.Counter[str]] = {}
        try:
            for name, (argv, env) in fronts.items():
                port = free_port()
                out = work / f"{len(counted)}.json"
                proc = start_http_server(
                    [*argv, str(port)], port=port, log_path=work / f"{len(counted)}.log",
                    env={**env, "OPCODES_OUT": str(out)},
                )  # fmt: skip
                try:
                    asyncio.run(run_round(port, 1, bodies, 50))  # warm-up
                    os.kill(proc.popen.pid, signal.SIGUSR1)
                    time.sleep(0.3)
                    got = asyncio.run(run_round(port, 1, bodies, args.requests))
                    os.kill(proc.popen.pid, signal.SIGUSR2)
                    for _ in range(100):
                        if out.exists():
                            break
                        time.sleep(0.1)
                    counted[name] = collections.Counter(json.loads(out.read_text()))
                finally:
                    proc.stop()
                if got.errors:
                    print(f"{name}: {got.errors} of {args.requests} requests failed")
                    return 1
        finally:
            twin.stop()
    report(counted, args)
    return 0


def rehearsal_bodies() -> list[bytes]:
    """What ``benchmarks.gateway_cpu`` sends rehearsed: retail world turns, parallel K=4."""
    import orjson

    from benchmarks.gateway_cpu import MODES
    from benchmarks.rehearsal import world_request
    from rehearsal_gateway.twin.worlds import load_world

    world = load_world("retail")
    return [orjson.dumps(world_request(world, i, i, MODES["parallel K=4"])) for i in range(64)]


def report(counted: dict[str, collections.Counter[str]], args: argparse.Namespace) -> None:
    per = {name: sum(c.values()) / args.requests for name, c in counted.items()}
    floor, gateway = per["python floor"], per["gateway"]
    what = "rehearsed request" if args.profile == "rehearsal" else "pass-through"
    print(f"Python opcodes per {what} ({args.profile} body, {args.requests} requests)")
    print("| front | opcodes per request | × python floor | × gateway |")
    print("|---|---:|---:|---:|")
    for name, value in per.items():
        print(f"| {name} | {value:,.0f} | {value / floor:.2f} | {value / gateway:.2f} |")
    areas: dict[str, collections.Counter[str]] = {}
    for front, counts in counted.items():
        areas[front] = collections.Counter()
        for key, n in counts.items():
            areas[front][area(key.split("::", 1)[0], args.against)] += n
    print(f"\nopcodes per request by area (top {args.top} of the gateway's)")
    print("| area | " + " | ".join(areas) + " |")
    print("|---|" + "---:|" * len(areas))
    for name, _ in areas["gateway"].most_common(args.top):
        cells = " | ".join(f"{c[name] / args.requests:,.0f}" for c in areas.values())
        print(f"| {name} | {cells} |")
    print(f"\nthe gateway's opcodes per request by function (top {args.top})")
    for key, n in counted["gateway"].most_common(args.top):
        filename, function = key.split("::", 1)
        print(f"  {n / args.requests:8,.0f}  {function}  ({area(filename, args.against)})")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["trace"]:
        trace(argv[1:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", choices=["small", "agent", "rehearsal"], default="agent")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument(
        "--against", action="append", default=[], metavar="DIR",
        help="also count the gateway of the source tree in DIR",
    )  # fmt: skip
    return measure(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
