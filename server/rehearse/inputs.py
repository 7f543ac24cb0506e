"""What a rehearsed request brings in: its knobs as a budget, and the core's request from the call.

``resolve_knobs`` decides whether a chat call is rehearsed (and refuses bad knobs with a 400
either way); ``rehearsal_request`` turns the call into the pure core's ``RehearsalRequest`` with
every tool classed and its MCP annotations stripped; ``imagined_for`` finds what was imagined for
a committed call, the prediction its real result is later compared with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rehearsal_gateway.rehearsal.budget import Budget, BudgetCaps, resolve_budget
from rehearsal_gateway.rehearsal.errors import BudgetError
from rehearsal_gateway.rehearsal.request import RehearsalRequest
from rehearsal_gateway.rehearsal.risk import RiskSettings, classify, strip_annotations
from rehearsal_gateway.rehearsal.trace import ImaginedObservation, RehearsalResult
from rehearsal_gateway.rehearsal.trust import Policy

from ..chat_call import ChatCall
from ..errors import InvalidRequest

# Request fields the planner handles itself; everything else reaches the acting calls untouched.
_OWN_FIELDS = frozenset(
    (
        "model", "messages", "tools", "n", "temperature", "top_p", "max_tokens",
        "max_completion_tokens", "seed", "stream", "stream_options", "rehearsal", "user",
        "metadata", "store",
    )
)  # fmt: skip
# (``logprobs``/``top_logprobs`` do reach the acting and commit calls: the committed turn
# carries its engine's logprobs, as a pass-through answer would.)


def resolve_knobs(
    body: Mapping[str, Any],
    headers: Mapping[str, str],
    *,
    defaults: Budget,
    caps: BudgetCaps,
) -> Budget | None:
    """The request's budget when rehearsal applies to it, else ``None`` (pass-through).

    Knobs are validated whether or not rehearsal then applies, so a typo is always a 400.
    """
    try:
        budget = resolve_budget(body.get("rehearsal"), headers, defaults=defaults, caps=caps)
    except BudgetError as exc:
        raise InvalidRequest(str(exc), param=exc.param) from None
    if not budget.active or not body.get("tools") or body.get("tool_choice") == "none":
        return None
    n = body.get("n")
    if isinstance(n, int) and n > 1:
        message = "n > 1 cannot be combined with rehearsal (it commits one turn)"
        raise InvalidRequest(message, param="n")
    if budget.mode == "parallel" and budget.budget > 1 and budget.temperature == 0:
        # K samples at temperature 0 are K copies, and vLLM refuses n > 1 with greedy sampling.
        raise InvalidRequest(
            "parallel rehearsal with budget > 1 needs a temperature above 0",
            param="rehearsal.temperature",
        )
    return budget


def rehearsal_request(
    call: ChatCall, session: str, trust: Mapping[str, Policy], budget: Budget, risk: RiskSettings
) -> RehearsalRequest:
    """The core's request: each tool classed (``rehearsal.risk``), annotations stripped, since
    every engine call the planner makes offers these tools."""
    body = call.body
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
    return RehearsalRequest(
        messages=tuple(body["messages"]),
        tools=strip_annotations(body["tools"]),
        max_tokens=max_tokens if isinstance(max_tokens, int) else None,
        temperature=body.get("temperature"),
        top_p=body.get("top_p"),
        seed=body.get("seed"),
        extra={k: v for k, v in body.items() if k not in _OWN_FIELDS},
        tenant=call.tenant,
        session=session,
        trust=trust,
        risk=classify(body["tools"], budget.risk, risk),
        imagine_reads=risk.imagine_reads,
    )


def tool_name(tool: Any) -> str | None:
    function = tool.get("function") if isinstance(tool, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) else None


def imagined_for(result: RehearsalResult, signature: str) -> ImaginedObservation | None:
    """What rehearsal imagined for a committed call (its first-step observation), if anything.

    A check's veto is not imagination: it never becomes the prediction a real result is
    compared with, so it cannot move the tool's trust counts.
    """
    for trajectory in result.trajectories:
        for observation in trajectory.steps[0].observations if trajectory.steps else ():
            if observation.call.signature == signature and observation.source == "imagined":
                return observation
    return None
