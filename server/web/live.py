"""Live updates over server-sent events, fed by the runtime's event stream.

``/runs/{id}/live`` follows a run from the store (as another process would, so it
works for runs driven anywhere): each recorded event becomes a line of the live log,
run events update the status badge, checkpoints ask the page to refresh its panels
(``hx-trigger="sse:checkpoint"``), and an ``end`` event closes the stream when the
run ends or pauses. The page of a paused run holds no stream: it asks ``/runs/{id}/moved``
every few seconds, and reloads once the run has moved past what it shows (answered or
cancelled from another tab or process), following it from there if it runs.
``/inbox/live`` says when the set of pending questions changes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from litestar import Request, Response, get
from litestar.params import FromPath, FromQuery, QueryParameter
from litestar.response import ServerSentEvent, ServerSentEventMessage
from litestar.status_codes import HTTP_204_NO_CONTENT

from runtime.core.records import InterruptStatus
from runtime.core.states import RunStatus
from runtime.core.streams import DROPPED, StreamEvent

from .render import ENV, badge_html
from .background import Background, LiveHub
from .services import MAX_INT, complete, in_thread

#: how often the inbox stream looks for new or answered questions (seconds)
INBOX_POLL = 1.0
#: the longest one live connection is kept open; the browser reconnects after it, going on
#: from the last event it was sent (``Last-Event-ID``)
MAX_LIFETIME = 30 * 60
#: how often the page of a paused run asks whether the run moved on (seconds)
MOVED_EVERY = 2


def _line(ev: StreamEvent) -> str:
    text = ENV.from_string(
        '<div class="ev ev-{{ t }}"><span class="mono">#{{ e.seq }}</span> {{ e.type }}'
        '{% if e.node %} <strong>{{ e.node }}</strong>{% endif %}'
        '{% if e.type == "custom" %} <code>{{ payload }}</code>{% endif %}</div>')
    return text.render(e=ev, t=ev.type.replace(".", "-"), payload=json.dumps(ev.data.get("payload"), default=str)[:300])


async def merged(recorded: AsyncIterator[StreamEvent], hub: LiveHub | None,
                 run_id: str) -> AsyncIterator[StreamEvent]:
    """The run's recorded events as read from the store, with the live-only events this
    server sees for it interleaved as they arrive; ends with the recorded stream."""
    if hub is None:
        async for ev in recorded:
            yield ev
        return
    queue = hub.subscribe(run_id)
    next_recorded: asyncio.Future[StreamEvent] = asyncio.ensure_future(anext(recorded))
    next_live: asyncio.Future[StreamEvent] = asyncio.ensure_future(queue.get())
    try:
        while True:
            done, _ = await asyncio.wait({next_recorded, next_live}, return_when=asyncio.FIRST_COMPLETED)
            if next_live in done:
                yield next_live.result()
                next_live = asyncio.ensure_future(queue.get())
            if next_recorded in done:
                try:
                    ev = next_recorded.result()
                except StopAsyncIteration:
                    return
                yield ev
                next_recorded = asyncio.ensure_future(anext(recorded))
    finally:
        next_live.cancel()
        next_recorded.cancel()
        hub.unsubscribe(run_id, queue)


def _chunk(ev: StreamEvent) -> str:
    """A live-only payload as text: a model's token chunk ({"token": ...} or {"text": ...})
    as itself, anything else as JSON; a ``stream.dropped`` notice as how many were missed."""
    if ev.type == DROPPED:
        return ENV.from_string('<span class="chunk dropped">[{{ n }} live-only events missed]</span>').render(
            n=ev.data.get("count"))
    payload = ev.data.get("payload")
    text = payload.get("token", payload.get("text")) if isinstance(payload, dict) else None
    shown = text if isinstance(text, str) else json.dumps(payload, default=str)[:300]
    return ENV.from_string('<span class="chunk" title="{{ node }}">{{ text }}</span>').render(node=ev.node or "", text=shown)


@get("/runs/{run_id:str}/live", include_in_schema=False)
async def run_live(request: Request[Any, Any, Any], run_id: FromPath[str],
                   after: Annotated[int, QueryParameter(ge=0, le=MAX_INT)] = 0) -> ServerSentEvent:
    rt = request.app.state.runtime
    await in_thread(lambda: complete(rt.get_run(run_id)))   # 404 before the stream starts
    # the browser reconnecting names the last event it was sent: go on after it, not from the start
    last = request.headers.get("last-event-id", "")
    if last.isascii() and last.isdigit() and int(last) <= MAX_INT:
        after = max(after, int(last))

    tasks = request.app.state.tasks
    hub = tasks.hub if isinstance(tasks, Background) else None

    async def stream() -> AsyncIterator[ServerSentEventMessage]:
        loop = asyncio.get_running_loop()
        until, sent = loop.time() + MAX_LIFETIME, False
        async for ev in merged(rt.follow(run_id, after_seq=after, poll=0.2), hub, run_id):
            if ev.ephemeral:   # a token chunk of a run this server drives: shown as it arrives
                yield ServerSentEventMessage(event="chunk", data=_chunk(ev))
                continue
            if ev.type == "checkpoint":
                yield ServerSentEventMessage(event="checkpoint", data=str(ev.data.get("seq", "")))
                continue
            if sent and loop.time() > until:
                # closed without ``end``, before this event (what came with the last one sent,
                # its checkpoint, has gone too): the browser reconnects by itself, after the
                # last event it was sent (the page's ``sse-close`` would stop following a run
                # that still goes on)
                return
            yield ServerSentEventMessage(event="event", data=_line(ev), id=ev.seq)
            sent = True
            if ev.type.startswith("run."):
                status = str(ev.data.get("status", ""))
                if status:
                    yield ServerSentEventMessage(event="status", data=badge_html(status))
        run = await in_thread(lambda: complete(rt.get_run(run_id)))
        yield ServerSentEventMessage(event="status", data=badge_html(run.status.value))
        yield ServerSentEventMessage(event="end", data=run.status.value)

    return ServerSentEvent(stream())


@get("/runs/{run_id:str}/moved", include_in_schema=False)
async def run_moved(request: Request[Any, Any, Any], run_id: FromPath[str], after: FromQuery[int]) -> Response[None]:
    """Whether a paused run moved past event ``after``: nothing (204) while it has not, a
    page reload (``HX-Refresh``) once it has."""
    rt = request.app.state.runtime
    run = await in_thread(lambda: complete(rt.get_run(run_id)))
    if run.status == RunStatus.INTERRUPTED and run.event_seq <= after:
        return Response(None, status_code=HTTP_204_NO_CONTENT)
    return Response(None, headers={"HX-Refresh": "true"})


@get("/inbox/live", include_in_schema=False)
async def inbox_live(request: Request[Any, Any, Any]) -> ServerSentEvent:
    rt = request.app.state.runtime

    async def stream() -> AsyncIterator[ServerSentEventMessage]:
        seen: frozenset[str] | None = None
        loop = asyncio.get_running_loop()
        until = loop.time() + MAX_LIFETIME
        while loop.time() < until:
            pending = await in_thread(rt.store.interrupts, None, InterruptStatus.PENDING)
            now = frozenset(i.id for i in pending)
            if seen is not None and now != seen:
                yield ServerSentEventMessage(event="changed", data=str(len(now)))
            elif seen is None:
                yield ServerSentEventMessage(event="count", data=str(len(now)))
            seen = now
            await asyncio.sleep(INBOX_POLL)
        yield ServerSentEventMessage(event="end", data="")

    return ServerSentEvent(stream())


HANDLERS = [run_live, run_moved, inbox_live]
