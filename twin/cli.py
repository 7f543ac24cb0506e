"""``rehearsal-gateway twin``: start the engine twin (a labelled simulation of vLLM + EnvACE)."""

from __future__ import annotations

import argparse
import os
from typing import Any


def _env(name: str, default: str) -> str:
    return os.environ.get(f"RGW_TWIN_{name}", default)


def register(subparsers: Any) -> None:
    """Add the ``twin`` subcommand (every option also reads ``RGW_TWIN_<OPTION>``)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "twin",
        help="serve the engine twin: a SIMULATED vLLM engine for EnvACE (tests, demo, benchmarks)",
        description="A simulation of vLLM serving EnvACE-Qwen3-8B; no model runs. Every option "
        "also reads RGW_TWIN_<OPTION> (RGW_TWIN_SKILL=0.9).",
        epilog="examples:\n  rehearsal-gateway twin --port 8100 --world retail --skill 0.6\n"
        "  rehearsal-gateway twin --latency h100 --latency-scale 0.1   # H100-like timing",
    )
    parser.add_argument("--host", default=_env("HOST", "127.0.0.1"), help="listen address")
    parser.add_argument("--port", type=int, default=int(_env("PORT", "8100")), help="listen port")
    parser.add_argument(
        "--world",
        default=_env("WORLD", "auto"),
        choices=["auto", "airline", "retail", "bank"],
        help="the tool world it plays; auto: the one whose tools a request offers",
    )
    parser.add_argument(
        "--skill",
        type=float,
        default=float(_env("SKILL", "0.7")),
        help="0..1: how often the acting policy takes the right next action",
    )
    parser.add_argument(
        "--fidelity",
        type=float,
        default=float(_env("FIDELITY", "0.9")),
        help="0..1: how often the rehearsal role imagines a tool's result right",
    )
    parser.add_argument(
        "--grounding-gain",
        type=float,
        default=float(_env("GROUNDING_GAIN", "0.5")),
        help="each real example of a tool in the prompt multiplies its drift chance by this",
    )
    parser.add_argument(
        "--latency", default=_env("LATENCY", "zero"), help="zero | h100 | path to a JSON profile"
    )
    parser.add_argument(
        "--latency-scale",
        type=float,
        default=float(_env("LATENCY_SCALE", "1.0")),
        help="multiply every modelled cost (e.g. 0.1 for a quick demo)",
    )
    parser.add_argument(
        "--seed", type=int, default=int(_env("SEED", "0")), help="seed of requests without one"
    )
    parser.add_argument(
        "--served-model-name",
        default=_env("SERVED_MODEL_NAME", "EnvACE-Qwen3-8B"),
        help="model id(s) it answers to, comma-separated",
    )
    parser.add_argument(
        "--cache-blocks",
        type=int,
        default=int(_env("CACHE_BLOCKS", "16384")),
        help="prefix-cache capacity in 16-token blocks",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the settings (clearly labelled as a simulation) and serve until stopped."""
    import uvicorn

    from .app import create_app
    from .config import TwinSettings

    for name, value in (
        ("skill", args.skill),
        ("fidelity", args.fidelity),
        ("grounding-gain", args.grounding_gain),
    ):
        if not 0.0 <= value <= 1.0:
            raise SystemExit(f"--{name} must be within [0, 1], got {value}")
    settings = TwinSettings(
        world=args.world,
        skill=args.skill,
        fidelity=args.fidelity,
        grounding_gain=args.grounding_gain,
        latency=args.latency,
        latency_scale=args.latency_scale,
        seed=args.seed,
        served_model_name=args.served_model_name,
        cache_blocks=args.cache_blocks,
    )
    print(settings.describe(), flush=True)
    print(f"  listening on      : http://{args.host}:{args.port}", flush=True)
    uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level="warning")
    return 0
