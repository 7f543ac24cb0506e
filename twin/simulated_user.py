"""The simulated-user role: what the twin says when it is asked to play a benchmark's customer.

τ²-Bench (and ``rehearsal-gateway eval --suite tau2``) prompts a user simulator with guidelines
that name the ``###STOP###`` token and the task's ``<scenario>…</scenario>``, and shows it the
conversation with the roles flipped (its own messages as ``assistant``). The twin, asked such a
request, is a user of the simplest kind: its first message states the scenario's instructions,
and its next one ends the conversation with ``###STOP###``. It never calls a tool (telecom's phone
tools are offered to the user, and ignored). So a τ² conversation on the twin runs end to end —
user, agent, environment, evaluator — and what it scores is the twin's agent policy, not a user.
"""

from __future__ import annotations

import re

from .prompt import message_text
from .schema import JsonObject
from .turn import Draft

STOP = "###STOP###"
_SCENARIO = re.compile(r"<scenario>\s*(.*?)\s*</scenario>", re.DOTALL)


def user_scenario(messages: list[JsonObject]) -> str | None:
    """The scenario of a user-simulator request (system prompt naming the stop token), or None."""
    system = next((m for m in messages if m.get("role") == "system"), None)
    if system is None:
        return None
    text = message_text(system)
    found = _SCENARIO.search(text)
    if found is None or STOP not in text:
        return None
    return found.group(1)


def user_turn(messages: list[JsonObject], scenario: str) -> Draft:
    """The scenario's instructions first; once it has spoken, the stop token."""
    if any(m.get("role") == "assistant" for m in messages):
        return Draft(reasoning="The agent has answered; my request is dealt with.", content=STOP)
    return Draft(reasoning="I am the customer; I state what I need.", content=scenario)
