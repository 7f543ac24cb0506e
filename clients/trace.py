"""``rehearsal-gateway trace ID``: pretty-print one stored rehearsal.

It shows what the gateway kept for a rehearsal id: the knobs, the candidates the engine sampled,
each imagined trajectory with its observations and vetoes, the committed turn and why it was
chosen, and — once the client has sent the real results back — the fidelity of the imagination.
An unknown or expired id (or one of another API key) is a clear message and exit code 1.

``gateway_options`` and ``open_client`` are shared with ``chat``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8000"


def gateway_root(url: str) -> str:
    """The gateway's root URL, whether given as the SDKs take it (``…/v1``) or without."""
    return url.rstrip("/").removesuffix("/v1")


def gateway_options(parser: argparse.ArgumentParser) -> None:
    """The flags every client command shares: where the gateway is and which key to use."""
    parser.add_argument(
        "--url",
        default=os.environ.get("RGW_URL", DEFAULT_URL),
        help=f"the gateway's URL, with or without /v1 (env RGW_URL; default {DEFAULT_URL})",
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get("RGW_API_KEY"),
        help="bearer key when the gateway requires one (env RGW_API_KEY; default: none)",
    )


def open_client(args: argparse.Namespace) -> Any:
    """A ``RehearsalClient`` for the command's ``--url`` and ``--api-key``."""
    from .client import RehearsalClient

    return RehearsalClient(gateway_root(args.url) + "/v1", api_key=args.api_key, timeout=120.0)


def register(subparsers: Any) -> None:
    """Add ``trace`` to the top-level CLI."""
    parser = subparsers.add_parser(
        "trace",
        help="pretty-print a stored rehearsal: candidates, imagined results, vetoes, the choice",
        description="Fetch GET /v1/rehearsals/ID from the gateway and show it.",
        epilog="example (the id is the response's rehearsal.id, or X-Rehearsal-Id):\n"
        "  rehearsal-gateway trace rh_0123456789abcdef01234567 --json",
    )
    parser.add_argument("id", help="a rehearsal id (the response's rehearsal.id, X-Rehearsal-Id)")
    parser.add_argument("--json", action="store_true", help="print the raw stored JSON instead")
    gateway_options(parser)
    parser.set_defaults(func=run)


def action_text(call: Mapping[str, Any]) -> str:
    """``name(arguments)`` for a stored tool call."""
    arguments = call.get("arguments")
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):  # shown as sent when it is not JSON
            arguments = json.loads(arguments)
    shown = json.dumps(arguments, separators=(", ", ": ")) if arguments is not None else ""
    return f"{call.get('name')}({shown})"


def turn_text(turn: Mapping[str, Any]) -> str:
    """One stored assistant turn: its tool calls, or its text answer."""
    calls = turn.get("tool_calls") or []
    if calls:
        return "; ".join(action_text(call) for call in calls)
    return f"answer: {(turn.get('content') or '').strip()}"


def _short(value: Any, width: int = 110) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return text if len(text) <= width else text[: width - 1] + "…"


def trajectory_lines(trajectories: Iterable[Mapping[str, Any]], chosen: int | None) -> list[str]:
    """The imagined trajectories, one block each, the chosen one marked."""
    lines: list[str] = []
    for walk in trajectories:
        mark = "▶" if walk.get("index") == chosen else " "
        samples = ",".join(str(s) for s in walk.get("samples", []))
        lines.append(
            f"{mark} #{walk.get('index')} samples [{samples}] outcome {walk.get('outcome')} "
            f"score {walk.get('score')} (ended: {walk.get('ended')})"
        )
        for depth, step in enumerate(walk.get("steps", []), start=1):
            lines.append(f"    step {depth}: {turn_text(step.get('turn', {}))}")
            for seen in step.get("observations", []):
                verdict = seen.get("outcome")
                label = "VETO" if str(verdict).startswith("veto") else str(verdict)
                lines.append(f"      imagined [{label}]: {_short(seen.get('result'))}")
    return lines


def render(trace: Mapping[str, Any]) -> str:
    """The whole trace as plain text."""
    from . import vetoes

    knobs = trace.get("budget_knobs", {})
    lines = [
        f"rehearsal {trace.get('id')}  model {trace.get('model')}",
        f"  mode {trace.get('mode')}, budget {trace.get('budget')}, depth {trace.get('depth')}, "
        f"commit {trace.get('commit')}, deadline {knobs.get('deadline_ms')} ms",
        f"  engine calls {trace.get('engine_calls')}, latency ms {trace.get('latency_ms')}",
        f"  vetoes {vetoes.render(vetoes.from_trace(trace))}, "
        f"early exit {trace.get('early_exit_reason') or 'no'}, "
        f"degraded {trace.get('degraded') or 'no'}",
        "",
        "candidates (sampled actions):",
    ]
    for index, turn in enumerate(trace.get("candidates", [])):
        lines.append(f"  [{index}] {turn_text(turn)}")
    lines += ["", "imagined trajectories:"]
    lines += trajectory_lines(trace.get("trace", []), trace.get("chosen_trajectory")) or [
        "  (none: nothing needed rehearsing)"
    ]
    committed = trace.get("committed") or trace.get("turn") or {}
    lines += ["", f"committed: {turn_text(committed)}", f"why: {trace.get('why')}"]
    for fault in trace.get("faults", []):
        lines.append(f"fault: {fault}")
    for item in trace.get("feedback", []):
        lines.append(
            f"real result of {item.get('tool')}: fidelity {item.get('fidelity')}, "
            f"{item.get('real_ms')} ms; {_short(item.get('real_result'))}"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Fetch and print one trace; 1 when the gateway does not know it, 2 when unreachable."""
    from .client import EngineUnavailable, GatewayError, NotFound

    client = open_client(args)
    try:
        trace = client.trace(args.id)
    except NotFound as exc:
        print(f"rehearsal-gateway trace: {exc.message}", file=sys.stderr)
        return 1
    except EngineUnavailable as exc:
        where = f"cannot reach {args.url}" if exc.status is None else "no engine answered"
        print(f"rehearsal-gateway trace: {where}: {exc.message}", file=sys.stderr)
        return 2
    except GatewayError as exc:
        print(f"rehearsal-gateway trace: {exc.message}", file=sys.stderr)
        return 1
    finally:
        client.close()
    print(json.dumps(trace, indent=2) if args.json else render(trace))
    return 0
