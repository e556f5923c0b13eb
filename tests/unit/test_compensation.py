"""Compensation when its caller is cancelled (the task cancelled, a timeout), on every store.

An undo that finished is recorded as done, also when the cancel comes as it finishes; an
async undo the cancel interrupts stays in doubt; a sync undo's thread, which cannot be
stopped, is recorded when it ends (the run's lease is kept till then, so nobody starts it
again meanwhile), unless the lease was taken over. The cancel always reaches the caller.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel

from runtime import EffectInfo, EffectStatus, Graph, InvalidRequest, RunStatus, Runtime
from runtime.core.records import Batch, EventType
from runtime.store.base import CheckpointStore

S = EffectStatus
DONE = [S.STARTED, S.SUCCEEDED]


class Trip(BaseModel):
    hotel: str = ""
    flight: str = ""


class World:
    """The outside world: each undo call, and a gate that holds one effect's undo."""

    def __init__(self, hold: str | None = None, fail_once: bool = False):
        self.hold, self.fail_once = hold, fail_once
        self.undos: list[tuple[str, str]] = []          # (effect, key) per call
        self.entered, self.go, self.acted = threading.Event(), threading.Event(), threading.Event()

    def undo(self, info: EffectInfo) -> str:
        held = info.name == self.hold
        if held:
            self.entered.set()
            assert self.go.wait(10)
        self.undos.append((info.name, info.key))
        if held:
            self.acted.set()
            if self.fail_once:
                self.fail_once = False
                raise ConnectionError("refund refused")
        return f"refunded-{info.result}"

    def graph(self, undo_flight: Callable[..., Any] | None = None) -> Graph:
        g = Graph("trip", state=Trip)

        @g.node()
        async def hotel(state, ctx):
            return {"hotel": await ctx.effect("hotel", lambda: "h-1", compensate=self.undo)}

        @g.node(after=["hotel"])
        async def flight(state, ctx):
            return {"flight": await ctx.effect("flight", lambda: "f-1", compensate=undo_flight or self.undo)}

        return g


def statuses(rt: Runtime, run_id: str, name: str) -> list[EffectStatus]:
    return [e.status for e in rt.store.journal([run_id]) if e.name == name]


def keys(rt: Runtime, run_id: str) -> dict[str, str]:
    return {e.name: e.key for e in rt.store.journal([run_id]) if e.status == S.SUCCEEDED}


async def until_released(rt: Runtime, run_id: str) -> None:
    """Wait for the compensation to let go of the run (an outliving undo's thread ended)."""
    for _ in range(1000):
        if (await rt.get_run(run_id)).lease_owner is None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the compensation never released the run's lease")


async def assert_consistent(rt: Runtime, run_id: str) -> None:
    """The run ended as before, nobody holds it, its trace is gapless and matches the row."""
    run = await rt.get_run(run_id)
    assert run.status == RunStatus.SUCCEEDED and run.lease_owner is None
    seqs = [e.seq for e in await rt.events(run_id)]
    assert seqs == list(range(1, len(seqs) + 1)) and run.event_seq == seqs[-1]


@pytest.mark.parametrize("hops", [0, 1, 2, 3])
async def test_an_undo_finished_as_its_caller_is_cancelled_is_recorded_done(rt: Runtime, hops: int) -> None:
    world = World(hold="flight")
    run = await rt.start(world.graph(), {})
    task = asyncio.create_task(rt.compensate(run.id))
    assert await asyncio.to_thread(world.entered.wait, 10)
    world.go.set()
    # block the loop: the undo's thread returns, and its result waits for the loop ...
    assert world.acted.wait(10)
    time.sleep(0.05)
    loop = asyncio.get_running_loop()

    def cancel_after(n: int) -> None:
        # ... when the cancel comes, or a few loop turns later, as the result is handed on
        if n == 0:
            task.cancel()
        else:
            loop.call_soon(cancel_after, n - 1)

    cancel_after(hops)
    with pytest.raises(asyncio.CancelledError):
        await task
    await until_released(rt, run.id)
    assert statuses(rt, run.id, "flight") == [*DONE, S.COMPENSATING, S.COMPENSATED]
    assert rt.store.journal([run.id])[-1].result == "refunded-f-1"

    report = await rt.compensate(run.id)
    assert [(s.name, s.status) for s in report.steps] == [("flight", "already"), ("hotel", "compensated")]
    k = keys(rt, run.id)
    assert world.undos == [("flight", k["flight"] + ":undo"), ("hotel", k["hotel"] + ":undo")]   # once each
    events = await rt.events(run.id)
    assert [e.type for e in events if e.data.get("name") == "flight"][-2:] == [
        EventType.of_effect(S.COMPENSATING), EventType.of_effect(S.COMPENSATED)]
    await assert_consistent(rt, run.id)


@pytest.mark.parametrize("outcome", ["result", "error"])
async def test_a_sync_undo_running_at_a_timeout_is_recorded_when_its_thread_ends(rt: Runtime, outcome: str) -> None:
    world = World(hold="flight", fail_once=outcome == "error")
    run = await rt.start(world.graph(), {})
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(rt.compensate(run.id), 0.2)
    assert time.monotonic() - t0 < 5                    # the cancel did not wait for the thread
    assert world.entered.is_set() and world.undos == []
    # its undo still runs here: nobody may start it again meanwhile
    with pytest.raises(InvalidRequest, match="being compensated"):
        await rt.compensate(run.id)
    assert statuses(rt, run.id, "flight") == [*DONE, S.COMPENSATING]

    world.go.set()
    await until_released(rt, run.id)
    last = rt.store.journal([run.id])[-1]
    if outcome == "result":
        assert (last.name, last.status, last.result) == ("flight", S.COMPENSATED, "refunded-f-1")
    else:
        assert (last.name, last.status, last.error) == ("flight", S.COMPENSATION_FAILED,
                                                        "ConnectionError: refund refused")
    assert statuses(rt, run.id, "hotel") == DONE

    report = await rt.compensate(run.id)
    first = "already" if outcome == "result" else "compensated"   # a failed undo is tried again
    assert [(s.name, s.status) for s in report.steps] == [("flight", first), ("hotel", "compensated")]
    assert report.complete
    flight_undos = [n for n, _ in world.undos if n == "flight"]
    assert len(flight_undos) == (1 if outcome == "result" else 2)
    assert len({k for n, k in world.undos if n == "flight"}) == 1   # the same key each time
    await assert_consistent(rt, run.id)


async def test_an_async_undo_interrupted_by_the_cancel_stays_in_doubt(rt: Runtime) -> None:
    world = World()
    entered, calls = asyncio.Event(), []

    async def undo_flight(info: EffectInfo) -> str:
        calls.append(info.key)
        entered.set()
        await asyncio.sleep(10 if len(calls) == 1 else 0)
        return "refunded"

    run = await rt.start(world.graph(undo_flight), {})
    task = asyncio.create_task(rt.compensate(run.id))
    await asyncio.wait_for(entered.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await rt.get_run(run.id)).lease_owner is None     # nothing outlives it: let go at once
    assert statuses(rt, run.id, "flight") == [*DONE, S.COMPENSATING]

    report = await rt.compensate(run.id)
    assert [(s.name, s.status) for s in report.steps] == [("flight", "in_doubt")]
    retried = await rt.compensate(run.id, retry_in_doubt=True)
    assert [(s.name, s.status) for s in retried.steps] == [("flight", "compensated"), ("hotel", "compensated")]
    assert calls == [keys(rt, run.id)["flight"] + ":undo"] * 2
    await assert_consistent(rt, run.id)


async def test_a_thread_ending_after_the_lease_was_taken_over_stays_in_doubt(
        rt: Runtime, caplog: pytest.LogCaptureFixture) -> None:
    world = World(hold="flight")
    run = await rt.start(world.graph(), {})
    task = asyncio.create_task(rt.compensate(run.id))
    assert await asyncio.to_thread(world.entered.wait, 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    held = await rt.get_run(run.id)
    assert held.lease_owner is not None                 # kept while the undo's thread runs
    # its lease expired and another process took the run over
    assert held.lease_expires_at is not None
    other = rt.store.acquire_lease(run.id, "elsewhere:1:x", held.lease_expires_at + 60, held.fence)

    with caplog.at_level(logging.INFO, logger="runtime.engine.compensation"):
        world.go.set()
        for _ in range(1000):
            if "left in doubt" in caplog.text:
                break
            await asyncio.sleep(0.01)
    assert "left in doubt" in caplog.text
    assert world.undos == [("flight", keys(rt, run.id)["flight"] + ":undo")]
    assert statuses(rt, run.id, "flight") == [*DONE, S.COMPENSATING]   # the other process will see it in doubt
    after = await rt.get_run(run.id)
    assert (after.lease_owner, after.fence, after.event_seq) == ("elsewhere:1:x", other.fence, other.event_seq)


async def test_a_run_whose_caller_stops_waiting_is_compensated_as_its_policy_asks(rt: Runtime) -> None:
    """Leaving its stream (or cancelling an awaited ``start``) ends the run CANCELLED, so
    ``compensate_on=["cancelled"]`` undoes its effects before the cancel reaches the caller."""
    world = World()
    g = Graph("trip_then_wait", state=Trip)

    @g.node()
    async def hotel(state, ctx):
        booked = await ctx.effect("hotel", lambda: "h-1", compensate=world.undo)
        ctx.emit({"booked": booked})
        await asyncio.sleep(30)
        return {"hotel": booked}

    async with rt.stream(g, {}, compensate_on=["cancelled"]) as events:
        async for ev in events:
            if ev.type == "custom":
                break
    run = await rt.get_run(ev.run_id)
    assert run.status == RunStatus.CANCELLED
    assert world.undos == [("hotel", keys(rt, run.id)["hotel"] + ":undo")]
    assert statuses(rt, run.id, "hotel") == [*DONE, S.COMPENSATING, S.COMPENSATED]

    task = asyncio.create_task(rt.start(g, {}, compensate_on=["cancelled"]))
    while (latest := (await rt.runs())[0]).id == run.id or S.SUCCEEDED not in statuses(rt, latest.id, "hotel"):
        await asyncio.sleep(0.01)   # booked, and waiting
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert statuses(rt, latest.id, "hotel") == [*DONE, S.COMPENSATING, S.COMPENSATED]


class FailingCommits:
    """A store (wrapping a real one) whose disk fills up at chosen commits: the one that
    records node ``done`` while the run is still running (and its one retry), and, if
    asked, every compensation."""

    def __init__(self, inner: CheckpointStore, undo_too: bool = False):
        self.inner, self.undo_too, self.fails = inner, undo_too, 2

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def commit(self, batch: Batch) -> None:
        running = batch.run is not None and batch.run.status == RunStatus.RUNNING
        if self.fails and running and any("done" in cp.nodes for cp in batch.checkpoints):
            self.fails -= 1
            raise OSError("disk full")
        if self.undo_too and any(e.status == S.COMPENSATING for e in batch.effects):
            raise OSError("disk full again")
        self.inner.commit(batch)


@pytest.mark.parametrize("undo_too", [False, True])
async def test_a_run_whose_driver_fails_is_compensated_as_its_policy_asks(
        store: CheckpointStore, undo_too: bool, caplog: pytest.LogCaptureFixture) -> None:
    """An internal error of the driver itself ends the run FAILED, so ``compensate_on=["failed"]``
    undoes its effects as for a node's failure; the driver's error still reaches the caller,
    also when the compensation fails (that is logged)."""
    world = World()
    g = Graph("trip_then_done", state=Trip)

    @g.node()
    async def hotel(state, ctx):
        return {"hotel": await ctx.effect("hotel", lambda: "h-1", compensate=world.undo)}

    @g.node(after=["hotel"])
    async def done(state, ctx):
        return {}

    @g.node(after=["done"])
    async def flight(state, ctx):
        await asyncio.sleep(30)   # in flight when the commit fails
        return {}

    rt = Runtime(store=FailingCommits(store, undo_too))
    try:
        with pytest.raises(OSError, match="^disk full$"):
            await rt.start(g, {}, compensate_on=["failed"])
        [run] = await rt.runs()
        assert run.status == RunStatus.FAILED and run.error == {"class": "internal", "message": "OSError: disk full"}
        if undo_too:
            assert world.undos == [] and statuses(rt, run.id, "hotel") == DONE
            assert "could not compensate it" in caplog.text
        else:
            assert world.undos == [("hotel", keys(rt, run.id)["hotel"] + ":undo")]
            assert statuses(rt, run.id, "hotel") == [*DONE, S.COMPENSATING, S.COMPENSATED]
    finally:
        rt.close()


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_an_undo_whose_result_has_no_json_form_is_recorded_as_made(rt: Runtime, kind: str) -> None:
    """Its result is left out, nothing else: an undo left in doubt would be asked again and
    undo the effect twice."""
    world = World()

    def odd(info: EffectInfo) -> object:
        world.undo(info)
        return object()

    async def odd_async(info: EffectInfo) -> object:
        return odd(info)

    run = await rt.start(world.graph(undo_flight=odd_async if kind == "async" else odd), {})
    report = await rt.compensate(run.id)
    assert [(s.name, s.status) for s in report.steps] == [("flight", "compensated"), ("hotel", "compensated")]
    assert report.complete and "not JSON-serialisable" in (report.steps[0].error or "")
    assert statuses(rt, run.id, "flight") == [*DONE, S.COMPENSATING, S.COMPENSATED]
    assert rt.store.journal([run.id])[-1].name == "hotel"
    again = await rt.compensate(run.id, retry_in_doubt=True)
    assert [s.status for s in again.steps] == ["already", "already"]
    assert [name for name, _ in world.undos] == ["flight", "hotel"]   # once each
    await until_released(rt, run.id)
    await assert_consistent(rt, run.id)
