"""Shared helpers for the benchmarks: timing, medians, temp directories, file sizes."""

from __future__ import annotations

import gc
import os
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


class BenchmarkError(AssertionError):
    """A benchmark's correctness check failed: its timing must not be reported."""


def check(condition: bool, message: str) -> None:
    if not condition:
        raise BenchmarkError(message)


@contextmanager
def fresh_dir(prefix: str) -> Iterator[str]:
    """A new empty temp directory, removed afterwards."""
    path = tempfile.mkdtemp(prefix=f"bench-{prefix}-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def settle() -> None:
    """Collect garbage before a timed region so earlier work is not charged to it."""
    gc.collect()


now = time.perf_counter


def db_size(path: str) -> int:
    """Bytes of a SQLite database: main file after ``wal_checkpoint(TRUNCATE)``, plus any WAL.

    Call it after every connection of the system under test is closed.
    """
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    size = os.path.getsize(path)
    wal = path + "-wal"
    if os.path.exists(wal):
        size += os.path.getsize(wal)
    return size


def table_sizes(path: str) -> dict[str, int]:
    """Bytes per table/index (SQLite ``dbstat``), largest first; empty if dbstat is unavailable."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC").fetchall()
    except sqlite3.OperationalError:
        return {}
    finally:
        conn.close()
    return {name: int(size) for name, size in rows}


@dataclass
class Sample:
    """Repeated observations of one quantity (seconds, bytes, counts...)."""

    values: list[float] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    def add(self, value: float) -> None:
        self.values.append(value)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def low(self) -> float:
        return min(self.values)

    @property
    def high(self) -> float:
        return max(self.values)


def fmt_us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} µs"


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms"


def fmt_s(seconds: float) -> str:
    return f"{seconds:.3f} s"


def fmt_mib(size: float) -> str:
    return f"{size / 2**20:.3f} MiB"


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table that is also valid Markdown."""
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    out = [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in rows]
    return "\n".join(out)


#: what the two LangGraph columns are, printed under every table that has them
LANGGRAPH_CONFIGS = (
    "LangGraph default = SqliteSaver as shipped (WAL, synchronous=FULL) with invoke defaults (durability=\"async\");\n"
    "LangGraph matched = durability=\"sync\" and synchronous=NORMAL: every step committed before the next starts.\n"
    "Shadow Harness commits pure steps in groups (up to group_commit = 5 ms; a crash re-runs them, as with\n"
    "durability=\"async\") and forces an effect, a pause and the run's end to disk first; synchronous=NORMAL otherwise."
)
