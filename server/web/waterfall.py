"""The run page's waterfall of attempts: each attempt as a bar on one time axis from the
run's start.

A run that paused hours for an answer would squash every bar into a sliver. A stretch in
which no attempt ran, long enough to dwarf the time attempts did run, is drawn as a short
break that says how long it was; the rest of the axis keeps one scale. What the bars say
(when each started, how long it ran or waited) is always the real time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from runtime.core.records import NodeAttempt, Run

#: a stretch with nothing running is drawn short only past this many seconds …
BREAK_AFTER = 1.0
#: … and past this share of the time the rest of the axis shows
BREAK_SHARE = 0.5
#: the width one break is drawn (percent of the axis); all of them take at most BREAKS_AT_MOST
BREAK_WIDTH = 4.0
BREAKS_AT_MOST = 30.0


@dataclass(frozen=True, slots=True)
class Break:
    """A stretch with nothing running, drawn short: from ``start`` to ``end`` (seconds since
    the epoch), at ``left`` and ``width`` percent of the axis."""

    start: float
    end: float
    left: float
    width: float

    @property
    def label(self) -> str:
        return f"⋯ {words(self.end - self.start)} waiting ⋯"


@dataclass(frozen=True, slots=True)
class Axis:
    """Where each moment of a run falls on the waterfall (percent of its width)."""

    t0: float
    end: float
    breaks: tuple[Break, ...]
    scale: float   # percent per second outside the breaks

    def at(self, t: float) -> float:
        x, last = 0.0, self.t0
        for b in self.breaks:
            if t < b.start:
                break
            if t <= b.end:   # inside a break: spread over its short width
                return b.left + b.width * (t - b.start) / (b.end - b.start)
            x, last = b.left + b.width, b.end
        return max(0.0, min(100.0, x + (t - last) * self.scale))


def axis(attempts: Sequence[NodeAttempt], run: Run) -> Axis:
    """The run's time axis, from its start to the last attempt's end, its long idle
    stretches broken."""
    t0 = run.created_at
    end = max([a.ended_at for a in attempts] + [t0 + 1e-6])
    idle: list[tuple[float, float]] = []
    reached = t0
    for a in sorted(attempts, key=lambda a: a.started_at):
        if a.started_at > reached:
            idle.append((reached, a.started_at))
        reached = max(reached, a.ended_at)
    total = end - t0
    # a stretch is broken when it is long and would take a big share of what stays on scale
    kept = total
    long = []
    for start, stop in sorted(idle, key=lambda s: s[0] - s[1]):   # longest first
        # never all of it: what stays on scale must take some time (attempts of no length, a clock
        # that stood still, would leave none to divide the axis by)
        rest = kept - (stop - start)
        if stop - start > BREAK_AFTER and stop - start > BREAK_SHARE * rest and rest > 0:
            long.append((start, stop))
            kept -= stop - start
    if not long:   # (a time so large that a microsecond is lost in it leaves no length at all)
        return Axis(t0, end, (), 100 / total if total > 0 else 0.0)
    width = min(BREAK_WIDTH, BREAKS_AT_MOST / len(long))
    scale = (100 - width * len(long)) / kept
    breaks, x, last = [], 0.0, t0
    for start, stop in sorted(long):
        x += (start - last) * scale
        breaks.append(Break(start, stop, x, width))
        x, last = x + width, stop
    return Axis(t0, end, tuple(breaks), scale)


def bars(attempts: Sequence[NodeAttempt], run: Run, shown: Axis | None = None) -> list[dict[str, Any]]:
    """Each attempt as a bar: when it started and when it ended, relative to the run's
    start, and for a later attempt how long after the one before it ended (a backoff, or
    the time a person took to answer).
    A first attempt's wait is not told: when it became ready is not recorded, and the
    run's start would count its dependencies' time as its own."""
    on = shown or axis(attempts, run)
    last_end: dict[str, float] = {}
    out = []
    for a in sorted(attempts, key=lambda a: a.started_at):
        before = last_end.get(a.node)
        left = on.at(a.started_at)
        wait = None if before is None else max(0.0, a.started_at - before)
        out.append({"node": a.node, "attempt": a.attempt, "status": a.status.value, "started_at": a.started_at,
                    "at_ms": (a.started_at - on.t0) * 1000, "run_ms": (a.ended_at - a.started_at) * 1000,
                    "wait_ms": None if wait is None else wait * 1000,
                    "at": words(a.started_at - on.t0), "ran": words(a.ended_at - a.started_at),
                    "waited": None if wait is None else words(wait),
                    "left": left, "width": max(0.3, on.at(a.ended_at) - left)})
        last_end[a.node] = a.ended_at
    return out


def mark(shown: Axis, at: float | None) -> float | None:
    """Where a past checkpoint falls on the waterfall (percent of its width)."""
    return None if at is None else shown.at(at)


def words(seconds: float) -> str:
    """A length of time as the waterfall says it: ``12.5 ms``, ``3.2 s``, ``4 min 10 s``, ``2 h 14 min``."""
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        m, s = divmod(whole, 60)
        return f"{m} min {s} s" if s else f"{m} min"
    h, m = divmod(whole // 60, 60)
    return f"{h} h {m} min" if m else f"{h} h"
