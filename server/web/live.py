"""Live updates over server-sent events, fed by the runtime's event stream.

``/runs/{id}/live`` follows a run from the store (as another process would, so it
works for runs driven anywhere): each recorded event becomes a line of the live log,
run events update the status badge, checkpoints ask the page to refresh its panels
(``hx-trigger="sse:checkpoint"``), and an ``end`` event closes the stream when the
run ends or pauses. ``/inbox/live`` says when the set of pending questions changes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from litestar import Request, get
from litestar.params import FromPath, FromQuery
from litestar.response import ServerSentEvent, ServerSentEventMessage

from runtime.core.records import InterruptStatus
from runtime.core.streams import StreamEvent

from .render import ENV, badge_html
from .services import complete, in_thread

#: how often the inbox stream looks for new or answered questions (seconds)
INBOX_POLL = 1.0
#: the longest one live connection is kept open; the browser reconnects after it
MAX_LIFETIME = 30 * 60


def _line(ev: StreamEvent) -> str:
    text = ENV.from_string(
        '<div class="ev ev-{{ t }}"><span class="mono">#{{ e.seq }}</span> {{ e.type }}'
        '{% if e.node %} <strong>{{ e.node }}</strong>{% endif %}'
        '{% if e.type == "custom" %} <code>{{ payload }}</code>{% endif %}</div>')
    return text.render(e=ev, t=ev.type.replace(".", "-"), payload=json.dumps(ev.data.get("payload"), default=str)[:300])


@get("/runs/{run_id:str}/live", include_in_schema=False)
async def run_live(request: Request[Any, Any, Any], run_id: FromPath[str], after: FromQuery[int] = 0) -> ServerSentEvent:
    rt = request.app.state.runtime
    await in_thread(lambda: complete(rt.get_run(run_id)))   # 404 before the stream starts

    async def stream() -> AsyncIterator[ServerSentEventMessage]:
        loop = asyncio.get_running_loop()
        until = loop.time() + MAX_LIFETIME
        async for ev in rt.follow(run_id, after_seq=after, poll=0.2):
            if ev.type == "checkpoint":
                yield ServerSentEventMessage(event="checkpoint", data=str(ev.data.get("seq", "")))
                continue
            yield ServerSentEventMessage(event="event", data=_line(ev), id=ev.seq)
            if ev.type.startswith("run."):
                status = str(ev.data.get("status", ""))
                if status:
                    yield ServerSentEventMessage(event="status", data=badge_html(status))
            if loop.time() > until:
                break
        run = await in_thread(lambda: complete(rt.get_run(run_id)))
        yield ServerSentEventMessage(event="status", data=badge_html(run.status.value))
        yield ServerSentEventMessage(event="end", data=run.status.value)

    return ServerSentEvent(stream())


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


HANDLERS = [run_live, inbox_live]
