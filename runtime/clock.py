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
    """Short, URL-safe, collision-resistant ids: ``run_`` + 16 base32 characters (80 bits)."""

    _ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"

    def new(self, prefix: str) -> str:
        n = secrets.randbits(80)
        chars = []
        for _ in range(16):
            n, r = divmod(n, 32)
            chars.append(self._ALPHABET[r])
        return f"{prefix}_{''.join(chars)}"
