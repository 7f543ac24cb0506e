"""From settings to the parts rehearsal needs: the store, the knobs' defaults and caps.

Kept apart from ``server/app.py`` so that the lifespan reads as a list of resources and this
module as the one place where ``GatewaySettings`` become the core's value objects.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from rehearsal.budget import Budget, BudgetCaps
from rehearsal.context import PlannerSettings
from rehearsal.prompts import DEFAULT_SYSTEM_INSTRUCTION, load_system_instruction
from rehearsal.trust import TrustSettings
from server.errors import StoreUnavailable
from server.settings import GatewaySettings
from server.store.backends import InProcessStore, RedisStore, RehearsalStore
from server.store.keys import Keys, Lifetimes
from server.telemetry.readiness import CheckResult

log = logging.getLogger("rehearsal_gateway.server")

IN_PROCESS_NOTE = (
    "no Redis URL configured: using the in-process rehearsal store "
    "(memory, traces and grounding live in this process only and are lost on restart)"
)


def lifetimes(settings: GatewaySettings) -> Lifetimes:
    return Lifetimes(
        trace_s=settings.trace_ttl_s,
        pending_s=settings.pending_ttl_s,
        memory_s=settings.memory_ttl_s,
        grounding_s=settings.grounding_ttl_s,
        memory_max_entries=settings.memory_max_entries,
        grounding_max_per_tool=settings.grounding_max_per_tool,
        trust_s=settings.trust_ttl_s,
        trust_window=settings.trust_window,
    )


def open_store(settings: GatewaySettings) -> RehearsalStore:
    """Redis when a URL is configured, else the embedded in-process store (said in the log)."""
    if settings.redis_url is None:
        log.warning(IN_PROCESS_NOTE)
        return InProcessStore(lifetimes=lifetimes(settings))
    return RedisStore(
        settings.redis_url.get_secret_value(),
        keys=Keys(prefix=settings.redis_prefix),
        lifetimes=lifetimes(settings),
        timeout_s=settings.redis_timeout,
    )


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
        grounding_limit=settings.grounding_examples,
        reject_undeclared=settings.reject_undeclared_arguments,
    )


def trust_settings(settings: GatewaySettings) -> TrustSettings:
    return TrustSettings(
        enabled=settings.trust_enabled,
        min_samples=settings.trust_min_samples,
        trust_threshold=settings.trust_threshold,
        precision_threshold=settings.trust_precision_threshold,
        off_threshold=settings.trust_off_threshold,
        auto_off=settings.trust_auto_off,
        window=settings.trust_window,
        pins=dict(settings.trust_pins),
    )


@dataclass(frozen=True)
class StoreReady:
    """The store answers a ping (the in-process store always does). Not critical: see readiness."""

    store: RehearsalStore
    name: str = "store"
    critical: bool = False  # without the store the gateway still serves, degraded

    async def check(self) -> CheckResult:
        try:
            await self.store.ping()
        except StoreUnavailable as exc:
            return CheckResult(False, f"{self.store.kind}: {exc.message}")
        return CheckResult(True, self.store.kind)
