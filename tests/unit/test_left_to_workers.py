"""``resume(..., queue=True)``, on every store: what goes on is left to a worker. A paused
run's answers are recorded and the run QUEUED again, without a lease, and nothing of it
runs in the answering process; a failed run's continuation is created QUEUED; whoever
claims it next (a worker: ``resume(run_id)``) drives it, each effect once. Bad requests
change nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from runtime import EffectInfo, Graph, InvalidRequest, NodeContext, Runtime, RunStatus
from runtime.store.base import CheckpointStore


class S(BaseModel):
    approved: bool = False
    receipt: str = ""


class Approval(BaseModel):
    approve: bool


class World:
    def __init__(self) -> None:
        self.charges: list[str] = []
        self.broken = False

    def charge(self, info: EffectInfo) -> str:
        self.charges.append(info.key)
        return f"receipt-{len(self.charges)}"


def approve_then_pay(world: World) -> Graph:
    g = Graph("approve_then_pay", state=S)

    @g.node()
    async def ask(state: S, ctx: NodeContext) -> dict[str, Any]:
        answer = await ctx.interrupt({"question": "pay?"}, response=Approval)
        return {"approved": answer.approve}

    @g.node(after=["ask"])
    async def pay(state: S, ctx: NodeContext) -> dict[str, Any]:
        if world.broken:
            raise RuntimeError("the payment service is down")
        return {"receipt": await ctx.effect("charge", world.charge)}

    return g


def runtimes(store: CheckpointStore, world: World) -> tuple[Runtime, Runtime]:
    """The process that answers, and a worker (another Runtime over the same store)."""
    g = approve_then_pay(world)
    return Runtime(store=store, graphs=[g]), Runtime(store=store, graphs=[g])


async def test_an_answer_left_to_workers_is_recorded_and_the_run_waits_for_one(store: CheckpointStore) -> None:
    world = World()
    person, worker = runtimes(store, world)
    try:
        paused = await person.start(approve_then_pay(world), {})
        assert paused.status == RunStatus.INTERRUPTED
        queued = await person.resume(paused.id, {"approve": True}, answered_by="ada", queue=True)
        assert queued.status == RunStatus.QUEUED and queued.lease_owner is None
        assert world.charges == []   # nothing of it ran in the answering process
        stored = store.get_run(paused.id)
        assert stored.status == RunStatus.QUEUED and stored.lease_owner is None
        types = [e.type for e in store.events(paused.id)]
        assert types[-3:] == ["interrupt.answered", "node.resume", "run.queue"]
        [asked] = store.interrupts(paused.id)
        assert asked.status.value == "answered" and asked.answer == {"approve": True}

        done = await worker.resume(paused.id)   # what a worker does with a queued run
        assert done.status == RunStatus.SUCCEEDED, done.error
        assert len(world.charges) == 1 and done.id == paused.id
        assert (await worker.state_at((await worker.history(done.id))[-1].id)).model_dump() == \
            {"approved": True, "receipt": "receipt-1"}
    finally:
        person.close()
        worker.close()


async def test_a_failed_run_left_to_workers_is_continued_by_one(store: CheckpointStore) -> None:
    world = World()
    world.broken = True
    person, worker = runtimes(store, world)
    try:
        paused = await person.start(approve_then_pay(world), {})
        failed = await person.resume(paused.id, {"approve": True})
        assert failed.status == RunStatus.FAILED
        world.broken = False
        continuation = await person.resume(failed.id, queue=True, max_steps=50)
        assert continuation.status == RunStatus.QUEUED and continuation.parent_run_id == failed.id
        assert continuation.limits["max_steps"] == 50 and world.charges == []
        assert store.get_run(failed.id).status == RunStatus.FAILED
        done = await worker.resume(continuation.id)
        assert done.status == RunStatus.SUCCEEDED and len(world.charges) == 1
    finally:
        person.close()
        worker.close()


async def test_leaving_to_workers_what_cannot_be_left_changes_nothing(store: CheckpointStore) -> None:
    world = World()
    rt = Runtime(store=store)
    try:
        paused = await rt.start(approve_then_pay(world), {})
        before = store.events(paused.id)
        with pytest.raises(InvalidRequest, match="queue must be True or False"):
            await rt.resume(paused.id, {"approve": True}, queue="yes")   # type: ignore[arg-type]
        queued = await rt.resume(paused.id, {"approve": True}, queue=True)
        after = store.events(paused.id)
        with pytest.raises(InvalidRequest, match="queueing it takes answers only when"):
            await rt.resume(queued.id, {"approve": False}, queue=True)
        assert store.events(paused.id) == after and len(after) > len(before)
        assert (await rt.resume(queued.id, queue=True)).status == RunStatus.QUEUED   # already a worker's
        done = await rt.resume(queued.id)   # claimed here: a later resume drives a queued run
        assert done.status == RunStatus.SUCCEEDED
        with pytest.raises(InvalidRequest, match="already succeeded"):
            await rt.resume(done.id, queue=True)
    finally:
        rt.close()


async def test_answers_left_for_a_run_that_pauses_before_taking_them_are_recorded_and_the_run_queued(
        tmp_path: Any) -> None:
    """The process driving the run pauses it just as the answers are left for it (between its
    last look for them and its pause): the caller answers the paused run and leaves it QUEUED,
    so the answers never wait on a run nobody drives."""
    import concurrent.futures
    import time

    from runtime import SqlStore

    class T(BaseModel):
        a: str = ""
        b: str = ""

    g = Graph("pause_as_sent", state=T)

    @g.node()
    async def ask(state: T, ctx: NodeContext) -> dict[str, Any]:
        return {"a": str(await ctx.interrupt({"q": "ok?"}))}

    @g.node()
    async def slow(state: T, ctx: NodeContext) -> dict[str, Any]:
        await asyncio.sleep(0.5)
        return {"b": "done"}

    url = f"sqlite:///{tmp_path / 'race.db'}"
    driver, caller = Runtime(store=SqlStore(url), graphs=[g]), Runtime(store=SqlStore(url), graphs=[g])
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:   # the driving process: an event loop of its own
        driving = asyncio.wrap_future(pool.submit(lambda: asyncio.run(driver.start(g, {}))))
        while True:
            await asyncio.sleep(0.02)
            found = caller.store.list_runs()
            if found and caller.store.interrupts(found[0].id) and found[0].status == RunStatus.RUNNING:
                break
        run_id = found[0].id
        [question] = caller.store.interrupts(run_id)
        send = caller.store.send_answers

        def after_the_pause(*args: Any, **kwargs: Any) -> bool:   # the caller held up for a moment
            while caller.store.get_run(run_id).status == RunStatus.RUNNING:
                time.sleep(0.02)
            return send(*args, **kwargs)

        caller.store.send_answers = after_the_pause   # type: ignore[method-assign]
        returned = await caller.resume(run_id, answers={question.id: "yes"}, queue=True)
        assert (await driving).status == RunStatus.INTERRUPTED
        assert returned.status == RunStatus.QUEUED
        [answered] = caller.store.interrupts(run_id)
        assert answered.status.value == "answered" and answered.answer == "yes"
        assert caller.store.sent_answers(run_id) == {}
        done = await caller.resume(run_id)   # a worker's claim
        assert done.status == RunStatus.SUCCEEDED
    finally:
        pool.shutdown()
        driver.close()
        caller.close()


class AnHourLater:
    """A clock an hour ahead: to it the driving process's lease has expired (its process is gone)."""

    def time(self) -> float:
        import time
        return time.time() + 3600


async def test_an_answer_left_for_a_run_whose_process_is_gone_goes_to_the_worker_that_recovers_it(
        store: CheckpointStore) -> None:
    """The run asked a question while a branch still ran, then its process died: an answer
    left for workers is kept (not refused), and the worker that recovers the run takes it."""
    held, go = asyncio.Event(), asyncio.Event()
    first = {"hold": True}
    world = World()

    def graph() -> Graph:
        g = Graph("ask_beside_slow", state=S)

        @g.node()
        async def ask(state: S, ctx: NodeContext) -> dict[str, Any]:
            answer = await ctx.interrupt({"question": "pay?"}, response=Approval)
            return {"approved": answer.approve}

        @g.node()
        async def hold(state: S, ctx: NodeContext) -> dict[str, Any]:
            if first.pop("hold", False):
                held.set()
                await go.wait()   # its process stops here for good
            return {"receipt": await ctx.effect("charge", world.charge)}

        return g

    owner = Runtime(store=store)
    later = Runtime(store=store, clock=AnHourLater(), graphs=[graph()])
    worker = Runtime(store=store, clock=AnHourLater(), graphs=[graph()])
    task = asyncio.create_task(owner.start(graph(), {}))
    try:
        await asyncio.wait_for(held.wait(), 10)
        run_id = (await owner.runs())[0].id
        while not store.interrupts(run_id):
            await asyncio.sleep(0.01)
        [question] = store.interrupts(run_id)
        if not store.durable:   # nothing but this process sees a memory store: no worker to leave it for
            with pytest.raises(InvalidRequest, match="queueing it takes answers only when"):
                await later.resume(run_id, answers={question.id: {"approve": True}}, queue=True)
            return
        left = await later.resume(run_id, answers={question.id: {"approve": True}}, queue=True)
        assert left.status == RunStatus.RUNNING   # nothing of it runs here
        done = await worker.resume(run_id)        # the worker that recovers it
        assert done.status == RunStatus.SUCCEEDED
        assert done.id == run_id and len(world.charges) == 1
        final = store.find_checkpoint(run_id)
        assert final is not None and (await worker.state_at(final.id)).approved is True
    finally:
        go.set()
        await asyncio.gather(task, return_exceptions=True)
        for rt in (owner, later, worker):
            rt.close()
