"""A stand-in for the ``vllm`` executable in the tests of ``rehearsal-gateway up``.

``vllm serve MODEL --host H --port P --served-model-name N …`` records what it was given (argv,
``CUDA_VISIBLE_DEVICES``, pid, process group) in ``$FAKE_VLLM_RECORD/<port>.json``, starts a
helper child that ignores SIGTERM (vLLM too runs an engine-core process beside its API server;
this one only goes when its group is killed), then becomes an engine twin on that port, so a
gateway in front really proxies to it.

Misbehaviour on request: when ``CUDA_VISIBLE_DEVICES`` equals ``$FAKE_VLLM_FAIL_GPU`` it prints
a fake CUDA error and exits 1; with ``FAKE_VLLM_HANG=1`` it prints one line and never listens.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HELPER = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"


def main() -> None:
    parser = argparse.ArgumentParser(prog="fake-vllm")
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("model")
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", required=True)
    parser.add_argument("--served-model-name", required=True)
    args, _ = parser.parse_known_args()
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES")
    print(f"fake vllm: loading {args.model} on GPU {gpu}", flush=True)
    if gpu is not None and gpu == os.environ.get("FAKE_VLLM_FAIL_GPU"):
        time.sleep(0.5)
        print("torch.OutOfMemoryError: CUDA out of memory (fake)", flush=True)
        sys.exit(1)
    helper = subprocess.Popen([sys.executable, "-c", HELPER])
    record = {
        "argv": sys.argv[1:],
        "cuda_visible_devices": gpu,
        "pid": os.getpid(),
        "pgid": os.getpgid(0),
        "helper_pid": helper.pid,
        "rgw_env": sorted(name for name in os.environ if name.startswith("RGW_")),
    }
    Path(os.environ["FAKE_VLLM_RECORD"], f"{args.port}.json").write_text(json.dumps(record))
    if os.environ.get("FAKE_VLLM_HANG") == "1":
        time.sleep(600)
    twin = ["twin", "--host", args.host, "--port", args.port]
    twin += ["--served-model-name", args.served_model_name]
    os.execv(sys.executable, [sys.executable, "-m", "rehearsal_gateway.clients.cli", *twin])


if __name__ == "__main__":
    main()
