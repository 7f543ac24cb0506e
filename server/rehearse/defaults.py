"""From settings to the core's value objects: the knobs' defaults and caps, planner and trust.

The one place where ``GatewaySettings`` become ``rehearsal`` values, so the lifespan reads as a
list of parts and ``RehearsalService`` receives plain core objects.
"""

from __future__ import annotations

from rehearsal_gateway.rehearsal.auto import AutoSettings
from rehearsal_gateway.rehearsal.budget import Budget, BudgetCaps
from rehearsal_gateway.rehearsal.prompts import DEFAULT_SYSTEM_INSTRUCTION, load_system_instruction
from rehearsal_gateway.rehearsal.request import PlannerSettings
from rehearsal_gateway.rehearsal.risk import RiskPolicy, RiskSettings
from rehearsal_gateway.rehearsal.trust import TrustSettings

from ..settings import REHEARSAL_PRIORITY, GatewaySettings


def budget_defaults(settings: GatewaySettings) -> Budget:
    """The knobs' defaults; ``budget: auto`` is learned per anchor within its bound, the caps'
    ``auto_bound``."""
    if settings.rehearsal_budget == "auto":
        learned = {"budget": budget_caps(settings).auto_bound, "auto": True}
        return settings.values_for(Budget, prefix="rehearsal_", **learned)
    return settings.values_for(Budget, prefix="rehearsal_")


def budget_caps(settings: GatewaySettings) -> BudgetCaps:
    return settings.values_for(BudgetCaps)


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
        auto=settings.values_for(AutoSettings, prefix="auto_"),
    )


def trust_settings(settings: GatewaySettings) -> TrustSettings:
    return settings.values_for(TrustSettings, prefix="trust_", pins=dict(settings.trust_pins))


def rehearse_priority(settings: GatewaySettings) -> int | None:
    """The vLLM ``priority`` of rehearsal-role calls: only when the engines schedule by it."""
    return REHEARSAL_PRIORITY if settings.engine_scheduling == "priority" else None


def risk_policy(settings: GatewaySettings) -> RiskPolicy:
    """The gateway's risk settings and each tenant's (its patterns before the gateway's)."""
    default = RiskSettings(
        patterns=tuple(settings.risk_patterns.items()),
        imagine_reads=settings.risk_imagine_reads,
    )
    tenants = {
        tenant: RiskSettings(
            patterns=tuple((override.patterns or {}).items()) + default.patterns,
            imagine_reads=(
                default.imagine_reads if override.imagine_reads is None else override.imagine_reads
            ),
            require_confirm=bool(override.confirm),
        )
        for tenant, override in settings.risk_overrides.items()
    }
    return RiskPolicy(default, tenants)
