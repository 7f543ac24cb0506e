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
from typing import Any

# name -> module exposing register(subparsers); order is the order shown in --help.
SUBCOMMANDS: tuple[str, ...] = (
    "rehearsal_gateway.twin.cli",
    "rehearsal_gateway.server.launcher.serve",
    "rehearsal_gateway.server.launcher.up",
    "rehearsal_gateway.server.launcher.config",
    "rehearsal_gateway.server.launcher.doctor",
    "rehearsal_gateway.clients.top",
    "rehearsal_gateway.clients.demo",
    "rehearsal_gateway.clients.chat",
    "rehearsal_gateway.clients.trace",
    "rehearsal_gateway.clients.eval.cli",
)


def with_default(action: argparse.Action) -> None:
    """End ``action``'s help with its default, unless the help already says it or there is none
    worth saying (a flag that only switches something on, ``None``, an empty list)."""
    text = action.help
    default = action.default
    if not text or text == argparse.SUPPRESS or "default" in text or action.nargs == 0:
        return
    if default is None or default is False or default == [] or default == argparse.SUPPRESS:
        return
    action.help = f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """The CLI's parser: examples keep their lines (argparse's ``RawDescriptionHelpFormatter``),
    and every option added to it, or to a subcommand's parser, says its default.

    Built on argparse's public surface only: the formatter class it documents, and
    ``add_argument``, whose returned action's ``help`` is set before any help is printed.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        with_default(action)
        return action


def gateway_version() -> str:
    """The installed gateway's version (``0+unknown`` in a checkout that was never installed)."""
    from rehearsal_gateway import __version__

    return __version__


EXAMPLES = """first steps (docs/quickstart.md):
  rehearsal-gateway twin --port 8100 --world retail       # a simulated engine, no GPU
  rehearsal-gateway serve --engine http://127.0.0.1:8100/v1 --port 8000
  rehearsal-gateway chat --world retail "Where is order W1001?"
  rehearsal-gateway doctor --engine http://127.0.0.1:8100/v1   # is everything set up right?
every command has its own --help, with an example"""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="rehearsal-gateway",
        description="OpenAI-compatible gateway that rehearses tool calls before committing one.",
        epilog=EXAMPLES,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {gateway_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for module_name in SUBCOMMANDS:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # a bare command: what there is to run, and how to start
        parser.print_help()
        return 0
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
