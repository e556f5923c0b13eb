"""Clock and id sources: passed in, never patched, so tests can use fakes."""

from __future__ import annotations

import os
import random
import secrets
import time
from typing import Protocol


class Clock(Protocol):
    def time(self) -> float:
        """Wall-clock seconds since the epoch (stored in records, used for deadlines)."""


class SystemClock:
    #: the C function itself, not a method calling it: the run loop asks the time several
    #: times per node
    time = staticmethod(time.time)


class IdSource(Protocol):
    def new(self, prefix: str) -> str: ...


class RandomIds:
    """URL-safe, collision-resistant ids that sort by creation time: ``cp_`` + the
    millisecond (11 hex characters) + 64 random bits (16 hex characters).

    Time first, because ids are unique keys: a new key lands next to the last one in
    the index instead of on a random page, so a commit writes a few index pages, not
    one per row (a run's commits took about twice as long with random ids).
    """

    def new(self, prefix: str) -> str:
        return f"{prefix}_{int(time.time() * 1000):011x}{_RANDOM.getrandbits(64):016x}"


# Ids need to be unique, not secret: a generator seeded from the system's entropy is far
# cheaper than a system call per id. Its own (a program seeding ``random`` must not make
# two processes agree), and seeded again in a forked child, which would repeat the parent.
_RANDOM = random.Random(secrets.randbits(128))
os.register_at_fork(after_in_child=lambda: _RANDOM.seed(secrets.randbits(128)))
