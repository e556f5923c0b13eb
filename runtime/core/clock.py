"""Clock and id sources: passed in, never patched, so tests can use fakes."""

from __future__ import annotations

import random
import secrets
import time
from typing import Protocol


class Clock(Protocol):
    def time(self) -> float:
        """Wall-clock seconds since the epoch (stored in records, used for deadlines)."""


class SystemClock:
    def time(self) -> float:
        return time.time()


class IdSource(Protocol):
    def new(self, prefix: str) -> str: ...


class RandomIds:
    """URL-safe, collision-resistant ids that sort by creation time: ``cp_`` + the
    millisecond (11 hex characters) + 64 random bits (16 hex characters).

    Time first, because ids are unique keys: a new key lands next to the last one in
    the index instead of on a random page, so a commit writes a few index pages, not
    one per row (a run's commits took about twice as long with random ids).
    """

    def __init__(self) -> None:
        # seeded from the system's entropy: ids need to be unique, not secret, and a
        # generator of our own is far cheaper than a system call per id
        self._random = random.Random(secrets.randbits(128))

    def new(self, prefix: str) -> str:
        return f"{prefix}_{int(time.time() * 1000):011x}{self._random.getrandbits(64):016x}"
