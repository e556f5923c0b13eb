"""Streaming: ``rt.stream`` yields a run's events as they commit, in trace order with
no gap; ``ctx.emit`` sends custom events (recorded, or ephemeral); ``rt.follow``
reads the same sequence back from the store."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from runtime import Graph, MemoryStore, NodeContext, NotFound, Runtime, RunStatus, StreamEvent, append
from runtime.core.records import Checkpoint, CheckpointSummary, PendingWrite
from runtime.engine.streaming import follow
from runtime.store.base import CheckpointStore


class S(BaseModel):
    n: int = 0
    log: Annotated[list[str], append] = []


def chain(emit_ephemeral: bool = False) -> Graph:
    g = Graph("streamed", state=S)

    @g.node()
    async def first(state: S, ctx: NodeContext) -> dict:
        ctx.emit({"progress": 0.5})
        if emit_ephemeral:
            for token in ("he", "llo"):
                ctx.emit({"token": token}, ephemeral=True)
        return {"n": 1, "log": ["first"]}

    @g.node(after=["first"])
    def second(state: S, ctx: NodeContext) -> dict:   # a sync node emits from its thread
        ctx.emit({"progress": 1.0})
        return {"log": ["second"]}

    return g


def recorded(events: list[StreamEvent]) -> list[StreamEvent]:
    return [e for e in events if not e.ephemeral]


async def collect(stream) -> list[StreamEvent]:
    return [ev async for ev in stream]


async def test_the_stream_starts_with_the_run_id_and_ends_with_the_runs_end(rt: Runtime):
    events = await collect(rt.stream(chain(), {}))
    assert events[0].type == "run.created"
    run_id = events[0].run_id
    assert all(e.run_id == run_id for e in events)
    assert [e.type for e in events if e.type.startswith("run.")][-1] == "run.succeed"
    assert (await rt.get_run(run_id)).status == RunStatus.SUCCEEDED


async def test_recorded_stream_events_are_the_trace_in_order_with_no_gap(rt: Runtime):
    events = recorded(await collect(rt.stream(chain(), {})))
    trace = await rt.events(events[0].run_id)
    streamed = [e for e in events if e.type != "checkpoint"]
    assert [e.seq for e in streamed] == list(range(1, len(trace) + 1))
    assert [(e.type, e.node, e.attempt) for e in streamed] == [(str(t.type), t.node, t.attempt) for t in trace]


async def test_node_outputs_and_checkpoints_are_streamed(rt: Runtime):
    events = await collect(rt.stream(chain(), {}))
    succeeded = {e.node: e.data["writes"] for e in events if e.type == "node.succeed"}
    assert succeeded == {"first": {"n": 1, "log": ["first"]}, "second": {"log": ["second"]}}
    cps = [e.data["id"] for e in events if e.type == "checkpoint"]
    assert cps == [cp.id for cp in await rt.history(events[0].run_id)]


async def test_emitted_payloads_are_recorded_in_the_trace_from_async_and_sync_nodes(rt: Runtime):
    events = await collect(rt.stream(chain(), {}))
    custom = [(e.node, e.data["payload"]) for e in events if e.type == "custom"]
    assert custom == [("first", {"progress": 0.5}), ("second", {"progress": 1.0})]
    trace = await rt.events(events[0].run_id)
    assert [t.data["payload"] for t in trace if t.type == "custom"] == [{"progress": 0.5}, {"progress": 1.0}]


async def test_ephemeral_payloads_are_streamed_in_order_but_never_stored(rt: Runtime):
    events = await collect(rt.stream(chain(emit_ephemeral=True), {}))
    tokens = [e for e in events if e.ephemeral]
    assert [e.data["payload"]["token"] for e in tokens] == ["he", "llo"]
    # after the node's start and its recorded progress, before its end
    order = [(e.type, e.node) for e in events if e.node == "first"]
    assert order == [("node.start", "first"), ("custom", "first"), ("custom", "first"), ("custom", "first"),
                     ("node.succeed", "first")]
    trace = await rt.events(events[0].run_id)
    assert all("token" not in (t.data.get("payload") or {}) for t in trace)


@pytest.mark.parametrize("flag", ["false", 0, None])
async def test_an_emit_whose_ephemeral_flag_is_not_a_bool_fails_its_node_naming_it(rt: Runtime, flag: Any):
    """Read by its truth, "false" would make a payload meant for the trace ephemeral: lost."""
    g = Graph("flagged", state=S)

    @g.node()
    def a(state: S, ctx: NodeContext) -> dict:
        ctx.emit({"progress": 1.0}, ephemeral=flag)
        return {}

    run = await rt.start(g, {})
    assert run.status == RunStatus.FAILED
    assert run.error["class"] == "invalid_input" and "ephemeral must be True or False" in run.error["message"]


async def test_a_pause_ends_the_stream_and_a_streamed_resume_continues_it(rt: Runtime):
    g = Graph("ask", state=S)

    @g.node()
    async def ask(state: S, ctx: NodeContext) -> dict:
        answer = await ctx.interrupt({"question": "go?"})
        return {"log": [str(answer)]}

    first = await collect(rt.stream(g, {}))
    run_id = first[0].run_id
    assert [e.type for e in first if e.type.startswith(("run.", "interrupt."))][-2:] == [
        "interrupt.created", "run.interrupt"]
    more = await collect(rt.stream(rt.resume(run_id, "yes")))
    assert more[0].seq == max(e.seq for e in first) + 1   # it picks up where the pause left off
    assert more[-1].type in ("checkpoint", "run.succeed")
    assert "run.succeed" in [e.type for e in more]


async def test_a_streamed_fork_yields_the_new_runs_events(rt: Runtime):
    run = await rt.start(chain(), {})
    cp = (await rt.history(run.id))[1]
    events = await collect(rt.stream(rt.fork(cp.id)))
    assert events[0].type == "run.created" and events[0].run_id != run.id
    assert (await rt.get_run(events[0].run_id)).kind == "fork"


async def test_following_a_run_from_the_store_sees_the_live_sequence(rt: Runtime):
    gate = asyncio.Event()
    g = Graph("slow", state=S)

    @g.node()
    async def a(state: S, ctx: NodeContext) -> dict:
        ctx.emit({"step": "a"})
        await gate.wait()
        return {"log": ["a"]}

    @g.node(after=["a"])
    async def b(state: S, ctx: NodeContext) -> dict:
        return {"log": ["b"]}

    live: list[StreamEvent] = []

    async def stream_it() -> None:
        async for ev in rt.stream(g, {}):
            live.append(ev)
            if ev.type == "custom":
                gate.set()

    task = asyncio.create_task(stream_it())
    while not live:
        await asyncio.sleep(0.01)
    followed = await collect(rt.follow(live[0].run_id, poll=0.01))
    await task
    assert followed == recorded(live)


async def test_the_trace_read_back_says_what_each_node_wrote_as_the_stream_did(rt: Runtime):
    live = recorded(await collect(rt.stream(chain(), {})))
    run_id = live[0].run_id
    events = await rt.events(run_id)
    assert [(e.seq, e.type, e.node, e.attempt, dict(e.data)) for e in events] == [
        (e.seq, e.type, e.node, e.attempt, dict(e.data)) for e in live if e.type != "checkpoint"]
    wrote = {e.node: e.data["writes"] for e in events if e.type == "node.succeed"}
    assert wrote == {"first": {"n": 1, "log": ["first"]}, "second": {"log": ["second"]}}
    # a later window reads only its own nodes' writes, and says the same
    later = await rt.events(run_id, after_seq=events[-3].seq)
    assert [dict(e.data) for e in later] == [dict(e.data) for e in events[-2:]]


async def test_following_reads_only_the_checkpoints_it_has_not_yet_streamed(rt: Runtime,
                                                                            monkeypatch: pytest.MonkeyPatch):
    """Each poll reads the new checkpoints' summaries, not every checkpoint with its node
    states: following a long run (the debugger's live view) costs what the run adds."""
    g = Graph("steps", state=S)
    for i in range(6):
        g.add_node(f"n{i}", lambda s, i=i: {"log": [str(i)]}, after=[f"n{i - 1}"] if i else [])
    run = await rt.start(g, {})
    expected = await collect(rt.follow(run.id))
    first_seqs: list[int] = []
    summaries = rt.store.checkpoint_summaries

    def new_ones(run_id: str, first_seq: int, last_seq: int) -> list[CheckpointSummary]:
        first_seqs.append(first_seq)
        return summaries(run_id, first_seq, last_seq)

    def every_one(run_id: str) -> list[Checkpoint]:
        raise AssertionError("follow read every checkpoint with its node states")

    monkeypatch.setattr(rt.store, "checkpoint_summaries", new_ones)
    monkeypatch.setattr(rt.store, "checkpoints", every_one)
    assert await collect(rt.follow(run.id)) == expected
    assert await collect(rt.follow(run.id, after_seq=8)) == [e for e in expected if e.seq > 8]
    assert first_seqs == [0, 0]   # one read of each follow (the run has ended)


class CountingStore:
    """A store that keeps, for every read of pending writes, the nodes asked for and how
    many writes came back; every other call goes to the store it wraps."""

    def __init__(self, store: CheckpointStore):
        self.store = store
        self.reads: list[tuple[set[str] | None, int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def pending_writes(self, run_id: str, checkpoint_seq: int | None = None, *,
                       nodes: Collection[str] | None = None) -> list[PendingWrite]:
        found = self.store.pending_writes(run_id, checkpoint_seq, nodes=nodes)
        self.reads.append((None if nodes is None else set(nodes), len(found)))
        return found


async def test_following_a_long_run_reads_each_pending_write_once(rt: Runtime):
    """A poll reads the pending writes of the nodes its new events finished, not all of the
    run's: following a long map (the debugger's live view) costs what the run adds."""
    count = 8
    gates = [asyncio.Event() for _ in range(count)]
    gates[0].set()

    class M(S):
        items: list[int] = []

    g = Graph("stepped", state=M)

    async def plan(s: M) -> dict:   # async nodes: each poll's reads see the same commits
        return {"items": list(range(count))}

    async def work(s: M, item: int) -> dict:
        await gates[item].wait()   # one item at a time, each once the follower saw the one before
        return {"log": [str(item)]}

    g.add_node("plan", plan)
    g.add_node("work", work, after=["plan"], map_over="items")
    live: list[StreamEvent] = []

    async def stream_it() -> None:
        async for ev in rt.stream(g, {}):
            live.append(ev)

    task = asyncio.create_task(stream_it())
    while not live:
        await asyncio.sleep(0.01)
    store = CountingStore(rt.store)
    followed: list[StreamEvent] = []
    async for ev in follow(store, live[0].run_id, poll=0.01):
        followed.append(ev)
        if ev.type == "node.succeed" and ev.node and ev.node.startswith("work["):
            gates[min(int(ev.node[5:-1]) + 1, count - 1)].set()
    await task
    assert followed == recorded(live)
    writes = rt.store.pending_writes(live[0].run_id)
    assert len(writes) == count + 1 and len(store.reads) > count // 2
    assert sum(n for _, n in store.reads) == len(writes)   # each one read once
    assert all(nodes is not None and n <= len(nodes) for nodes, n in store.reads[1:])


async def test_following_an_unknown_run_is_not_found(rt: Runtime):
    with pytest.raises(NotFound):
        rt.follow("run_nope")


def test_stream_events_serialise_to_json():
    ev = StreamEvent("run_1", 3, "custom", "a", 1, {"payload": {"x": 1}}, 1.5)
    assert ev.to_json()["data"] == {"payload": {"x": 1}} and ev.to_json()["ephemeral"] is False


async def test_a_reader_that_stops_waiting_cancels_the_run_at_once(rt: Runtime):
    g = Graph("slow", state=S)

    @g.node()
    async def a(state: S, ctx: NodeContext) -> dict:
        await asyncio.sleep(30)
        return {}

    seen: list[StreamEvent] = []
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3):
            async for ev in rt.stream(g, {}):
                seen.append(ev)
    assert loop.time() - t0 < 5
    run = await rt.get_run(seen[0].run_id)
    assert run.status == RunStatus.CANCELLED and "stopped waiting" in run.error["message"]


async def test_a_kept_stream_left_early_stops_its_run_when_closed(rt: Runtime):
    """``break`` alone cannot tell a kept stream that the reader left; the end of
    ``async with`` (or ``aclose()``) does, before the next node's effect runs."""
    charged: list[str] = []
    g = Graph("pay_later", state=S)

    @g.node()
    async def write(state: S, ctx: NodeContext) -> dict:
        return {"log": ["draft"]}

    @g.node(after=["write"])
    async def pay(state: S, ctx: NodeContext) -> dict:
        await asyncio.sleep(0.2)
        return {"log": [await ctx.effect("pay", lambda: charged.append("x") or "receipt")]}

    for close in ("with", "aclose"):
        events = rt.stream(g, {})
        if close == "with":
            async with events:
                async for ev in events:
                    if ev.type == "node.succeed":
                        break
        else:
            async for ev in events:
                if ev.type == "node.succeed":
                    break
            await events.aclose()
        run = await rt.get_run(ev.run_id)
        assert run.status == RunStatus.CANCELLED, close
    await asyncio.sleep(0.3)
    assert charged == []


async def test_a_reader_that_leaves_during_a_sync_effect_leaves_its_outcome_recorded_not_in_doubt(rt: Runtime):
    """Leaving the stream cancels the run as ``cancel`` does: the effect's thread cannot be
    stopped, so its outcome is waited for and recorded, and the continuation is served it."""
    calls: list[str] = []

    def pay() -> str:
        calls.append("pay")
        time.sleep(0.2)
        return "receipt"

    g = Graph("pay_sync", state=S)

    @g.node()
    async def charge(state: S, ctx: NodeContext) -> dict:
        return {"log": [await ctx.effect("pay", pay)]}

    async with rt.stream(g, {}) as events:
        async for ev in events:
            if ev.type == "effect.started":
                break
    run = await rt.get_run(ev.run_id)
    assert run.status == RunStatus.CANCELLED and "stopped waiting" in run.error["message"]
    continued = await rt.resume(run.id)
    assert continued.status == RunStatus.SUCCEEDED, continued.status   # not paused on an in-doubt effect
    assert calls == ["pay"]


async def test_streaming_something_that_is_not_a_call_is_refused(rt: Runtime):
    with pytest.raises(Exception, match="graph or a call"):
        rt.stream(5)  # type: ignore[arg-type]


async def test_streaming_an_awaitable_that_is_not_a_call_of_the_runtime_is_refused(rt: Runtime):
    import warnings

    for target in (asyncio.sleep(0), rt.runs()):
        with warnings.catch_warnings():
            warnings.simplefilter("error")   # the refused call is closed, not left un-awaited
            with pytest.raises(Exception, match="graph or a call"):
                rt.stream(target)
    # a stream of a call takes no input of its own: the call is refused (closed, never run)
    with pytest.raises(Exception, match="takes the call alone"):
        rt.stream(rt.start(chain(), {}), {"n": 1})
    assert await rt.runs() == []
    # a call of another Runtime: a reader left behind would read back from the wrong store
    other = Runtime(store=MemoryStore())
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(Exception, match="graph or a call of this Runtime"):
                rt.stream(other.start(chain(), {}))
        assert await other.runs() == [] and await rt.runs() == []
    finally:
        other.close()


async def test_a_stream_read_with_a_plain_for_or_await_says_how_to_read_it_and_runs_nothing(rt: Runtime):
    import inspect

    with pytest.raises(TypeError, match=r"read with `async for ev in rt.stream\(...\)`.*not with a plain `for`"):
        for _ in rt.stream(chain(), {}):
            pass
    call = rt.start(chain(), {})
    with pytest.raises(TypeError, match=r"not with `await`; .*await the call itself"):
        await rt.stream(call)
    # the call it would have run is closed, not left to warn that it was never awaited
    assert inspect.getcoroutinestate(call) == inspect.CORO_CLOSED
    assert await rt.runs() == []


@pytest.mark.parametrize("thread_id, said", [
    ("", "must not be empty"), ("  ", "must not be blank"), ("a\x00b", "must be a non-empty string without NUL"),
    (123, "must be a non-empty string"), ("t" * 501, "must be a non-empty string of at most 500"),
    ("..", "must not be '..'"), (".", "must not be '.'"), ("//", "must not be '//'"),
])
async def test_a_bad_thread_id_is_refused_everywhere_alike(rt: Runtime, thread_id, said: str):
    with pytest.raises(Exception, match=f"thread_id {said}"):
        await rt.start(chain(), {}, thread_id=thread_id)
    with pytest.raises(Exception, match=f"thread_id {said}"):
        await rt.runs(thread_id=thread_id)
    with pytest.raises(Exception, match=f"thread_id {said}"):
        await rt.thread_state(thread_id)
    assert await rt.runs() == []


async def test_following_from_past_any_stored_sequence_is_refused(rt: Runtime):
    run = await rt.start(chain(), {})
    with pytest.raises(Exception, match="after_seq must be a whole number"):
        rt.follow(run.id, after_seq=10**30)


async def test_following_from_past_what_a_store_holds_streams_nothing(rt: Runtime):
    """A seq beyond a 32-bit column (PostgreSQL's) is past the end, as on the other stores."""
    run = await rt.start(chain(), {})
    assert [ev async for ev in rt.follow(run.id, after_seq=99_999_999_999)] == []
    assert await rt.events(run.id, after_seq=99_999_999_999) == []
