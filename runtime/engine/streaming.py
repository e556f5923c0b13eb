"""Streaming a call's runs live, and following a run from the store.

``stream_call`` runs a call (start, resume, fork, replay) in a task of its own whose
context carries a sink; every commit that call makes — for every run it creates or
drives — is published there and yielded in order. Stopping to read the stream
cancels the call, as cancelling an awaited ``start`` does. ``follow`` reads the same records
back from the store at a polling pace, so another process sees the same sequence
(ephemeral events excepted: they are never stored).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncGenerator, Awaitable

from ..core.records import EventType
from ..core.states import RunStatus
from ..core.streams import SINK, StreamEvent, merge_stream
from ..store.base import MAX_SEQ, CheckpointStore

#: a run still to be followed: it may record more events
_LIVE = (RunStatus.QUEUED, RunStatus.RUNNING)


class RunStream:
    """What ``Runtime.stream`` and ``Runtime.follow`` return: iterate it with ``async for``.

    A stream stops its call once it is closed. ``async for ev in rt.stream(...)`` written
    inline is closed at the event loop's next turn after the loop is left; a stream kept in a variable is closed
    by ``async with rt.stream(...) as events:`` at the end of the block, or by
    ``await events.aclose()`` (Python closes an abandoned iterator only when it is
    collected, so a ``break`` alone does not stop the call behind a kept stream)."""

    def __init__(self, events: AsyncGenerator[StreamEvent, None]):
        self._events = events

    def __aiter__(self) -> RunStream:
        return self

    async def __anext__(self) -> StreamEvent:
        return await self._events.__anext__()

    async def aclose(self) -> None:
        await self._events.aclose()

    async def __aenter__(self) -> RunStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def stream_call(call: Awaitable[object]) -> RunStream:
    return RunStream(_stream_call(call))


async def _stream_call(call: Awaitable[object]) -> AsyncGenerator[StreamEvent, None]:
    queue: asyncio.Queue[list[StreamEvent] | None] = asyncio.Queue()
    context = contextvars.copy_context()
    context.run(SINK.set, queue.put_nowait)

    async def run() -> None:
        try:
            await call
        finally:
            queue.put_nowait(None)

    task = asyncio.get_running_loop().create_task(run(), context=context)
    try:
        while (items := await queue.get()) is not None:
            for item in items:
                yield item
        await task  # the call's own error, if it raised
    finally:
        if not task.done():
            # the consumer stopped listening (break, timeout, cancel): like a caller that stops
            # awaiting start(), it cancels the call; the run ends CANCELLED, and resume continues it
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


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
            top = events[-1].seq
            # summaries of the new checkpoints only: reading every checkpoint with its node
            # states on every poll made following a long run cost more the longer it ran
            cps = [c for c in store.checkpoint_summaries(run_id, last_cp + 1, MAX_SEQ) if c.event_seq <= top]
            # the outcomes of the nodes that succeeded in the new events (the only ones a stream
            # shows), read by node: reading all of the run's on every poll made a poll cost what
            # the run had done. From the run's start all of them are new: one read is cheaper
            done = {(e.node, e.attempt) for e in events if e.type == EventType.NODE_SUCCEED and e.node}
            names = None if last_seq == 0 else {n for n, _ in done}
            writes = [w for w in store.pending_writes(run_id, nodes=names)
                      if (w.node, w.attempt) in done] if done else []
            for item in merge_stream(run_id, events, cps, writes):
                if item.seq > after_seq:
                    yield item
            last_seq = top
            last_cp = max([c.seq for c in cps], default=last_cp)
        if run.status not in _LIVE and last_seq >= run.event_seq:
            return
        await asyncio.sleep(poll)
