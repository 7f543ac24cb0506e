"""Optional bearer API keys, and the tenant identity they define.

Keys are kept only as SHA-256 digests. A presented key is hashed and compared with **every**
stored digest in constant time (no early exit), so timing reveals neither which key matched nor
how much of one did. The tenant id is derived from the digest (``t_`` + 24 hex digits): stable
across restarts and replicas, safe to store in Redis and traces, and never the key itself.
Without configured keys every request belongs to ``DEFAULT_TENANT``.

``ApiKeyMiddleware`` is pure ASGI; it writes the tenant into ``scope["state"]["tenant"]``
(``request.state.tenant`` in a route). Keys never reach a log line or an error message.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import Unauthorized, error_status_and_body, log_fields
from ..telemetry.logs import ERROR_STATE_KEY

DEFAULT_TENANT = "default"
TENANT_STATE_KEY = "tenant"
OPEN_PATHS = frozenset(("/health", "/ready", "/metrics"))


def key_digest(key: str) -> bytes:
    """The stored form of an API key."""
    return hashlib.sha256(key.encode("utf-8")).digest()


def tenant_of(digest: bytes) -> str:
    """The tenant id a key's digest stands for."""
    return "t_" + digest.hex()[:24]


class ApiKeyRing:
    """The configured keys, hashed; ``authenticate`` maps an Authorization header to a tenant."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._digests = tuple(dict.fromkeys(key_digest(key) for key in keys if key))

    @property
    def enabled(self) -> bool:
        return bool(self._digests)

    def authenticate(self, authorization: str | None) -> str:
        """The caller's tenant id; raises ``Unauthorized`` for a missing or unknown key."""
        if not self.enabled:
            return DEFAULT_TENANT
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("missing API key: send 'Authorization: Bearer <key>'")
        presented = key_digest(token.strip())
        matched: bytes | None = None
        for digest in self._digests:
            if hmac.compare_digest(presented, digest):
                matched = digest
        if matched is None:
            raise Unauthorized("invalid API key")
        return tenant_of(matched)


class ApiKeyMiddleware:
    """Rejects unauthenticated requests (except the open probes) and records the tenant."""

    def __init__(self, app: ASGIApp, keyring: ApiKeyRing) -> None:
        self.app = app
        self.keyring = keyring

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        if not self.keyring.enabled or scope["path"] in OPEN_PATHS:
            state[TENANT_STATE_KEY] = DEFAULT_TENANT
            await self.app(scope, receive, send)
            return
        try:
            state[TENANT_STATE_KEY] = self.keyring.authenticate(authorization_of(scope["headers"]))
        except Unauthorized as exc:
            state[ERROR_STATE_KEY] = log_fields(exc)
            status, headers, body = refusal(exc)
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


def authorization_of(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The request's ``Authorization`` value (ASGI header names come lower-cased)."""
    for name, value in headers:
        if name == b"authorization":
            return value.decode("latin-1")
    return None


def refusal(exc: Unauthorized) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """The 401 answer to an unauthenticated request: status, head and OpenAI error envelope."""
    status, body = error_status_and_body(exc)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"www-authenticate", b"Bearer"),
    ]
    return status, headers, body
