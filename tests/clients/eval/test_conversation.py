"""τ²'s conversation rules as repeated here: its limits, its prompts, its greeting."""

from __future__ import annotations

from typing import Any

from rehearsal_gateway.clients.eval.conversation import (
    AGENT_INSTRUCTION,
    Conversation,
    user_prompt,
)
from rehearsal_gateway.clients.eval.episode import Episode
from rehearsal_gateway.clients.eval.tau import load_tau2


def _chat(max_steps: int, max_errors: int) -> Conversation:
    episode = Episode(task="t", cell="off", mode="off", budget=0, seed=0, attempt="a")
    return Conversation(None, episode, None, max_steps=max_steps, max_errors=max_errors)  # type: ignore[arg-type]


def test_a_step_toward_the_environment_never_ends_the_conversation() -> None:
    """As in τ²'s Orchestrator: the limit is checked only when no tool call is left unanswered."""
    chat = _chat(max_steps=2, max_errors=10)
    chat.passed(to_environment=True)
    chat.passed(to_environment=True)
    assert chat.ended is None
    chat.passed()
    assert chat.ended == "max_steps"


def test_errors_end_it_and_win_over_the_step_limit() -> None:
    """Ten failed calls end it; checked after the steps, so it names the errors when both hit."""
    chat = _chat(max_steps=2, max_errors=2)
    chat.passed(errors=1)
    assert chat.ended is None
    chat.passed(errors=1)
    assert chat.ended == "too_many_errors"


def test_the_prompts_are_taus() -> None:
    """The user's prompt is τ²'s guidelines file plus the scenario; the agent's text is verbatim."""
    tau2: Any = load_tau2()
    guidelines = tau2.utils.DATA_DIR / "tau2" / "user_simulator"
    plain = user_prompt(tau2, "SCENARIO", with_tools=False)
    phone = user_prompt(tau2, "SCENARIO", with_tools=True)
    assert plain.startswith((guidelines / "simulation_guidelines.md").read_text())
    assert phone.startswith((guidelines / "simulation_guidelines_tools.md").read_text())
    assert plain.endswith("<scenario>\nSCENARIO\n</scenario>")
    assert AGENT_INSTRUCTION.startswith("You are a customer service agent")
