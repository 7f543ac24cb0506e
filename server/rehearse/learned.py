"""The learned budget at the server's edge: what a result counts under, and the tables read back.

The pure rule is ``rehearsal.auto``; here are the three places the server meets it. When a
rehearsed turn is settled, ``anchor_of`` says which anchor tool its committed calls' real results
will count for (kept in each pending record, recorded by ``feedback.py`` when the result comes
back). Before a rehearsal runs under ``budget: "auto"``, ``learned_budgets`` turns the tenant's
stored counts into each offered tool's K. ``budget_rows`` is the ``budget`` section of
``GET /v1/rehearsals/trust``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from rehearsal_gateway.rehearsal.auto import (
    REPLACING_PATHS,
    AutoCounts,
    AutoSettings,
    auto_row,
    budget_for,
)
from rehearsal_gateway.rehearsal.request import RehearsalRequest
from rehearsal_gateway.rehearsal.risk import RiskSettings, classify
from rehearsal_gateway.rehearsal.trace import RehearsalResult
from rehearsal_gateway.rehearsal.trust import Counts, TrustSettings, policy_for


def anchor_of(result: RehearsalResult) -> tuple[str | None, bool, bool]:
    """What the learned budget (rehearsal.auto) counts a real result of this turn under: the
    anchor's (first) tool, whether imagination's veto replaced the anchor, and whether the
    anchor was imagined. No tool: not the anchored rule, an anchor that called no tool, or one
    a deterministic check replaced (no imagination was needed)."""
    if result.budget.commit != "anchored" or not result.trajectories:
        return None, False, False
    first = result.trajectories[0].steps[0]
    seen = any(o.source == "imagined" for o in first.observations)
    checked = any(o.source == "check" for o in first.observations)
    replaced = result.commit_path in REPLACING_PATHS
    if not first.turn.tool_calls or (replaced and (checked or not seen)):
        return None, False, False
    return first.turn.tool_calls[0].name, replaced, seen


def learned_budgets(
    raw: Mapping[str, Mapping[str, Any]], request: RehearsalRequest, settings: AutoSettings
) -> dict[str, tuple[int, str]]:
    """Each offered tool's learned K and why, from the tenant's stored counts ``raw``, by the
    class and trust policy the request gives it."""
    table = {tool: AutoCounts.from_mapping(row) for tool, row in raw.items()}
    return {
        tool: budget_for(tool, found.risk, request.trust.get(tool, "trusted"), table, settings)
        for tool, found in request.risk.items()
    }


def budget_rows(
    raw: Mapping[str, Mapping[str, Any]],
    trust: Mapping[str, Counts],
    trust_settings: TrustSettings,
    risk: RiskSettings,
    settings: AutoSettings,
) -> dict[str, Any]:
    """Per tool in the counts: its row (``rehearsal.auto.auto_row``) by the class the tenant's
    operator patterns give it (a request's own classes may differ) and its trust policy; and
    the settings."""
    table = {tool: AutoCounts.from_mapping(row) for tool, row in raw.items()}
    classes = classify(({"name": tool} for tool in table), (), risk)
    rows = [
        auto_row(tool, classes[tool].risk, policy_for(tool, trust, trust_settings)[0], table,
                 settings)
        for tool in sorted(table)
    ]  # fmt: skip
    return {"data": rows, "settings": dataclasses.asdict(settings)}
