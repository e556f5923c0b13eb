"""Bounded live streams: ``rt.stream(..., buffer=N)`` holds at most N events for its
reader and never makes the run wait for it. A reader that falls behind is handed the
recorded events it missed from the store once it has taken the held ones, so it sees
the trace in order with no gap and no duplicate; the ephemeral events emitted while
it was behind are dropped, and a ``stream.dropped`` notice says how many."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Collection
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from runtime import Graph, NodeContext, Runtime, RunStatus, RunStream, StreamEvent, TraceEvent, append
from runtime.core.records import CheckpointSummary
from runtime.engine.streaming import _checkpoints, stream_call
from runtime.store.base import CheckpointStore

ITEMS = 24


class S(BaseModel):
    items: list[int] = []
    log: Annotated[list[str], append] = []


def fan_out(tokens: bool = False) -> Graph:
    """A map whose items each record a custom event (and, with ``tokens``, emit an
    ephemeral one before it): many more events than a small buffer holds."""
    g = Graph("fan_out", state=S)

    async def plan(s: S) -> dict:
        return {"items": list(range(ITEMS))}

    async def work(s: S, ctx: NodeContext, item: int) -> dict:
        if tokens:
            ctx.emit({"token": str(item)}, ephemeral=True)
        ctx.emit({"item": item})
        return {"log": [str(item)]}

    def done(s: S) -> dict:
        return {"log": ["done"]}

    g.add_node("plan", plan)
    g.add_node("work", work, after=["plan"], map_over="items")
    g.add_node("done", done, after=["work"])
    return g


def recorded(events: list[StreamEvent]) -> list[StreamEvent]:
    return [e for e in events if not e.ephemeral]


async def read_slowly(rt: Runtime, stream: RunStream, held: list[int]) -> list[StreamEvent]:
    """Take the first event, then nothing until the run has stopped (it must not wait for
    this reader), then the rest, yielding to the loop between events; ``held`` gets how
    many events the stream held at every look."""
    events = [await anext(stream)]
    async with asyncio.timeout(30):
        while (await rt.get_run(events[0].run_id)).status in (RunStatus.QUEUED, RunStatus.RUNNING):
            held.append(stream.buffered)
            await asyncio.sleep(0.005)
    async for ev in stream:
        held.append(stream.buffered)
        events.append(ev)
        await asyncio.sleep(0)
    return events


def assert_the_trace(events: list[StreamEvent], trace: list[TraceEvent]) -> None:
    streamed = [e for e in recorded(events) if e.type != "checkpoint"]
    assert [e.seq for e in streamed] == [t.seq for t in trace]
    assert [(e.type, e.node, e.attempt, dict(e.data).get("payload")) for e in streamed] == [
        (str(t.type), t.node, t.attempt, t.data.get("payload")) for t in trace]


@pytest.mark.parametrize("buffer", [1, 2, 5])
async def test_a_slow_reader_sees_every_recorded_event_in_trace_order_with_no_gap(rt: Runtime, buffer: int):
    held: list[int] = []
    async with rt.stream(fan_out(), {}, buffer=buffer) as stream:
        events = await read_slowly(rt, stream, held)
    run_id = events[0].run_id
    trace = await rt.events(run_id)
    assert len(trace) > 5 * buffer   # the run went far past what the stream holds
    assert_the_trace(events, trace)
    # the same sequence as read from the store: checkpoints and node outputs included
    assert recorded(events) == [ev async for ev in rt.follow(run_id)]
    assert [e.data["id"] for e in events if e.type == "checkpoint"] == [cp.id for cp in await rt.history(run_id)]
    assert max(held) <= buffer


async def test_the_stream_never_holds_more_than_its_buffer(rt: Runtime):
    held: list[int] = []
    async with rt.stream(fan_out(tokens=True), {}, buffer=5) as stream:
        events = await read_slowly(rt, stream, held)
    # the run recorded every event while the reader took one; the stream held a few of them
    assert len(events) > 10 * 5 and 1 <= max(held) <= 5


async def test_ephemeral_events_dropped_while_behind_are_counted(rt: Runtime):
    async with rt.stream(fan_out(tokens=True), {}, buffer=5) as stream:
        events = await read_slowly(rt, stream, [])
    tokens = [e for e in events if e.ephemeral and e.type == "custom"]
    notices = [e for e in events if e.type == "stream.dropped"]
    assert len(notices) == 1 and notices[0].ephemeral and notices[0].run_id == events[0].run_id
    assert notices[0].data["count"] > 0
    assert len(tokens) + notices[0].data["count"] == ITEMS
    # the reader caught up only once the run had ended: the notice comes last, placed after
    # the last recorded event delivered before it
    assert events[-1] == notices[0]
    assert notices[0].seq == max(e.seq for e in recorded(events))
    assert_the_trace(events, await rt.events(events[0].run_id))


async def test_a_reader_that_caught_up_is_live_again_and_told_only_of_new_drops(rt: Runtime):
    gate = asyncio.Event()
    g = fan_out(tokens=True)

    @g.node(after=["done"])
    async def hold(state: S, ctx: NodeContext) -> dict:
        await gate.wait()
        for i in range(12):
            ctx.emit({"token": f"more{i}"}, ephemeral=True)
            ctx.emit({"more": i})
        return {}

    async with rt.stream(g, {}, buffer=5) as stream:
        events = [await anext(stream)]
        run_id = events[0].run_id
        async with asyncio.timeout(30):   # behind: the run goes on to wait for the gate
            while ("node.start", "hold") not in [(str(e.type), e.node) for e in await rt.events(run_id)]:
                await asyncio.sleep(0.005)
        async for ev in stream:
            events.append(ev)
            if ev.type == "stream.dropped":
                break
        assert stream.buffered == 0 and [e.node for e in events if e.type == "node.start"][-1] == "hold"
        gate.set()
        events += await read_slowly(rt, stream, [])
    notices = [e for e in events if e.type == "stream.dropped"]
    tokens = [e for e in events if e.ephemeral and e.type == "custom"]
    assert len(notices) == 2 and all(n.data["count"] > 0 for n in notices)
    assert len(tokens) + sum(n.data["count"] for n in notices) == ITEMS + 12
    assert [t.data["payload"]["token"] for t in tokens if t.data["payload"]["token"].startswith("more")] == [
        f"more{i}" for i in range(12 - notices[1].data["count"])]   # live until it fell behind again
    assert recorded(events) == [ev async for ev in rt.follow(run_id)]


async def test_a_reader_that_keeps_up_gets_everything_live_and_no_notice(rt: Runtime):
    events = [ev async for ev in rt.stream(fan_out(tokens=True), {})]
    assert "stream.dropped" not in [e.type for e in events]
    assert sorted(int(e.data["payload"]["token"]) for e in events if e.ephemeral) == list(range(ITEMS))
    assert recorded(events) == [ev async for ev in rt.follow(events[0].run_id)]


async def test_a_slow_reader_of_a_resumed_run_sees_only_what_the_resume_recorded(rt: Runtime):
    """A resumed run's first batches carry no checkpoint: what the stream missed starts
    after the checkpoints recorded before the resume, not at the run's first one."""
    g = fan_out()

    @g.node(after=["done"])
    async def ask(state: S, ctx: NodeContext) -> dict:
        return {"log": [str(await ctx.interrupt({"question": "more?"}))]}

    @g.node(after=["ask"])
    async def more(state: S, ctx: NodeContext) -> dict:
        for i in range(12):
            ctx.emit({"more": i})
        return {"log": ["more"]}

    first = [ev async for ev in rt.stream(g, {})]
    run_id, paused_at = first[0].run_id, max(e.seq for e in first)
    assert (await rt.get_run(run_id)).status == RunStatus.INTERRUPTED
    async with rt.stream(rt.resume(run_id, "yes"), buffer=2) as stream:
        events = await read_slowly(rt, stream, [])
    assert events[0].seq == paused_at + 1
    assert recorded(events) == [ev async for ev in rt.follow(run_id, after_seq=paused_at)]
    assert recorded(first + events) == [ev async for ev in rt.follow(run_id)]


class PagingStore:
    """A store that keeps the ``limit`` of every read of events; every other call goes to
    the store it wraps."""

    def __init__(self, store: CheckpointStore):
        self.store = store
        self.limits: list[int | None] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def events(self, run_id: str, after_seq: int = 0, limit: int | None = None) -> list[TraceEvent]:
        self.limits.append(limit)
        return self.store.events(run_id, after_seq, limit)

    def pending_writes(self, run_id: str, checkpoint_seq: int | None = None, *,
                       nodes: Collection[str] | None = None) -> list[Any]:
        assert nodes is not None, "a page read every pending write of the run"
        return self.store.pending_writes(run_id, checkpoint_seq, nodes=nodes)


async def test_missed_events_are_read_back_a_buffer_at_a_time(rt: Runtime):
    store = PagingStore(rt.store)
    async with stream_call(rt.start(fan_out(), {}), store, 5) as stream:   # type: ignore[arg-type]
        events = await read_slowly(rt, stream, [])
    assert_the_trace(events, await rt.events(events[0].run_id))
    assert len(store.limits) > 5 and all(limit is not None and 1 <= limit <= 5 for limit in store.limits)


class Timeline:
    """Checkpoint summaries only, reflecting the given events, each read kept."""

    def __init__(self, event_seqs: list[int]):
        self.cps = [CheckpointSummary(f"cp{i}", "r", i, (), "step", 0.0, e) for i, e in enumerate(event_seqs)]
        self.reads: list[tuple[int, int]] = []

    def checkpoint_summaries(self, run_id: str, first_seq: int, last_seq: int) -> list[CheckpointSummary]:
        self.reads.append((first_seq, last_seq))
        return [c for c in self.cps if first_seq <= c.seq <= last_seq]


def test_a_page_reads_the_checkpoints_it_shows_a_window_at_a_time():
    """Several checkpoints may reflect the same event: a page takes every one that reflects
    its events, reading a window more only while the last window was all of them."""
    timeline = Timeline([2, 3, 3, 3, 3, 4, 9, 12])
    found = _checkpoints(timeline, "r", 0, 7, top=4, window=2)   # type: ignore[arg-type]
    assert [c.seq for c in found] == [1, 2, 3, 4, 5]
    assert timeline.reads == [(1, 2), (3, 4), (5, 6)]
    assert _checkpoints(timeline, "r", 5, 5, top=99, window=2) == []   # type: ignore[arg-type]


async def test_a_reader_that_leaves_while_behind_cancels_the_run(rt: Runtime):
    gate = asyncio.Event()
    g = fan_out()

    @g.node(after=["done"])
    async def wait(state: S) -> dict:
        await gate.wait()
        return {}

    async with rt.stream(g, {}, buffer=2) as stream:
        first = await anext(stream)
        while len(await rt.events(first.run_id)) < 3 * ITEMS:   # far behind
            await asyncio.sleep(0.005)
        assert stream.buffered <= 2
    assert (await rt.get_run(first.run_id)).status == RunStatus.CANCELLED


@pytest.mark.parametrize("buffer", [0, -1, 1.5, "10", True, None, 2**31])
async def test_a_bad_buffer_is_refused_before_anything_runs(rt: Runtime, buffer: Any):
    with pytest.raises(Exception, match="buffer must be a whole number of events"):
        rt.stream(fan_out(), {}, buffer=buffer)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # the refused call is closed, not left un-awaited
        with pytest.raises(Exception, match="buffer must be a whole number of events"):
            rt.stream(rt.start(fan_out(), {}), buffer=buffer)
    assert await rt.runs() == []


async def test_a_stream_names_the_runs_published_to_it_whether_or_not_they_were_read(rt: Runtime) -> None:
    """What ``harness run`` reports on Ctrl-C: the run published to the stream, even when
    the cancel came before its reader took an event of it."""
    g = Graph("waits", state=S)
    started = asyncio.Event()

    async def slow(s: S) -> dict:
        started.set()
        await asyncio.sleep(30)
        return {}

    g.add_node("slow", slow)
    stream = rt.stream(g, {}, buffer=100)
    assert stream.run_ids == ()    # nothing runs before the first read
    first = await stream.__anext__()
    await started.wait()
    assert stream.buffered > 0     # published, not read
    [run] = await rt.runs()
    assert first.run_id == run.id and stream.run_ids == (run.id,)
    await stream.aclose()          # the reader leaves: the run is cancelled
    assert (await rt.get_run(run.id)).status == RunStatus.CANCELLED
    assert stream.run_ids == (run.id,)
    assert rt.follow(run.id).run_ids == ()   # a follower reads the store: nothing published to it


# --------------------------------------------------------------------------- live progress only


async def test_without_recorded_events_a_reader_gets_the_run_and_its_ephemeral_events_in_order(rt: Runtime):
    events = [ev async for ev in rt.stream(fan_out(tokens=True), {}, recorded=False)]
    assert events[0].type == "run.created" and not events[0].ephemeral
    assert all(e.ephemeral and e.type == "custom" for e in events[1:])
    # the map's items run in any order: each token once, none dropped
    assert sorted(int(e.data["payload"]["token"]) for e in events[1:]) == list(range(ITEMS))
    assert (await rt.get_run(events[0].run_id)).status == RunStatus.SUCCEEDED


async def test_without_recorded_events_a_slow_reader_never_makes_the_stream_read_the_store(rt: Runtime):
    store = PagingStore(rt.store)
    async with stream_call(rt.start(fan_out(tokens=True), {}), store, 5, recorded=False) as stream:  # type: ignore[arg-type]
        held: list[int] = []
        events = await read_slowly(rt, stream, held)
    assert store.limits == []          # nothing read back: the recorded events are not wanted
    assert max(held) <= 5 + 1          # the bound, and the run's first event
    assert [e.type for e in events if not e.ephemeral] == ["run.created"]
    tokens = [e for e in events if e.type == "custom"]
    [notice] = [e for e in events if e.type == "stream.dropped"]
    assert len(tokens) + notice.data["count"] == ITEMS and events[-1] == notice


async def test_without_recorded_events_a_resume_is_named_by_its_first_event(rt: Runtime):
    g = fan_out()

    @g.node(after=["done"])
    async def ask(state: S, ctx: NodeContext) -> dict:
        answer = await ctx.interrupt({"question": "more?"})
        ctx.emit({"token": "after"}, ephemeral=True)
        return {"log": [str(answer)]}

    first = [ev async for ev in rt.stream(g, {})]
    run_id = first[0].run_id
    events = [ev async for ev in rt.stream(rt.resume(run_id, "yes"), recorded=False)]
    assert events[0].run_id == run_id and events[0].seq == max(e.seq for e in first) + 1
    assert [e.data["payload"] for e in events[1:]] == [{"token": "after"}]


@pytest.mark.parametrize("flag", [0, "no", None])
async def test_a_bad_recorded_flag_is_refused_before_anything_runs(rt: Runtime, flag: Any):
    with pytest.raises(Exception, match="recorded must be True or False"):
        rt.stream(fan_out(), {}, recorded=flag)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(Exception, match="recorded must be True or False"):
            rt.stream(rt.start(fan_out(), {}), recorded=flag)
    assert await rt.runs() == []


async def test_without_recorded_events_a_drop_notice_carries_the_last_recorded_seq(rt: Runtime):
    # the reader sees none of the recorded events after the first, but the notice still
    # says where in the trace it stands: never before the ephemeral events it follows
    async with rt.stream(fan_out(tokens=True), {}, buffer=2, recorded=False) as stream:
        events = await read_slowly(rt, stream, [])
    [notice] = [e for e in events if e.type == "stream.dropped"]
    trace = await rt.events(events[0].run_id)
    assert notice.seq == trace[-1].seq
    assert [e.seq for e in events] == sorted(e.seq for e in events)
