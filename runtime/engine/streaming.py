"""Streaming a call's runs live, and following a run from the store.

``stream_call`` runs a call (start, resume, fork, replay) in a task of its own whose
context carries a sink; every commit that call makes — for every run it creates or
drives — is published there and yielded in order. Stopping to read the stream
cancels the call, as cancelling an awaited ``start`` does. ``follow`` reads the same records
back from the store at a polling pace, so another process sees the same sequence
(ephemeral events excepted: they are never stored).

A live stream holds at most ``buffer`` events for its reader, and the run never waits
for the reader. A batch that does not fit puts the stream *behind*: from then on
recorded events are not held but remembered as a gap (per run, up to which event and
checkpoint), and ephemeral ones are dropped and counted. Once the reader has taken
what is held, the gap is read back from the store a buffer's worth at a time (as
``follow`` reads, with the same code), a ``stream.dropped`` notice says how many
ephemeral events were lost, and the stream is live again: the reader sees the
recorded sequence with no gap and no duplicate, and memory stays bounded by
``buffer`` however slowly it reads.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn, cast

from ..core.records import CheckpointSummary, TraceEvent
from ..core.states import RunStatus
from ..core.streams import CHECKPOINT, DROPPED, SINK, StreamEvent, merge_stream
from ..history.events import succeeded_writes
from ..store.base import MAX_SEQ, CheckpointStore

log = logging.getLogger(__name__)

#: a run still to be followed: it may record more events
_LIVE = (RunStatus.QUEUED, RunStatus.RUNNING)
#: how many events a live stream holds for a reader that has not taken them yet
DEFAULT_BUFFER = 1000


class RunStream:
    """What ``Runtime.stream`` and ``Runtime.follow`` return: iterate it with ``async for``.

    A stream stops its call once it is closed. ``async for ev in rt.stream(...)`` written
    inline is closed at the event loop's next turn after the loop is left; a stream kept in a variable is closed
    by ``async with rt.stream(...) as events:`` at the end of the block, or by
    ``await events.aclose()`` (Python closes an abandoned iterator only when it is
    collected, so a ``break`` alone does not stop the call behind a kept stream)."""

    def __init__(self, events: AsyncGenerator[StreamEvent, None], held: _Buffer | None = None,
                 call: Awaitable[object] | None = None):
        self._events = events
        self._held = held
        self._call = call   # not begun until the stream is read

    @property
    def buffered(self) -> int:
        """Events published to this stream that its reader has not taken yet (never more
        than its ``buffer``; always 0 for ``follow``, which reads the store as it goes)."""
        return 0 if self._held is None else len(self._held.items)

    @property
    def run_ids(self) -> tuple[str, ...]:
        """The runs whose records were published to this stream, in the order they first
        were, whether or not the reader has taken them yet (empty for ``follow``): a caller
        cancelled before reading the first event can still say which run it stopped."""
        return () if self._held is None else tuple(self._held.runs)

    def __aiter__(self) -> RunStream:
        return self

    def __iter__(self) -> NoReturn:
        self._misread("a plain `for`")

    def __await__(self) -> NoReturn:
        self._misread("`await`")

    def _misread(self, how: str) -> NoReturn:
        # a stream read the wrong way never runs its call: close it, so that the mistake is
        # said here rather than as a "coroutine was never awaited" warning about the call
        if inspect.iscoroutine(self._call) and inspect.getcoroutinestate(self._call) == inspect.CORO_CREATED:
            self._call.close()
        raise TypeError(f"a RunStream is read with `async for ev in rt.stream(...)` (or `async with "
                        f"rt.stream(...) as events:`), not with {how}; to wait for the run without its "
                        f"events, await the call itself (`await rt.start(...)`)")

    async def __anext__(self) -> StreamEvent:
        return await self._events.__anext__()

    async def aclose(self) -> None:
        await self._events.aclose()

    async def __aenter__(self) -> RunStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


# ---------------------------------------------------------------------- reading back from the store


def _checkpoints(store: CheckpointStore, run_id: str, after: int, upto: int, top: int,
                 window: int | None) -> list[CheckpointSummary]:
    """The run's checkpoints after seq ``after`` (up to ``upto``) that reflect no event
    past ``top``. They are a prefix of those checkpoints (a later checkpoint never reflects
    an earlier event), read ``window`` at a time when given, so that reading back a long
    gap a page at a time does not read the rest of the gap with every page."""
    found: list[CheckpointSummary] = []
    while after < upto:
        cps = store.checkpoint_summaries(run_id, after + 1, upto if window is None else min(upto, after + window))
        fit = [c for c in cps if c.event_seq <= top]
        found += fit
        if window is None or not cps or len(fit) < len(cps):
            break
        after = cps[-1].seq
    return found


def _read_back(store: CheckpointStore, run_id: str, last_seq: int, last_cp: int, events: Sequence[TraceEvent],
               cp_upto: int = MAX_SEQ, window: int | None = None) -> tuple[list[StreamEvent], int, int]:
    """The stream items of ``events`` (the run's next events after ``last_seq``) and of the
    checkpoints after ``last_cp`` that reflect them: what the live stream showed of those
    records. Returns the items, and the last event and checkpoint they reach."""
    top = events[-1].seq if events else last_seq
    # summaries of the new checkpoints only: reading every checkpoint with its node
    # states on every poll made following a long run cost more the longer it ran
    cps = _checkpoints(store, run_id, last_cp, cp_upto, top, window)
    # the outcomes of the nodes that succeeded in the new events (the only ones a stream
    # shows), read by node: reading all of the run's on every poll made a poll cost what
    # the run had done. From the run's start all of them are new: one read is cheaper
    # (unless read a page at a time: the run may be far ahead of the page)
    writes = succeeded_writes(store, run_id, events, every_node=last_seq == 0 and window is None)
    return merge_stream(run_id, events, cps, writes), top, max([c.seq for c in cps], default=last_cp)


def follow(store: CheckpointStore, run_id: str, *, after_seq: int = 0, poll: float = 0.1) -> RunStream:
    """The run's stream read back from the store, until it stops (ends or pauses)."""
    return RunStream(_follow(store, run_id, after_seq, poll))


async def _follow(store: CheckpointStore, run_id: str, after_seq: int,
                  poll: float) -> AsyncGenerator[StreamEvent, None]:
    last_seq, last_cp = after_seq, -1
    while True:
        run = store.get_run(run_id)   # read first: events it counts are already committed
        events = store.events(run_id, last_seq)
        if events:
            items, last_seq, last_cp = _read_back(store, run_id, last_seq, last_cp, events)
            for item in items:
                if item.seq > after_seq:
                    yield item
        if run.status not in _LIVE and last_seq >= run.event_seq:
            return
        await asyncio.sleep(poll)


class Mirror:
    """A streamed call that hands answers to a run driven elsewhere (by another call of this
    process, or another process) and waits for it: that run's commits are published to the
    driving call's stream, not this one's. While it waits, its stream is given the run's
    events read back from the store, as ``follow`` reads them (ephemeral ones excepted), from
    where the call began, and once the wait is over, all that was committed by then; each
    wait takes up where the last one stopped."""

    POLL = 0.05

    def __init__(self, store: CheckpointStore, run_id: str, after_seq: int):
        self.store, self.run_id, self.at, self.cp = store, run_id, after_seq, -1

    async def during(self, wait: Awaitable[object]) -> None:
        sink = SINK.get()
        if sink is None:
            await wait
            return
        waiting = asyncio.ensure_future(wait)
        try:
            while True:
                over = waiting.done()   # read before the store: what it committed is then read too
                self._give(sink)
                if over:
                    break
                await asyncio.wait({waiting}, timeout=self.POLL)
        finally:
            if not waiting.done():
                waiting.cancel()
                await asyncio.gather(waiting, return_exceptions=True)
        waiting.result()

    def _give(self, sink: Callable[[list[StreamEvent]], None]) -> None:
        events = self.store.events(self.run_id, self.at)
        if events:
            items, top, self.cp = _read_back(self.store, self.run_id, self.at, self.cp, events)
            sink([i for i in items if i.seq > self.at])   # (a checkpoint carries the seq it reflects)
            self.at = top


# ---------------------------------------------------------------------- the live stream


@dataclass(slots=True)
class _Position:
    """How far a run's records have reached the reader (held, or read back): its last
    event and checkpoint; anything at or before them is delivered or before the stream.
    ``cp`` is None until the stream meets one of the run's checkpoints (a resumed run's
    first batches may have none)."""
    ev: int
    cp: int | None


@dataclass(slots=True)
class _Gap:
    """Records of one run that were not held, up to its event ``ev`` and checkpoint ``cp``
    (None: no checkpoint was missed); gaps are read back in the order they opened."""
    run_id: str
    ev: int
    cp: int | None


class _Buffer:
    """A live stream's sink (called with each commit's stream items, in the run's thread
    of control: it never blocks) and what its reader takes from."""

    def __init__(self, store: CheckpointStore, size: int, recorded: bool = True):
        self.store, self.size = store, size
        #: False: of the recorded events, only each run's first (it names the run) is held,
        #: and none is ever read back; ephemeral ones are held or dropped as usual
        self.recorded = recorded
        self.items: deque[StreamEvent] = deque()
        self.wake = asyncio.Event()
        self.ended = False
        #: every run published here, in order (a dict as an ordered set)
        self.runs: dict[str, None] = {}
        #: a batch did not fit: recorded events go to ``gaps``, ephemeral ones are counted,
        #: until the reader has taken what is held and read the gaps back
        self.behind = False
        self.gaps: list[_Gap] = []
        self.reached: dict[str, _Position] = {}
        #: per run, ephemeral events dropped while behind, and when the last one was emitted
        self.dropped: dict[str, tuple[int, float]] = {}

    def __call__(self, items: list[StreamEvent]) -> None:
        if not items:
            return   # a heartbeat's commit
        first = items[0].run_id not in self.runs
        self.runs.setdefault(items[0].run_id)
        if not self.recorded and not items[0].ephemeral:
            # where the run stands, though not held: a drop notice carries that seq
            self._reach(items)
            if first:   # held even over the bound: one per run, and the reader needs it
                self.items.append(items[0])
                self.wake.set()
            return
        if not self.behind and len(self.items) + len(items) <= self.size:
            self.items.extend(items)
            self._reach(items)
        else:
            self.behind = True
            if items[0].ephemeral:   # published one at a time (``publish_now``)
                count, _ = self.dropped.get(items[0].run_id, (0, 0.0))
                self.dropped[items[0].run_id] = (count + len(items), items[-1].at)
            else:
                self._miss(items)
        self.wake.set()

    def close(self) -> None:
        self.ended = True
        self.wake.set()

    def _position(self, items: list[StreamEvent]) -> _Position:
        """The run's position, from the first batch of it the stream meets: just before it."""
        run_id = items[0].run_id
        found = self.reached.get(run_id)
        if found is None:
            # a checkpoint item carries the seq of the (earlier) event it reflects
            found = self.reached[run_id] = _Position(
                min(e.seq if e.type == CHECKPOINT else e.seq - 1 for e in items), None)
        return found

    def _reach(self, items: list[StreamEvent]) -> None:
        if items[0].ephemeral:
            return
        at = self._position(items)
        for e in items:
            if e.type == CHECKPOINT:
                at.cp = cast(int, e.data["seq"])
            else:
                at.ev = e.seq

    def _miss(self, items: list[StreamEvent]) -> None:
        at = self._position(items)
        evs = [e.seq for e in items if e.type != CHECKPOINT]
        cps = [cast(int, e.data["seq"]) for e in items if e.type == CHECKPOINT]
        if cps and at.cp is None:   # none of its checkpoints reached the reader: these are its first
            at.cp = min(cps) - 1
        run_id = items[0].run_id
        gap = self.gaps[-1] if self.gaps and self.gaps[-1].run_id == run_id else None
        if gap is None:
            gap = _Gap(run_id, at.ev, None)
            self.gaps.append(gap)
        gap.ev = max([gap.ev, *evs])
        if cps:
            gap.cp = max([gap.cp if gap.cp is not None else -1, *cps])

    def read_back(self) -> list[StreamEvent]:
        """The next page (at most ``size`` events) of the first gap, from the store: the
        store holds everything published to the sink (each commit is published after it)."""
        gap = self.gaps[0]
        at = self.reached[gap.run_id]
        last_cp = at.cp if at.cp is not None else -1
        cp_upto = gap.cp if gap.cp is not None else last_cp
        events = self.store.events(gap.run_id, at.ev, min(self.size, gap.ev - at.ev)) if at.ev < gap.ev else []
        items, ev, cp = _read_back(self.store, gap.run_id, at.ev, last_cp, events, cp_upto, self.size)
        if not items:   # the store lacks what was published: never wait for it forever
            log.warning("run %s: events %d to %d of a stream could not be read back", gap.run_id, at.ev + 1, gap.ev)
            ev, cp = gap.ev, cp_upto
        at.ev = ev
        if cp >= 0:
            at.cp = cp
        if at.ev >= gap.ev and (gap.cp is None or cp >= gap.cp):
            self.gaps.pop(0)
        return items

    def caught_up(self) -> list[StreamEvent]:
        """Live again: a notice for each run whose ephemeral events were dropped."""
        self.behind = False
        notices = [StreamEvent(run_id, self.reached[run_id].ev if run_id in self.reached else 0, DROPPED,
                               data={"count": count}, at=at, ephemeral=True)
                   for run_id, (count, at) in self.dropped.items()]
        self.dropped = {}
        return notices


def stream_call(call: Awaitable[object], store: CheckpointStore, buffer: int = DEFAULT_BUFFER,
                recorded: bool = True) -> RunStream:
    held = _Buffer(store, buffer, recorded)
    return RunStream(_stream_call(call, held), held, call)


async def _stream_call(call: Awaitable[object], held: _Buffer) -> AsyncGenerator[StreamEvent, None]:
    context = contextvars.copy_context()
    context.run(SINK.set, held)

    async def run() -> None:
        try:
            await call
        finally:
            held.close()

    task = asyncio.get_running_loop().create_task(run(), context=context)
    try:
        while True:
            # each branch decides without awaiting: nothing is published in between
            if held.items:
                yield held.items.popleft()
            elif held.gaps:
                for item in held.read_back():
                    yield item
            elif held.behind:
                for item in held.caught_up():
                    yield item
            elif held.ended:
                break
            else:
                held.wake.clear()
                await held.wake.wait()
        await task  # the call's own error, if it raised
    finally:
        if not task.done():
            # the consumer stopped listening (break, timeout, cancel): like a caller that stops
            # awaiting start(), it cancels the call; the run ends CANCELLED, and resume continues it
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
