"""The typed state the lifespan builds and every route reads (``request.state.gateway``).

One object holds every resource of a running app, so a route never reaches for a global and a
later feature (the rehearsal store, its service) adds a field here and a line in the lifespan.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.requests import Request

from ..chat.responses import ResponsesService
from ..chat.service import ChatService
from ..engines.client import EngineClient
from ..engines.pool import EnginePool
from ..rehearse.service import RehearsalService
from ..settings import GatewaySettings
from ..store.backends import RehearsalStore
from ..store.fair_use import FairUse
from ..telemetry.metrics import GatewayMetrics
from ..telemetry.readiness import ReadinessCheck
from .auth import DEFAULT_TENANT, TENANT_STATE_KEY, ApiKeyRing

STATE_KEY = "gateway"
MODE_STATE_KEY = "mode"
OUTCOME_STATE_KEY = "outcome"  # set by a route when the status alone does not tell (degraded)
REHEARSAL_STATE_KEY = "rehearsal"  # the response's rehearsal summary, for the request's log line
RELAYED_STATE_KEY = "relayed"  # the relayed route's path template (``server/chat/relayed.py``)
CONTENT_STATE_KEY = "log_content"  # the request's messages, only when RGW_LOG_CONTENT=true


@dataclass(frozen=True, eq=False)
class GatewayState:
    """Everything a running gateway owns."""

    settings: GatewaySettings
    metrics: GatewayMetrics
    keyring: ApiKeyRing
    pool: EnginePool
    engines: EngineClient
    chat: ChatService
    store: RehearsalStore
    rehearsal: RehearsalService
    responses: ResponsesService
    checks: list[ReadinessCheck] = field(default_factory=list)
    fair_use: FairUse | None = None  # None: no limit configured (server/http/limits.py)


def gateway_of(request: Request) -> GatewayState:
    """The app's state, as the lifespan handed it over (read from the scope's ``state`` dict,
    which ``request.state`` wraps, without building the wrapper)."""
    state: GatewayState = request.scope["state"][STATE_KEY]
    return state


def tenant_of_request(request: Request) -> str:
    """The caller's tenant id, as ``ApiKeyMiddleware`` recorded it."""
    tenant: str = request.scope["state"].get(TENANT_STATE_KEY, DEFAULT_TENANT)
    return tenant
