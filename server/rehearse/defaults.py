"""From settings to the core's value objects: the knobs' defaults and caps, planner and trust.

The one place where ``GatewaySettings`` become ``rehearsal`` values, so the lifespan reads as a
list of parts and ``RehearsalService`` receives plain core objects.
"""

from __future__ import annotations

from rehearsal.budget import Budget, BudgetCaps
from rehearsal.context import PlannerSettings
from rehearsal.prompts import DEFAULT_SYSTEM_INSTRUCTION, load_system_instruction
from rehearsal.trust import TrustSettings
from server.settings import REHEARSAL_PRIORITY, GatewaySettings


def budget_defaults(settings: GatewaySettings) -> Budget:
    return Budget(
        mode=settings.rehearsal_mode,
        budget=settings.rehearsal_budget,
        depth=settings.rehearsal_depth,
        commit=settings.rehearsal_commit,
        deadline_ms=settings.rehearsal_deadline_ms,
        temperature=settings.rehearsal_temperature,
        top_p=settings.rehearsal_top_p,
        early_exit=settings.rehearsal_early_exit,
        repair=settings.rehearsal_repair,
    )


def budget_caps(settings: GatewaySettings) -> BudgetCaps:
    return BudgetCaps(
        max_budget=settings.max_budget,
        max_depth=settings.max_depth,
        max_deadline_ms=settings.max_deadline_ms,
    )


def planner_settings(settings: GatewaySettings) -> PlannerSettings:
    instruction = DEFAULT_SYSTEM_INSTRUCTION
    if settings.simulator_prompt_file:
        instruction = load_system_instruction(settings.simulator_prompt_file)
    return PlannerSettings(
        system_instruction=instruction,
        memory_tokens=settings.memory_note_tokens,
        rehearse_max_tokens=settings.rehearse_max_tokens,
        grounding_limit=settings.grounding_examples,
        reject_undeclared=settings.reject_undeclared_arguments,
        probe_rate=settings.trust_probe_rate,
    )


def trust_settings(settings: GatewaySettings) -> TrustSettings:
    return TrustSettings(
        enabled=settings.trust_enabled,
        min_samples=settings.trust_min_samples,
        trust_threshold=settings.trust_threshold,
        lift_threshold=settings.trust_lift_threshold,
        risk_ratio=settings.trust_risk_ratio,
        min_vetoes=settings.trust_min_vetoes,
        off_threshold=settings.trust_off_threshold,
        auto_off=settings.trust_auto_off,
        window=settings.trust_window,
        pins=dict(settings.trust_pins),
    )


def rehearse_priority(settings: GatewaySettings) -> int | None:
    """The vLLM ``priority`` of rehearsal-role calls: only when the engines schedule by it."""
    return REHEARSAL_PRIORITY if settings.engine_scheduling == "priority" else None
