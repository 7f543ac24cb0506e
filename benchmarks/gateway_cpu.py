"""The gateway's own CPU per request, pass-through and rehearsed, for sizing replicas.

Starts an engine twin with ``--latency zero`` (so the engine costs no wall time) and a gateway in
front of it, then sends the same world requests (system prompt, task, the world's tools) with
rehearsal off and with parallel rehearsal (K = 4, depth 1, ``reflect``: up to six engine calls;
on this world's twin about three, since the K samples mostly agree: per 40 requests 40 acting
calls, 54 imaginations in 32 HTTP calls, 26 commits), in interleaved rounds, and reads the
gateway process's CPU time (every thread's, from ``/proc/PID/task/*/schedstat``) around each
round. The result is gateway CPU milliseconds per
request; docs/deploy.md turns it into gateway replicas per engine.

``--transports wire,aiohttp,httpx`` runs one gateway per engine transport side by side
(``benchmarks/transports.py``) and adds each one's ratio to the first, ``wire``, the default.

``--against DIR[,DIR...]`` compares source trees (say a ``git worktree`` of the commit before a
change): one more gateway per tree, its code imported from there, and each round sent to every
gateway **at once**, so that all of them see the same machine. On our shared 2-core machine
back-to-back rounds of one gateway moved by ±15%; run concurrently, the same tree twice came out
x0.99 of itself, and a 10% cut was lower in every round.

    python -m benchmarks.gateway_cpu [--requests 200] [--rounds 2] [--concurrency 8]
    python -m benchmarks.gateway_cpu --against /tmp/before --requests 150 --rounds 6
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.rehearsal import world_request  # noqa: E402
from rehearsal_gateway.twin.worlds import World, load_world  # noqa: E402
from tests.support.procs import Proc, cli_argv, free_port, start_http_server  # noqa: E402

MODES: dict[str, dict[str, Any] | None] = {
    "pass-through": None,
    "parallel K=4": {"mode": "parallel", "budget": 4, "depth": 1, "commit": "reflect"},
}


def cpu_seconds(pid: int) -> float:
    """CPU time of one process so far, all its threads, user and system.

    From the scheduler's nanosecond count of each thread (``/proc/PID/task/TID/schedstat``):
    ``/proc/PID/stat``'s utime + stime move in 10 ms ticks, a tenth of a whole 300-request
    round of pass-throughs. Falls back to the ticks where schedstat is not kept.
    """
    try:
        return (
            sum(
                int((task / "schedstat").read_text().split()[0])
                for task in Path(f"/proc/{pid}/task").iterdir()
            )
            / 1e9
        )
    except (OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def send(url: str, world: World, knobs: dict[str, Any] | None, count: int, conc: int) -> None:
    """``count`` requests, ``conc`` at a time, one session each; any non-200 stops the run."""
    gate = asyncio.Semaphore(conc)
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:

        async def one(i: int) -> None:
            async with gate:
                headers = {"X-Session-Id": f"cpu-{i}"}
                answer = await client.post(
                    "/v1/chat/completions", json=world_request(world, i, i, knobs), headers=headers
                )
                if answer.status_code != 200:
                    raise RuntimeError(f"HTTP {answer.status_code}: {answer.text[:300]}")

        await asyncio.gather(*(one(i) for i in range(count)))


async def send_all(urls: list[str], world: World, knobs: dict[str, Any] | None, args: Any) -> None:
    """One round's requests to each gateway of ``urls``, all at the same time."""
    await asyncio.gather(
        *(send(url, world, knobs, args.requests, args.concurrency) for url in urls)
    )


def tree_cli_argv(tree: str, *args: str) -> list[str]:
    """The CLI of the source tree at ``tree`` (imported from there), run by this interpreter."""
    # A tree from before the one import name (decision 0103) runs its CLI by its old name.
    named = (Path(tree) / "rehearsal_gateway").is_dir()
    module = "rehearsal_gateway.clients.cli" if named else "clients.cli"
    code = (
        f"import sys, runpy; sys.path.insert(0, {tree!r}); "
        f"runpy.run_module({module!r}, run_name='__main__')"
    )
    return [sys.executable, "-c", code, *args]


def start_gateway(name: str, engine: str, tmp: str) -> Proc:
    """A gateway in front of ``engine``: the real ``serve``, one with transport ``name``, or
    (``name`` a directory) the ``serve`` of the source tree there."""
    port = free_port()
    if name == "wire":  # what ships by default: the real ``serve``
        argv = cli_argv("serve", "--port", str(port), "--engine", engine)
    elif Path(name).is_dir():
        argv = tree_cli_argv(name, "serve", "--port", str(port), "--engine", engine)
    else:
        argv = [sys.executable, "-m", "benchmarks.transports", "serve", "--transport", name,
                "--port", str(port), "--engine", engine]  # fmt: skip
    return start_http_server(argv, port=port, log_path=Path(tmp) / f"gateway-{name}.log")


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    """The load options this benchmark and ``router_cpu`` share."""
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--world", default="retail", choices=["airline", "retail", "bank"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_load_arguments(parser)
    parser.add_argument("--transports", default="wire", help="comma list of wire, aiohttp, httpx")
    parser.add_argument("--against", default="", help="comma list of source trees to compare")
    args = parser.parse_args()
    names = args.transports.split(",")
    together = bool(args.against)
    if together:
        names = ["wire", *(str(Path(d).resolve()) for d in args.against.split(","))]

    world = load_world(args.world)
    per_request: dict[tuple[str, str], list[float]] = {(n, m): [] for n in names for m in MODES}
    with tempfile.TemporaryDirectory(prefix="rgw-cpu-") as tmp:
        twin_port = free_port()
        twin = start_http_server(
            cli_argv("twin", "--port", str(twin_port), "--latency", "zero", "--seed", "1"),
            port=twin_port, log_path=Path(tmp) / "twin.log",
        )  # fmt: skip
        gateways: dict[str, Proc] = {}
        try:
            for name in names:
                gateways[name] = start_gateway(name, twin.url + "/v1", tmp)
            for gateway in gateways.values():  # warm-up: imports, connections, caches
                for knobs in MODES.values():
                    asyncio.run(send(gateway.url, world, knobs, 20, args.concurrency))
            for _ in range(args.rounds):
                for mode, knobs in MODES.items():
                    batches = (
                        [list(gateways.items())] if together else [[g] for g in gateways.items()]
                    )
                    for batch in batches:
                        before = {name: cpu_seconds(g.popen.pid) for name, g in batch}
                        asyncio.run(send_all([g.url for _, g in batch], world, knobs, args))
                        for name, gateway in batch:
                            spent = cpu_seconds(gateway.popen.pid) - before[name]
                            per_request[name, mode].append(spent / args.requests * 1000)
        finally:
            for gateway in gateways.values():
                gateway.stop()
            twin.stop()

    shape = f"{args.requests} requests x {args.rounds} rounds, concurrency {args.concurrency}"
    print(f"gateway CPU per request ({args.world} world with tools, {shape}, twin latency zero)")
    for name in names:
        if len(names) > 1:
            print(f" {'tree' if Path(name).is_dir() else 'transport'} {name}")
        for mode in MODES:
            values = per_request[name, mode]
            shown = ", ".join(f"{v:.2f}" for v in values)
            median = statistics.median(values)
            against = ""
            if name != names[0]:
                first = statistics.median(per_request[names[0], mode])
                against = f"  x{median / first:.2f} of {names[0]}"
                if together:  # rounds ran at the same time: compare them pairwise
                    pairs = zip(values, per_request[names[0], mode], strict=True)
                    paired = statistics.median(v / f for v, f in pairs)
                    against += f" (per round: x{paired:.2f})"
            print(f"  {mode:<14} median {median:.2f} ms{against}  (rounds: {shown})")
        ratio = statistics.median(per_request[name, "parallel K=4"]) / statistics.median(
            per_request[name, "pass-through"]
        )
        print(f"  rehearsed / pass-through: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
