"""Engines behind a router: what the gateway sends so that the router keeps a session together.

An engine configured as ``http://router:30000/v1,router=vllm-router`` is not one engine but a
router in front of a fleet (vLLM's own ``vllm-router``, a Rust load balancer shipped on PyPI).
The gateway then stops doing the router's job: it keeps no concurrency limit of its own for that
entry (unless ``max_concurrency=`` is given), does not read its queue depth, and leaves balancing,
health checks and retries across the fleet's engines to the router. What only the gateway knows
is which calls belong together: every call of one rehearsal (the ``n=K`` acting call, each
imagined observation, the commit) and every turn of one conversation. It says so in the form the
router hashes on, so they all land on the engine that holds their prefix in its KV cache.

``vllm-router`` with ``--policy consistent_hash`` takes its key from the first non-empty header of
``x-session-id``, ``x-user-id``, ``x-tenant-id``, … and only then from the body (``user``,
``session_id``) or, failing all, a hash of the whole body — which differs between the acting and
the rehearsal prompts of one rehearsal and would scatter them (``src/policies/hash_key.rs`` in
vllm-project/router). So the gateway sends ``x-session-id``. Its value is an opaque digest of the
call's affinity key (``server/engines/pool.py``: the session id, else the ``user`` field, else a
hash of the conversation's first messages): routers log their keys, and a client's session id or
user name has no business in another system's logs.

The router's ``/health`` answers 503 as soon as any one engine behind it is down, which would take
the whole fleet out of the gateway's rotation; its ``/readiness`` answers 200 while at least one
engine is healthy, which is what "this entry can serve" means, so that is what the gateway probes.

llm-d's inference scheduler is not a dialect here: its session affinity is not a key the client
chooses but a cookie the scheduler issues (``llm-d-session``, the base64 of the chosen pod's name)
for the client to echo, which needs a per-session cookie jar shared by every gateway replica;
``docs/limits.md`` says what that would take.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ..settings import RouterKind


@dataclass(frozen=True, slots=True)
class RouterDialect:
    """How one kind of router is told which calls belong together, and how it is probed."""

    kind: RouterKind
    affinity_header: str  # lower case, as HTTP/1.1 header names are compared
    health_path: str  # answers 200 while the router can serve at all

    def headers(self, affinity: bytes) -> dict[str, str]:
        """The headers that carry ``affinity`` in the form this router hashes on."""
        return {self.affinity_header: affinity_token(affinity)}


DIALECTS: dict[RouterKind, RouterDialect] = {
    "vllm-router": RouterDialect(
        kind="vllm-router", affinity_header="x-session-id", health_path="/readiness"
    ),
}


def affinity_token(affinity: bytes) -> str:
    """An opaque, stable stand-in for an affinity key: equal keys, equal tokens."""
    return "rgw-" + hashlib.blake2b(affinity, digest_size=12).hexdigest()
