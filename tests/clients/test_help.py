"""Help that teaches: every subcommand's options have help and a default, each has an example."""

from __future__ import annotations

import argparse
import subprocess

import pytest

from rehearsal_gateway import __version__
from rehearsal_gateway.clients.cli import build_parser
from tests.support.procs import ROOT, cli_argv


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


SUBCOMMANDS = _subcommands()


def test_the_commands_are_all_there() -> None:
    """The CLI offers every job, the operator's checks included."""
    jobs = {"twin", "serve", "up", "top", "demo", "chat", "trace", "eval", "config", "doctor"}
    assert jobs <= set(SUBCOMMANDS)


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_every_option_says_what_it_does_and_its_default(name: str) -> None:
    """Each option of the subcommand has help text; each that takes a value says its default."""
    parser = SUBCOMMANDS[name]
    missing_help, missing_default = [], []
    for action in parser._actions:
        label = action.option_strings[-1] if action.option_strings else action.dest
        if not action.help or action.help == argparse.SUPPRESS:
            missing_help.append(label)
            continue
        if action.nargs == 0 or action.required:  # a flag that only switches something on
            continue
        if "default" not in action.help:
            missing_default.append(label)
    assert missing_help == []
    assert missing_default == []


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_every_subcommand_shows_an_example(name: str) -> None:
    """The subcommand's help ends with an example of itself."""
    text = SUBCOMMANDS[name].format_help()
    assert "example" in text
    assert f"rehearsal-gateway {name} " in text


def test_version_and_a_bare_command() -> None:
    """`--version` names the gateway's version; a bare command prints usage and the commands."""
    shown = subprocess.run(cli_argv("--version"), cwd=ROOT, capture_output=True, text=True,
                           timeout=60, check=False)  # fmt: skip
    assert shown.returncode == 0
    assert shown.stdout.strip() == f"rehearsal-gateway {__version__}"
    bare = subprocess.run(cli_argv(), cwd=ROOT, capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip
    assert bare.returncode == 0, bare.stderr
    assert bare.stdout.startswith("usage: rehearsal-gateway")
    for name in SUBCOMMANDS:
        assert name in bare.stdout
    assert "first steps" in bare.stdout
