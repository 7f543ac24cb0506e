"""One upstream engine as the pool sees it: its addresses, limits, live load and health state.

An ``Engine`` also keeps the tasks waiting for its bytes and since when (``watch``/``unwatch``),
so that the stall watch can tell calls that wait in silence (``longest_wait``,
``server/engines/stalls.py``), and when its probes or a canary find it hung the pool can abort
them at once (``abort_calls``) and each caller can tell that abort from any other cancellation
(``take_abort``) and move the call elsewhere. The headers each call to it carries
(``call_headers``) and the reading of its probe answers (``/metrics``, ``/v1/models``, into a
``Probe``) live here too.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson

from ..settings import EngineSpec, Role
from ..telemetry.logs import engine_request_id
from .routers import DIALECTS, RouterDialect
from .yielding import RealWork

# A router queues and sheds load across its fleet itself (vllm-router: --max-concurrent-requests,
# --queue-size); a per-entry cap sized for one engine would throttle the whole fleet.
ROUTER_CONCURRENCY = 1_000_000

JSON = "application/json"
# Bytes are relayed as the engine sent them: never a compressed answer.
JSON_HEADERS = {"content-type": JSON, "accept-encoding": "identity"}


@dataclass(frozen=True, slots=True)
class Probe:
    """What one health check learned about an engine."""

    healthy: bool
    queue_depth: float = 0.0
    timed_out: bool = False  # no answer in time (busy or hung), as opposed to a refusal or an error
    generated: float | None = None  # the engine's vllm:generation_tokens_total, when it tells
    models: tuple[str, ...] = ()
    cards: tuple[dict[str, Any], ...] = ()  # the engine's /v1/models entries, as it wrote them
    reason: str = ""  # why an unhealthy probe failed, in a few words, for the operator's log


@dataclass(eq=False, slots=True)
class Engine:
    """One upstream engine and its live state."""

    spec: EngineSpec
    max_concurrency: int
    # Of those, how many rehearsal-role calls may hold at once (``rehearsal_slots``); the rest
    # stay free for real work. 0: no cap of its own (``max_concurrency``).
    rehearse_limit: int = 0
    group: str = ""  # the discovered name this engine is one address of; "" when configured
    name: str = ""
    base_url: str = ""  # ends in /v1
    root_url: str = ""  # where /health and /metrics live
    headers: dict[str, str] = field(default_factory=dict)  # sent on every call (Host, for TLS)
    server_name: str | None = None  # the TLS name to check when the URL holds an address
    models: tuple[str, ...] = ()
    cards: tuple[dict[str, Any], ...] = ()
    healthy: bool = False
    in_flight: int = 0  # slots taken: one per choice a call asks for (``slots_for``)
    rehearse_in_flight: int = 0  # of ``in_flight``, rehearsal's (its calls, acting candidates)
    queue_depth: float = 0.0
    router: RouterDialect | None = None
    failures: int = 0  # consecutive failed calls (passive health)
    probe_failures: int = 0  # consecutive failed probes not excused by traffic (active health)
    progress_at: float = 0.0  # time.monotonic() of the last byte of real traffic
    probed_at: float = 0.0  # when the previous probe round started
    hung: bool = False  # taken out by probes: nothing answered at all
    down_reason: str = ""  # the last failed probe's reason while the engine is out
    down_logged_at: float = 0.0  # time.monotonic() of the last warning that it is still out
    # Taken out by the stall watch: calls and a canary went unanswered while its probes passed;
    # only an answered canary brings it back (server/engines/stalls.py).
    stalled: bool = False
    probe_passed: bool = False  # the last probe's verdict, whatever the engine's state
    canary_at: float = 0.0  # when the last canary was sent
    generated: float = -1.0  # vllm:generation_tokens_total at the last probe; -1: never read
    # Tasks awaiting this engine's bytes, each with the time.monotonic() it began to wait.
    waiters: dict[asyncio.Task[Any], float] = field(default_factory=dict)
    aborted: set[asyncio.Task[Any]] = field(default_factory=set)
    real: RealWork = field(default_factory=RealWork)  # acting calls, imaginations yielding
    _key: bytes = b""

    def __post_init__(self) -> None:
        self.name = self.spec.label
        url = self.spec.url
        self.base_url = url if url.endswith("/v1") else url + "/v1"
        self.root_url = self.base_url.removesuffix("/v1")
        self.models = (self.spec.model,) if self.spec.model else ()
        self._key = self.name.encode()
        if self.spec.tls_name:
            port = urlsplit(url).port
            self.headers = {"host": f"{self.spec.tls_name}:{port}" if port else self.spec.tls_name}
            self.server_name = self.spec.tls_name
        self.router = DIALECTS[self.spec.router] if self.spec.router else None
        if not self.rehearse_limit:
            self.rehearse_limit = self.max_concurrency

    @property
    def health_path(self) -> str:
        return self.router.health_path if self.router else "/health"

    @property
    def roles(self) -> frozenset[Role]:
        return self.spec.roles

    @property
    def free_slots(self) -> int:
        return self.max_concurrency - self.in_flight

    def slots_for(self, role: Role, samples: int = 1, candidates: int = 0) -> tuple[int, int]:
        """(slots, of them rehearsal's) that a call of ``role`` for ``samples`` choices takes.

        vLLM runs each of a request's ``n`` choices as a sequence of its batch, so a call takes
        one slot per choice. Every choice of a rehearsal call is rehearsal's; of an acting call's,
        the ``candidates`` that rehearsal asked for beside the real one (parallel rehearsal's
        K−1 extra acting samples) are held to rehearsal's share too. Capped so that one call
        always fits an idle engine.
        """
        if samples == 1 and not candidates and role != "rehearse":
            return 1, 0  # one real choice, what almost every call is (3 calls per pass-through)
        slots = max(1, min(samples, self.max_concurrency))
        share = slots if role == "rehearse" else min(candidates, slots - 1)
        return slots, min(share, self.rehearse_limit)

    def has_room_for(self, role: Role, samples: int = 1, candidates: int = 0) -> bool:
        """Whether a call of ``role`` may take its slots: rehearsal's part also within its share."""
        slots, share = self.slots_for(role, samples, candidates)
        if self.in_flight + slots > self.max_concurrency:
            return False
        return share == 0 or self.rehearse_in_flight + share <= self.rehearse_limit

    @property
    def load(self) -> float:
        """Share of the engine's capacity in use, counting what waits in its own queue."""
        return (self.in_flight + self.queue_depth) / self.max_concurrency

    def score(self, affinity: bytes) -> int:
        """Rendezvous-hash weight of this engine for an affinity key."""
        digest = hashlib.blake2b(affinity + self._key, digest_size=8).digest()
        return int.from_bytes(digest, "big")

    # ---- calls waiting on this engine (so a hung engine's calls can be moved at once)

    def watch(self) -> asyncio.Task[Any]:
        """Register the current task as waiting for this engine's bytes; ``unwatch`` after."""
        task = asyncio.current_task()
        assert task is not None  # engine calls run in tasks
        self.waiters[task] = time.monotonic()
        return task

    def unwatch(self, task: asyncio.Task[Any]) -> None:
        self.waiters.pop(task, None)

    def longest_wait(self, now: float) -> float:
        """Seconds the call waiting longest on this engine has waited (0 when none waits)."""
        return now - min(self.waiters.values(), default=now)

    def abort_calls(self) -> int:
        """Cancel every task waiting on this engine; each sees ``take_abort`` true."""
        for task in self.waiters:
            self.aborted.add(task)
            task.cancel()
        count = len(self.waiters)
        self.waiters.clear()
        return count

    def take_abort(self, task: asyncio.Task[Any]) -> bool:
        """Whether ``task``'s cancellation was this engine's abort (then it is undone).

        False when it was not, or when another cancellation (the client left, a deadline) is
        pending as well: that one wins and the ``CancelledError`` must go on.
        """
        if task not in self.aborted:
            return False
        self.aborted.discard(task)
        task.uncancel()
        return task.cancelling() == 0

    def progressed(self) -> None:
        """Real traffic came back: the engine is alive, and its failure streak ends."""
        self.progress_at = time.monotonic()
        self.failures = 0


def engine_headers(engine: Engine, role: str) -> dict[str, str]:
    """Headers of one engine call: JSON, the request's id (derived for rehearsal calls), and the
    ``Host`` an engine with a TLS name is addressed by.

    vLLM takes ``X-Request-Id`` as its own request id (its logs, its response ``id``), so the
    engine's log lines can be matched to the gateway's request line.
    """
    headers = JSON_HEADERS
    request_id = engine_request_id(role)
    if request_id is not None:
        headers = {**headers, "x-request-id": request_id}
    if engine.headers:
        headers = {**headers, **engine.headers}
    return headers


def call_headers(engine: Engine, role: str, affinity: bytes) -> dict[str, str]:
    """``engine_headers``, plus the affinity key in the form a router hashes on.

    vllm-router reads ``x-session-id`` before ``x-request-id``, so the per-call request id
    above does not scatter one rehearsal's calls (``server/engines/routers.py``).
    """
    headers = engine_headers(engine, role)
    if engine.router is None:
        return headers
    return {**headers, **engine.router.headers(affinity)}


def concurrency_limit(spec: EngineSpec, default: int) -> int:
    """How many calls the gateway lets one entry carry at once."""
    if spec.max_concurrency:
        return spec.max_concurrency
    return ROUTER_CONCURRENCY if spec.router else default


def rehearsal_slots(spec: EngineSpec, limit: int, share: float) -> int:
    """How many of an entry's ``limit`` slots rehearsal-role calls may hold at once.

    ``share`` of them, rounded down, at least one (rehearsal must be able to run at all). An
    engine that serves no acting calls has no real work to keep slots for: all of them.
    """
    if share >= 1 or "act" not in spec.roles:
        return limit
    return max(1, int(limit * share + 1e-9))  # 1e-9: 100 x 0.29 is 28.999...


# ---- reading probe answers


def _samples(exposition: str, name: str) -> list[float]:
    """The values of every sample of the family member ``name`` in a Prometheus exposition."""
    values = []
    for line in exposition.splitlines():
        if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " "):
            try:
                values.append(float(line.rsplit(" ", 1)[1]))
            except (IndexError, ValueError):
                continue
    return values


def queue_depth(exposition: str) -> float:
    """The sum of ``vllm:num_requests_waiting`` samples in a Prometheus exposition."""
    return sum(_samples(exposition, "vllm:num_requests_waiting"))


def generated_tokens(exposition: str) -> float | None:
    """The sum of ``vllm:generation_tokens_total`` samples (None when the engine has none).

    vLLM adds to it at every engine step, so a rise shows the engine generating even while
    no answer of a long non-streamed call has come back yet.
    """
    values = _samples(exposition, "vllm:generation_tokens_total")
    return sum(values) if values else None


def model_cards(body: bytes) -> tuple[dict[str, Any], ...]:
    """The entries of an OpenAI ``/v1/models`` answer that have an id (empty when not one)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ()
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return ()
    return tuple(
        item for item in items if isinstance(item, dict) and isinstance(item.get("id"), str)
    )


def model_ids(cards: tuple[dict[str, Any], ...]) -> tuple[str, ...]:
    """The ids of ``/v1/models`` entries."""
    return tuple(card["id"] for card in cards)
