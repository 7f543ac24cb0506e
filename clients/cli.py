"""The `rehearsal-gateway` command: one entry point, one subcommand per job.

Each subcommand lives in the room that owns it and exposes ``register(subparsers)``, which adds
its parser and sets ``func`` to a callable taking the parsed namespace and returning an exit
code. Registration must stay import-light: heavy imports happen inside ``func``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

# name -> module exposing register(subparsers); order is the order shown in --help.
SUBCOMMANDS: tuple[str, ...] = (
    "rehearsal_gateway.twin.cli",
    "rehearsal_gateway.server.launcher.serve",
    "rehearsal_gateway.server.launcher.up",
    "rehearsal_gateway.clients.top",
    "rehearsal_gateway.clients.demo",
    "rehearsal_gateway.clients.chat",
    "rehearsal_gateway.clients.trace",
    "rehearsal_gateway.clients.eval.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rehearsal-gateway",
        description="OpenAI-compatible gateway that rehearses tool calls before committing one.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name in SUBCOMMANDS:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except BrokenPipeError:
        # The reader went away (``trace ID | head``): stop quietly, as other Unix tools do.
        # Python would report the failed flush of stdout at exit; point stdout at devnull first.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, the status a shell reports for a tool killed by the pipe
    return code


if __name__ == "__main__":
    sys.exit(main())
