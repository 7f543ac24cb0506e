"""Readiness: the dependency checks ``/ready`` runs, and how their verdicts add up.

Each layer that owns a dependency offers its check (``EnginesReady`` beside the pool,
``StoreReady`` beside the store); the lifespan lists them and the route runs ``readiness``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class CheckResult:
    ok: bool
    detail: str


class ReadinessCheck(Protocol):
    """One dependency ``/ready`` reports: the engines, and (not critical) the store."""

    @property
    def name(self) -> str: ...

    async def check(self) -> CheckResult: ...


async def readiness(checks: list[ReadinessCheck]) -> tuple[bool, dict[str, Any]]:
    """Run every check; the overall verdict and a JSON-able report.

    A check may declare ``critical = False`` (the store): when it fails, the gateway still serves
    (rehearsal without memory), so it stays ready and reports itself ``degraded``.
    """
    report: dict[str, Any] = {}
    ready, degraded = True, False
    for item in checks:
        result = await item.check()
        if not result.ok:
            if getattr(item, "critical", True):
                ready = False
            else:
                degraded = True
        report[item.name] = {"ok": result.ok, "detail": result.detail}
    status = "not_ready" if not ready else "degraded" if degraded else "ready"
    return ready, {"status": status, "checks": report}
