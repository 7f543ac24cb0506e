"""Engine discovery: one DNS name standing for every engine behind it.

An engine configured as ``http://vllm-engines:8000/v1,discover=dns`` is a *group*: the host is
resolved, and each address it resolves to becomes one engine (``http://10.0.3.7:8000/v1``, named
``vllm-engines:8000/10.0.3.7``). On Kubernetes the name is a headless Service, whose DNS answer is
the addresses of its ready pods, so scaling the engine Deployment up or down changes the answer
and the gateway follows within ``discovery_interval`` seconds, without a restart.

A resolution that fails (timeout, NXDOMAIN, resolver down) or comes back empty keeps the group as
it was: dropping every engine on a DNS hiccup would turn a blip into an outage, and an address
that really went away fails its health checks and stops getting calls anyway. A group that never
resolved has no engines; requests for it get 503 until it does. New engines are probed before
they take calls.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from ..settings import EngineSpec
from .pool import Engine, EnginePool, Probe

log = logging.getLogger("rehearsal_gateway.discovery")

Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
Prober = Callable[[Engine], Awaitable[Probe]]
DEFAULT_PORTS = {"http": 80, "https": 443}


async def resolve_system(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to through the system resolver, sorted, without repeats."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    # IPv6 link-local answers carry a scope ("fe80::1%eth0"); a URL cannot, so drop the scope.
    return sorted({str(info[4][0]).partition("%")[0] for info in infos})


def target(spec: EngineSpec) -> tuple[str, int]:
    """The host and port a discovered group's URL names."""
    parts = urlsplit(spec.url)
    return parts.hostname or "", parts.port or DEFAULT_PORTS[parts.scheme]


def expand(spec: EngineSpec, addresses: Sequence[str]) -> list[EngineSpec]:
    """One engine per address: the group's URL with the host replaced, named after the group."""
    parts = urlsplit(spec.url)
    userinfo = parts.netloc.rpartition("@")[0]
    _, port = target(spec)
    specs = []
    for address in addresses:
        literal = f"[{address}]" if ":" in address else address  # IPv6 in brackets
        netloc = f"{userinfo}@{literal}:{port}" if userinfo else f"{literal}:{port}"
        url = urlunsplit(parts._replace(netloc=netloc))
        name = f"{spec.label}/{address}"
        # TLS still checks the name the group was given, not the address it resolved to.
        tls_name = spec.tls_name or (parts.hostname if parts.scheme == "https" else None)
        update = {"url": url, "name": name, "discover": None, "tls_name": tls_name}
        specs.append(spec.model_copy(update=update))
    return specs


@dataclass
class EngineDiscovery:
    """Keeps each discovered group of the pool equal to what its name resolves to now."""

    pool: EnginePool
    groups: Sequence[EngineSpec]
    probe: Prober
    default_concurrency: int
    resolver: Resolver = resolve_system
    timeout: float = 5.0
    _known: dict[str, tuple[str, ...]] = field(default_factory=dict)

    async def refresh(self) -> None:
        """Resolve every group once, apply the changes, and probe the engines that joined."""
        joined: list[Engine] = []
        for spec in self.groups:
            joined += await self._refresh_group(spec)
        if joined:
            await self.pool.check(joined, self.probe)

    async def _refresh_group(self, spec: EngineSpec) -> list[Engine]:
        host, port = target(spec)
        try:
            async with asyncio.timeout(self.timeout):
                addresses = tuple(sorted(set(await self.resolver(host, port))))
        except (OSError, TimeoutError) as exc:
            self._keep(host, spec, repr(exc))
            return []
        if not addresses:
            self._keep(host, spec, "no addresses")
            return []
        if addresses == self._known.get(spec.label):
            return []
        self._known[spec.label] = addresses
        log.info("%s resolves to %d address(es): %s", host, len(addresses), ", ".join(addresses))
        return self.pool.replace_group(
            spec.label, expand(spec, addresses), self.default_concurrency
        )

    def _keep(self, host: str, spec: EngineSpec, why: str) -> None:
        kept = len(self._known.get(spec.label, ()))
        log.warning("could not resolve %s (%s); keeping its %d engine(s)", host, why, kept)

    async def run(self, interval: float) -> None:
        """Re-resolve every ``interval`` seconds (a lifespan task, cancelled at shutdown)."""
        while True:
            await asyncio.sleep(interval)
            await self.refresh()
