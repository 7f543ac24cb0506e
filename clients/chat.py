"""``rehearsal-gateway chat``: talk to the gateway with a world's tools and watch it rehearse.

With a prompt argument it answers once; without one it reads prompts from stdin (one per line,
an empty line or end of input stops). Each turn prints the **committed** tool call and the
rehearsal summary; ``--show-trace`` also prints the imagined trajectories (it asks the gateway
for them with ``trace: true``). With ``--world`` the world's tools are offered, and each
committed call is executed for real on a fresh copy of the world and its result sent back, as
the example agent does, until the model answers in text (``--no-execute`` stops after the first
committed call).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rehearsal_gateway.rehearsal.budget import COMMIT_RULES, MODES

from .trace import (
    gateway_options,
    open_client,
    trajectory_lines,
    turn_text,
)


def register(subparsers: Any) -> None:
    """Add ``chat`` to the top-level CLI."""
    parser = subparsers.add_parser(
        "chat",
        help="send a prompt (or an interactive session) through the gateway with rehearsal",
        description="Chat through the gateway; shows the committed call and the rehearsal.",
        epilog="examples:\n"
        '  rehearsal-gateway chat --world retail "Where is order W1001?"\n'
        "  rehearsal-gateway chat --world retail --show-trace --no-execute "
        '"Cancel order W1002, I no longer need it."',
    )
    parser.add_argument(
        "prompt", nargs="?", help="one prompt (default: an interactive session, read from stdin)"
    )
    parser.add_argument(
        "--world",
        choices=["airline", "retail", "bank"],
        help="offer that world's tools and run each committed call on it (default: no tools)",
    )
    parser.add_argument("--model", default="EnvACE-Qwen3-8B", help="the model to ask for")
    parser.add_argument("--mode", default="parallel", choices=MODES, help="the rehearsal mode")
    parser.add_argument(
        "--budget", type=int, help="K imagined trajectories (default: the gateway's)"
    )
    parser.add_argument(
        "--depth", type=int, help="imagined steps per trajectory (default: the gateway's)"
    )
    parser.add_argument(
        "--commit", choices=COMMIT_RULES, help="commit rule (default: the gateway's)"
    )
    parser.add_argument(
        "--deadline-ms", type=int, help="rehearsal deadline in ms (default: the gateway's)"
    )
    parser.add_argument(
        "--seed", type=int, help="sampling seed, for a reproducible answer (default: none)"
    )
    parser.add_argument("--show-trace", action="store_true", help="print imagined trajectories")
    parser.add_argument(
        "--no-execute", action="store_true", help="stop at the first committed call"
    )
    parser.add_argument(
        "--max-turns", type=int, default=8, help="committed calls to follow per prompt"
    )
    gateway_options(parser)
    parser.set_defaults(func=run)


def _knobs(args: argparse.Namespace) -> Any:
    from .client import Rehearsal

    return Rehearsal(
        mode=args.mode,
        budget=args.budget,
        depth=args.depth,
        commit=args.commit,
        deadline_ms=args.deadline_ms,
        trace=True if args.show_trace else None,
    )


def _describe(completion: Any, show_trace: bool) -> list[str]:
    """What one committed turn and its rehearsal look like on the terminal."""
    from . import vetoes
    from .client import summary

    message = completion.choices[0].message
    calls = [
        {"name": c.function.name, "arguments": c.function.arguments}
        for c in message.tool_calls or []
    ]
    lines = [f"committed: {turn_text({'tool_calls': calls, 'content': message.content})}"]
    rehearsed = summary(completion)
    if rehearsed is None:
        lines.append("rehearsal: none (mode off, no tools, or tool_choice none)")
        return lines
    lines.append(
        f"rehearsal {rehearsed.id}: {rehearsed.mode} K={rehearsed.budget} "
        f"d={rehearsed.depth} {rehearsed.commit}; {rehearsed.trajectories} trajectories, "
        f"{rehearsed.distinct_actions} distinct actions, "
        f"vetoes {vetoes.render(vetoes.from_summary(rehearsed))}, "
        f"early exit {rehearsed.early_exit}, degraded {rehearsed.degraded or 'no'}, "
        f"{rehearsed.latency_ms.total:.0f} ms"
    )
    if show_trace and rehearsed.trace is not None:
        lines += trajectory_lines(rehearsed.trace, None) or ["  (nothing was imagined)"]
    return lines


class Conversation:
    """One chat session: the messages so far, the world's state, and the gateway client."""

    def __init__(self, args: argparse.Namespace) -> None:
        from rehearsal_gateway.twin.worlds import load_world

        self.args = args
        self.client = open_client(args)
        self.world = load_world(args.world) if args.world else None
        self.messages: list[dict[str, Any]] = []
        if self.world is not None:
            self.messages.append({"role": "system", "content": self.world.system_prompt})
        self.state: Any = None

    def say(self, prompt: str) -> None:
        """Send one user prompt and follow the committed calls until a text answer."""
        from .agent import assistant_message, run_call

        self.messages.append({"role": "user", "content": prompt})
        if self.world is not None and self.state is None:
            self.state = self.world.new_state(self.world.task_for(prompt))
        extra: dict[str, Any] = {"tools": self.world.tool_schemas()} if self.world else {}
        for _ in range(self.args.max_turns):
            completion = self.client.create(
                model=self.args.model,
                messages=self.messages,
                seed=self.args.seed,
                rehearsal=_knobs(self.args),
                **extra,
            )
            print("\n".join(_describe(completion, self.args.show_trace)), flush=True)
            message = completion.choices[0].message
            self.messages.append(assistant_message(message))
            if not message.tool_calls or self.world is None or self.args.no_execute:
                return
            for call in message.tool_calls:
                result = run_call(self.world, self.state, call)
                print(f"real result: {json.dumps(result)}", flush=True)
                self.messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}
                )


def run(args: argparse.Namespace) -> int:
    """One prompt, or a session read from stdin; exit 1 when the gateway refuses."""
    from .client import EngineUnavailable, GatewayError

    conversation = Conversation(args)
    try:
        if args.prompt is not None:
            conversation.say(args.prompt)
            return 0
        interactive = sys.stdin.isatty()
        while True:
            if interactive:
                print("you> ", end="", flush=True)
            line = sys.stdin.readline()
            if not line.strip():
                return 0
            conversation.say(line.strip())
    except EngineUnavailable as exc:
        where = f"cannot reach {args.url}" if exc.status is None else "no engine answered"
        print(f"rehearsal-gateway chat: {where}: {exc.message}", file=sys.stderr)
        return 2
    except GatewayError as exc:
        print(f"rehearsal-gateway chat: {type(exc).__name__}: {exc.message}", file=sys.stderr)
        return 1
    finally:
        conversation.client.close()
