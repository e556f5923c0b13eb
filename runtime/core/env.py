"""The environment a Runtime hands to the layers below it: frozen, passed in.

Nothing below the facade reads the facade; whatever varies between deployments
(clock, ids, who owns a lease and for how long, how commits are grouped, where sync
nodes run) arrives here, so tests pass fakes instead of patching.
"""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass

from .clock import Clock, IdSource

__all__ = ["Environment"]


@dataclass(frozen=True, slots=True)
class Environment:
    clock: Clock
    ids: IdSource
    #: who holds leases taken here: "host:pid:random" (the PID lets a peer on the same
    #: host see that the owner died without waiting out the lease)
    owner: str
    lease_ttl: float
    #: how often a running run renews its lease and polls for a cancel request
    heartbeat: float
    #: how long pure node outcomes may wait to share a commit (0: commit every step)
    group_commit: float
    #: where sync node functions run; sized above the concurrency bound (see Runtime)
    pool: Executor
    #: the per-Runtime bound on node attempts in flight, across all its runs
    max_concurrency: int

    def now(self) -> float:
        return self.clock.time()
