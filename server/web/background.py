"""Runs the debugger's actions drive on the server's event loop, and the live-only events
(model token chunks) of those runs for the pages that follow them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from runtime import Runtime
from runtime.core.streams import StreamEvent


class LiveHub:
    """Ephemeral events (``ctx.emit(..., ephemeral=True)``: model token chunks) of runs this
    server drives, for the pages following them live: they are never stored, so a
    follower reading the store would never see them."""

    def __init__(self) -> None:
        self._queues: dict[str, set[asyncio.Queue[StreamEvent]]] = {}

    def subscribe(self, run_id: str) -> asyncio.Queue[StreamEvent]:
        queue: asyncio.Queue[StreamEvent] = asyncio.Queue(maxsize=10_000)
        self._queues.setdefault(run_id, set()).add(queue)
        return queue

    def unsubscribe(self, run_id: str, queue: asyncio.Queue[StreamEvent]) -> None:
        found = self._queues.get(run_id)
        if found is not None:
            found.discard(queue)
            if not found:
                del self._queues[run_id]

    def publish(self, event: StreamEvent) -> None:
        for queue in self._queues.get(event.run_id, ()):
            if not queue.full():   # a reader that fell far behind misses chunks, never blocks the run
                queue.put_nowait(event)


class Background(set[asyncio.Task[None]]):
    """The tasks driving runs started by actions, and where their live-only events go."""

    def __init__(self, queue: bool = False) -> None:
        super().__init__()
        self.hub = LiveHub()
        #: what answers, resumes, forks and replays set going is left to worker processes
        #: (``harness serve --workers``)
        self.queue = queue


async def start_in_background(rt: Runtime, call: Awaitable[object], tasks: set[asyncio.Task[None]]) -> str:
    """Start a call that creates or drives a run; return the run's id as soon as it is
    recorded (a validation error raises here, before anything is written)."""
    # the pages read the trace from the store: only live-only events are wanted here
    stream = rt.stream(call, recorded=False)
    first = await anext(stream)
    hub = tasks.hub if isinstance(tasks, Background) else None

    async def drain() -> None:
        async for event in stream:
            if hub is not None and event.ephemeral:   # (each run's first event is not)
                hub.publish(event)

    task = asyncio.get_running_loop().create_task(drain())
    tasks.add(task)
    task.add_done_callback(tasks.discard)
    return first.run_id
