"""Clock and id sources: passed in, never patched, so tests can use fakes."""

from __future__ import annotations

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
    """Short, URL-safe, collision-resistant ids: ``run_`` + 20 hex characters (80 bits)."""

    def new(self, prefix: str) -> str:
        return f"{prefix}_{secrets.token_hex(10)}"
