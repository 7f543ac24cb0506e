"""The simulated-user role: the scenario first, then the stop token; other chats are untouched."""

from __future__ import annotations

from rehearsal_gateway.twin.config import TwinSettings
from rehearsal_gateway.twin.engine import TwinEngine
from rehearsal_gateway.twin.protocol import parse_request
from rehearsal_gateway.twin.simulated_user import STOP, user_scenario

GUIDELINES = "You play a customer. When the goal is met, generate the '###STOP###' token."
SCENARIO = "Instructions:\n\tYou want to return order #W1 and you are Ann Lee in 10001."
SYSTEM = {"role": "system", "content": f"{GUIDELINES}\n\n<scenario>\n{SCENARIO}\n</scenario>"}
PHONE = {
    "type": "function",
    "function": {
        "name": "toggle_airplane_mode",
        "parameters": {"type": "object", "properties": {}},
    },
}


def _say(messages: list[dict], tools: list[dict] | None = None) -> tuple[str | None, int]:
    body: dict = {"model": "EnvACE-Qwen3-8B", "messages": messages, "temperature": 0}
    if tools:
        body["tools"] = tools
    (choice,) = TwinEngine(TwinSettings()).prepare(parse_request(body), body).choices
    return choice.content, len(choice.tool_calls)


def test_first_turn_states_the_scenario_then_the_user_stops() -> None:
    """The user's first message is the scenario; after it has spoken, the stop token."""
    opening = [SYSTEM, {"role": "user", "content": "Hi! How can I help you today?"}]
    assert _say(opening) == (SCENARIO, 0)
    later = [*opening, {"role": "assistant", "content": SCENARIO},
             {"role": "user", "content": "Your return is done."}]  # fmt: skip
    assert _say(later) == (STOP, 0)


def test_the_user_ignores_its_tools() -> None:
    """Telecom offers the user phone tools: the twin's user never calls one."""
    opening = [SYSTEM, {"role": "user", "content": "Hi! How can I help you today?"}]
    assert _say(opening, tools=[PHONE]) == (SCENARIO, 0)


def test_only_a_prompt_with_a_scenario_and_the_stop_token_is_a_user() -> None:
    """A scenario without the stop token, or the token without a scenario, is an ordinary chat."""
    assert user_scenario([SYSTEM]) == SCENARIO
    no_stop = {"role": "system", "content": f"<scenario>\n{SCENARIO}\n</scenario>"}
    assert user_scenario([no_stop]) is None
    assert user_scenario([{"role": "system", "content": GUIDELINES}]) is None
    assert user_scenario([{"role": "user", "content": SYSTEM["content"]}]) is None
    content, _ = _say([no_stop, {"role": "user", "content": "Hello"}])
    assert content != SCENARIO
