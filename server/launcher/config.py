"""``rehearsal-gateway config``: the settings ``serve`` would run with, and where each came from.

It takes ``serve``'s flags (so ``config --config gateway.yaml --port 9000`` answers for exactly
that command line), reads the settings through the same code and checks as ``serve``, and prints
one row per setting: its name, its value (secrets masked) and its source — the flag, the
``RGW_*`` variable, the config file's key, or the default. ``--changed`` keeps the rows that are
not defaults; ``--json`` prints ``{setting: {"value", "source"}}``. Refused settings exit 2 with
the same lines as ``serve``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

EXAMPLE = """examples:
  rehearsal-gateway config --config gateway.yaml --changed
  RGW_REHEARSAL_MODE=parallel rehearsal-gateway config --json"""


def register(subparsers: Any) -> None:
    """Add ``config``: ``serve``'s settings flags, then how to print."""
    from .serve import add_settings_flags

    parser = subparsers.add_parser(
        "config",
        help="print the effective settings and where each value came from (secrets masked)",
        description="Read the settings exactly as serve would (flags > RGW_* variables > "
        "--config file > defaults) and print each with its source. Exit 2 when serve would "
        "refuse them.",
        epilog=EXAMPLE,
    )
    add_settings_flags(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--changed", action="store_true", help="only the settings that are not defaults"
    )
    parser.set_defaults(func=run)


def _shown(value: Any) -> str:
    import orjson

    return value if isinstance(value, str) else orjson.dumps(value).decode()


def run(args: argparse.Namespace) -> int:
    """Print the effective settings; 2 when they are refused."""
    import orjson

    from .serve import loaded_from_args, refusal
    from .sources import SettingsRefused

    try:
        loaded = loaded_from_args(args)
    except SettingsRefused as exc:
        print(refusal("config", exc), file=sys.stderr)
        return 2
    rows = [row for row in loaded.rows() if not args.changed or row[2].kind != "default"]
    if args.json:
        document = {name: {"value": value, "source": src.label()} for name, value, src in rows}
        print(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode())
        return 0
    width = max((len(name) for name, _, _ in rows), default=0)
    for name, value, source in rows:
        print(f"{name:<{width}}  {_shown(value)}  [{source.label()}]")
    return 0
