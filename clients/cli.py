"""The `rehearsal-gateway` command: one entry point, one subcommand per job.

Each subcommand lives in the room that owns it and exposes ``register(subparsers)``, which adds
its parser and sets ``func`` to a callable taking the parsed namespace and returning an exit
code. Registration must stay import-light: heavy imports happen inside ``func``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# name -> module exposing register(subparsers); order is the order shown in --help.
SUBCOMMANDS: tuple[str, ...] = (
    "twin.cli",
    "server.launcher.serve",
    "server.launcher.up",
    "clients.top",
    "clients.demo",
    "clients.chat",
    "clients.trace",
    "clients.eval.cli",
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
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
