"""The ``twin`` subcommand's options and their environment defaults."""

from __future__ import annotations

import pytest

from rehearsal_gateway.clients.cli import build_parser


def test_defaults_and_flags() -> None:
    """Flags parse into the namespace the runner reads."""
    args = build_parser().parse_args(["twin", "--world", "bank", "--skill", "0.4", "--seed", "3"])
    assert (args.world, args.skill, args.seed, args.port) == ("bank", 0.4, 3, 8100)
    assert args.latency == "zero"
    assert callable(args.func)


def test_environment_supplies_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """RGW_TWIN_* variables set the defaults."""
    monkeypatch.setenv("RGW_TWIN_PORT", "9123")
    monkeypatch.setenv("RGW_TWIN_LATENCY", "h100")
    monkeypatch.setenv("RGW_TWIN_SERVED_MODEL_NAME", "tiny")
    monkeypatch.setenv("RGW_TWIN_GROUNDING_GAIN", "1")
    args = build_parser().parse_args(["twin"])
    assert (args.port, args.latency, args.served_model_name) == (9123, "h100", "tiny")
    assert args.grounding_gain == 1.0


def test_start_banner_says_simulation(start_twin) -> None:
    """The twin prints its settings at start, labelled as a simulation."""
    twin = start_twin("--world", "retail", "--skill", "0.9", "--grounding-gain", "0.8")
    log = twin.log()
    assert "SIMULATION" in log
    assert "retail" in log
    assert "0.9" in log
    assert "fidelity 1-(1-f)*0.8^k" in log
