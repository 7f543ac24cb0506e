"""The ``confirm`` answer: a destructive call held back, and the user asked instead.

With the ``confirm`` knob, when the call to commit is ``destructive`` (``rehearsal.risk``) and
rehearsal found evidence against it that it could not act on — an imagined failure, doubted or
acted on, with no clean candidate to commit instead; a failed deterministic check; a destructive
anchor without a majority of the samples and no alternative — the gateway answers with an
assistant message instead of the call. The message names the call and says why, and asks the
user to confirm. It is a deliberate change of the agent's turn: the agent framework sees a final
answer, not a tool call, and the conversation goes back to the user.

Once asked, never twice: the question carries the call's signature on one line
(``HELD_PREFIX``), and a call whose question is already in the conversation, answered by a user
message since, is committed as the rules chose it. (The model reads the user's answer; a user
who said no is a conversation in which the model does not propose the call again.)
"""

from __future__ import annotations

from collections.abc import Iterable

from .hindsight import content_text
from .messages import AssistantTurn, Message

HELD_PREFIX = "Held for confirmation: "


def question(turn: AssistantTurn, reason: str) -> AssistantTurn:
    """The assistant answer that holds ``turn``'s calls back and asks the user."""
    names = ", ".join(dict.fromkeys(call.name for call in turn.tool_calls))
    held = "\n".join(HELD_PREFIX + call.signature for call in turn.tool_calls)
    text = (
        f"I have not run {names}: it cannot be undone, and before running it I found a reason "
        f"to doubt it ({reason}). Please confirm that you want it run as follows, or tell me "
        f"what to change.\n{held}"
    )
    return AssistantTurn(content=text, finish_reason="stop")


def asked_before(messages: Iterable[Message], turn: AssistantTurn) -> bool:
    """Whether every call of ``turn`` was already held for confirmation, and the user answered."""
    wanted = {HELD_PREFIX + call.signature for call in turn.tool_calls}
    pending: set[str] = set()
    answered: set[str] = set()
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            pending |= wanted.intersection(content_text(message.get("content")).splitlines())
        elif role == "user":
            answered |= pending
            pending = set()
    return wanted <= answered
