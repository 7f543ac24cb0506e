"""Fixtures for the twin's tests: a shared twin on loopback and a rehearsal-prompt builder."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from rehearsal_gateway.twin.worlds import load_world
from tests.support.procs import Proc, cli_argv, free_port, start_http_server

MODEL = "EnvACE-Qwen3-8B"


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    """One zero-latency twin per test module (skill 0.7, fidelity 1.0, seed 7)."""
    port = free_port()
    proc = start_http_server(
        cli_argv("twin", "--port", str(port), "--fidelity", "1.0", "--seed", "7"),
        port=port,
        log_path=tmp_path_factory.mktemp("twin") / "twin.log",
    )
    yield proc
    proc.stop()


def world_request(world: str, task_index: int = 0, **extra: Any) -> dict[str, Any]:
    """A chat request opening a world task, with the world's tools."""
    loaded = load_world(world)
    task = loaded.tasks[task_index]
    return {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": loaded.system_prompt},
            {"role": "user", "content": task.instruction},
        ],
        "tools": loaded.tool_schemas(),
        **extra,
    }


def rehearsal_text(
    tools: list[dict[str, Any]],
    history: str,
    name: str,
    arguments: Any,
    *,
    schema: dict[str, Any] | None = None,
    examples: Sequence[tuple[str, Any, Any]] = (),
) -> str:
    """The six-section rehearsal user message, laid out as docs/formats.md pins it; ``examples``
    are few-shot (name, arguments, real result) triples."""
    if schema is None:
        schema = next(
            (t["function"]["parameters"] for t in tools if t["function"]["name"] == name), {}
        )
    args_text = arguments if isinstance(arguments, str) else json.dumps(arguments, indent=0)
    sections = [
        "Candidate tools (whitelist for this sample):\n"
        + json.dumps(tools, ensure_ascii=True, indent=0),
        few_shot_text(examples),
        f"Current conversation history:\n{history}",
        "RL model's latest response:\n<think>\nthinking\n</think>\n\n<tool_call>\n{}\n</tool_call>",
        "Current tool to simulate:\n"
        f"- name: {name}\n"
        f"- input schema (JSON Schema):\n{json.dumps(schema, indent=0)}\n"
        f"- arguments (JSON, parsed from caller's tool_call):\n{args_text}",
    ]
    return "\n\n".join(sections) + "\n\n/think"


def few_shot_text(examples: Sequence[tuple[str, Any, Any]]) -> str:
    """Section 2: one ``Tool name / Tool arguments / Tool execution result`` block per pair."""
    if not examples:
        return "Previous tool calls and results (few-shot): <unavailable>"
    lines = ["Previous tool calls and results (few-shot):"]
    for name, arguments, result in examples:
        lines.append(
            f"Tool name:\n{name}\nTool arguments:\n{json.dumps(arguments, indent=0)}\n"
            f"Tool execution result:\n{json.dumps(result, indent=0)}\n"
        )
    return "\n".join(lines)


def rehearsal_request(text: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "You are a precise tool simulator."},
            {"role": "user", "content": text},
        ],
        **extra,
    }
