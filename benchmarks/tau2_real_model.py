"""τ²-Bench with a real language model: a bounded slice of ``eval --suite tau2`` on the CPU.

One real vLLM (CPU build) serves Qwen2.5-Coder-0.5B-Instruct (``make real-model``,
docs/real-model.md), one gateway sits in front of it, and ``rehearsal-gateway eval --suite tau2``
runs the first τ² tasks of a domain through it, off against parallel rehearsal. The model is the
agent and the imagination. The simulated user is either the same model (``--user model``, eval's
default: the agent's gateway, rehearsal off) or an engine twin's scripted user (``--user twin``:
it states the task's scenario, then ends the conversation; docs/twin.md). Every acting answer is
capped (vLLM's generation config, ``max_new_tokens``): unbounded,
the small model can repeat itself to the end of its context at a few tokens a second.

The whole run is bounded by ``--budget-s``: then ``eval`` is stopped (SIGTERM), prints the tables
of what finished and keeps its episode log, and the benchmark says that it was cut. This is a
benchmark, not a test: the figures describe a 0.5B model on a shared 2-core machine.

    python -m benchmarks.tau2_real_model [--domain retail] [--tasks 1] [--user model|twin]
                                         [--budget-s 2400] [--engine URL] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.real_model import PATIENT  # noqa: E402
from tests.support.procs import Proc, cli_argv, free_port, start_http_server  # noqa: E402
from tests.support.vllm import REAL_MODEL_NAME, start_real_vllm  # noqa: E402

ACT_MAX_TOKENS = 256
# τ²'s agent prompt (policy and tools) is several thousand tokens: a long context, prefilled in
# one engine step (vLLM 0.32's CPU build dies when it splits a seeded request's prefill).
ENGINE_ARGS = (
    "--max-model-len", "16384", "--max-num-batched-tokens", "16384",
    "--override-generation-config", json.dumps({"max_new_tokens": ACT_MAX_TOKENS}),
)  # fmt: skip


def start_gateway(engine_url: str, workdir: Path) -> Proc:
    port = free_port()
    argv = cli_argv(
        "serve", "--port", str(port), "--log-level", "warning",
        "--engine", f"{engine_url}/v1,name=real,model={REAL_MODEL_NAME}",
    )  # fmt: skip
    return start_http_server(
        argv, port=port, log_path=workdir / "gateway.log", ready_path="/ready", env=PATIENT
    )


def start_twin_user(workdir: Path) -> Proc:
    """An engine twin, whose scripted user the conversations talk to."""
    port = free_port()
    argv = cli_argv("twin", "--port", str(port), "--latency", "zero")
    return start_http_server(argv, port=port, log_path=workdir / "twin.log")


def run_eval(gateway: Proc, args: argparse.Namespace, out: Path, user: Proc | None) -> int:
    """``eval --suite tau2`` against the gateway, stopped by SIGTERM at the budget."""
    argv = cli_argv(
        "eval", "--suite", "tau2", "--domain", args.domain, "--gateway", gateway.url,
        "--model", REAL_MODEL_NAME, "--modes", "off,parallel", "--budgets", "2",
        "--limit", str(args.tasks), "--concurrency", "2", "--out", str(out),
    )  # fmt: skip
    if user is not None:
        argv += ["--user-url", user.url + "/v1"]
    print(f"{' '.join(argv[2:])}", flush=True)
    child = subprocess.Popen(argv, cwd=ROOT)
    try:
        return child.wait(timeout=args.budget_s)
    except subprocess.TimeoutExpired:
        print(f"\nbudget of {args.budget_s} s spent: stopping eval (SIGTERM)", flush=True)
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=120)
        return 124


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domain", default="retail", choices=["airline", "retail", "telecom"])
    parser.add_argument("--tasks", type=int, default=1, help="the first N tasks of the domain")
    parser.add_argument(
        "--user", choices=["model", "twin"], default="model",
        help="the simulated user: the real model, or the twin's scripted user",
    )  # fmt: skip
    parser.add_argument("--budget-s", type=float, default=2400.0, help="wall-time bound of eval")
    parser.add_argument("--engine", metavar="URL", help="a vLLM already serving the real model")
    parser.add_argument("--out", metavar="DIR", help="eval's run directory (kept)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    began = time.perf_counter()
    print(f"load average at start: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    with tempfile.TemporaryDirectory(prefix="rgw-tau2-real-") as tmp:
        workdir = Path(tmp)
        out = Path(args.out) if args.out else workdir / "run"
        engine = None if args.engine else start_real_vllm(workdir / "vllm.log", ENGINE_ARGS)
        engine_url = args.engine or (engine.url if engine else "")
        gateway: Proc | None = None
        user: Proc | None = None
        try:
            print(f"vLLM up in {time.perf_counter() - began:.0f} s", flush=True)
            gateway = start_gateway(engine_url, workdir)
            user = start_twin_user(workdir) if args.user == "twin" else None
            code = run_eval(gateway, args, out, user)
        finally:
            for proc in (user, gateway):
                if proc is not None:
                    proc.stop()
            if engine is not None:
                engine.stop()
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    print(f"\nwall time {time.perf_counter() - began:.0f} s; load average at end: {load}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
