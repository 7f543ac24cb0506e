"""Every Redis key the gateway writes, and how long each lives: the one home for both.

All keys share one prefix (``rgw:`` by default) so an operator can find, count or drop the
gateway's data with a single pattern, and every key carries a TTL so that nothing the gateway
writes outlives its use. Tenant ids are already hashes (never API keys in clear), and argument
values never appear in a key: grounding is addressed by a hash of the canonical arguments.

    {prefix}trace:{<tenant>:<rehearsal_id>}       JSON trace of one rehearsal
    {prefix}pending:{<tenant>:<tool_call_id>}     JSON imagined observation awaiting the real result
    {prefix}memory:{<tenant>:<session>}           list of JSON memory entries, newest first, capped
    {prefix}ground:{<tenant>:<tool>}:<args_hash>  JSON real observation for exactly these arguments
    {prefix}ground-recent:{<tenant>:<tool>}       list of args hashes, newest first, capped
    {prefix}trust:{<tenant>}                      hash "{tool}:{cell}" -> count of imagined x real
                                                  outcome pairs (cells ee/eo/oe/oo/we/wo,
                                                  rehearsal.trust; tool "*" is the tenant
                                                  pooled); halved past a window
    {prefix}budget:{<tenant>}                     hash "{tool}:{cell}" -> real results of the tool's
                                                  anchors for the learned budget (cells n/f/r/rs,
                                                  rehearsal.auto); as trust's: pooled "*",
                                                  halved past the window, trust's TTL
    {prefix}limit:{<tenant>}:rate                 token bucket hash {tokens, ts}: requests/s
    {prefix}limit:{<tenant>}:calls                token bucket hash: rehearsal engine calls/min
    {prefix}limit:{<tenant>}:inflight             sorted set request id -> lease end (ms)

The braces are Redis **hash tags**: in a Redis Cluster only the part between the first ``{`` and
the next ``}`` picks the slot. The rule is that a key's tag is the narrowest identity that every
command or transaction touching it stays within. So a tool's observations and its recent list share
``{tenant:tool}`` (``save_grounding`` writes both in one transaction, ``grounding`` reads them with
one ``MGET``), while traces, pending records and memory lists, which are only ever touched one key
at a time, each get a tag of their own and spread evenly over the shards. A key that stands for a
whole tenant (the trust table, per-tenant counters or rate limits) is tagged ``{tenant}``
(``tag(tenant)``) and lands on one slot with nothing else required beside it: the trust script
touches that one key. Tagging every key by tenant alone would be simpler, but a gateway without
API keys has one tenant, and all its data would sit on one shard of the cluster. The tag comes
first in each key, so braces inside a session id or a tool name cannot move a key elsewhere; the
prefix may not contain braces for the same reason (``server/settings/``). On a single node or
behind Sentinel the tags are just characters.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

DEFAULT_PREFIX = "rgw:"


@dataclass(frozen=True, slots=True)
class Lifetimes:
    """How long each kind of key lives (seconds) and how long capped lists may grow."""

    trace_s: int = 24 * 3600
    pending_s: int = 3600
    memory_s: int = 6 * 3600
    grounding_s: int = 7 * 24 * 3600
    memory_max_entries: int = 32
    grounding_max_per_tool: int = 16
    trust_s: int = 24 * 3600  # from the last update: a tool switched off is learned anew after it
    trust_window: int = 200  # counts of one tool are halved when their total passes this
    trust_max_tools: int = 256  # per tenant; results of further tools count in the pooled row only


def args_hash(canonical_arguments: str) -> str:
    """A short, stable address for one tool's canonical JSON arguments."""
    return hashlib.blake2b(canonical_arguments.encode(), digest_size=12).hexdigest()


def tag(*parts: str) -> str:
    """A hash tag over ``parts``: keys with equal tags share a Redis Cluster slot."""
    return "{" + ":".join(parts) + "}"


@dataclass(frozen=True, slots=True)
class Keys:
    """Builds the gateway's Redis keys under one prefix."""

    prefix: str = DEFAULT_PREFIX

    def trace(self, tenant: str, rehearsal_id: str) -> str:
        return f"{self.prefix}trace:{tag(tenant, rehearsal_id)}"

    def pending(self, tenant: str, tool_call_id: str) -> str:
        return f"{self.prefix}pending:{tag(tenant, tool_call_id)}"

    def memory(self, tenant: str, session: str) -> str:
        return f"{self.prefix}memory:{tag(tenant, session)}"

    def grounding(self, tenant: str, tool: str, hashed_args: str) -> str:
        return f"{self.prefix}ground:{tag(tenant, tool)}:{hashed_args}"

    def grounding_recent(self, tenant: str, tool: str) -> str:
        return f"{self.prefix}ground-recent:{tag(tenant, tool)}"

    def trust(self, tenant: str) -> str:
        return f"{self.prefix}trust:{tag(tenant)}"

    def budget(self, tenant: str) -> str:
        return f"{self.prefix}budget:{tag(tenant)}"

    def limit(self, tenant: str, kind: str) -> str:
        """A fair-use counter of ``tenant`` (``rate``, ``calls`` or ``inflight``)."""
        return f"{self.prefix}limit:{tag(tenant)}:{kind}"

    def pattern(self) -> str:
        """A SCAN pattern matching every key this prefix owns (per node, for an operator)."""
        return f"{self.prefix}*"
