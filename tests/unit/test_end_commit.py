"""A store that refuses the commit ending or pausing a run, on every store.

A refusal that passes is retried: the run ends as if nothing happened, and nothing is
written twice (also when the refused commit had in fact been applied). A refusal that
lasts gives the caller ``EndNotRecorded`` naming the run; its lease is released at
once, so another process resumes it without waiting the lease out, and no effect is
repeated. ``LeaseLost`` is never retried: another process owns the run.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from pydantic import BaseModel

from runtime import (
    NodeContext,
    EffectInfo,
    EffectStatus,
    EndNotRecorded,
    Graph,
    InvalidRequest,
    LeaseLost,
    RunStatus,
    Runtime,
)
from runtime.core.records import Batch
from runtime.store.base import CheckpointStore


class Order(BaseModel):
    receipt: str = ""
    sent: bool = False
    approved: bool = False


class RefusingStore:
    """A real store whose commits that end or pause a run are refused, ``refuse`` times
    (``applied``: the commit went in, but its caller was told it failed, as when a
    connection drops while the database commits)."""

    def __init__(self, inner: CheckpointStore, refuse: int = 0, error: Exception | None = None,
                 applied: bool = False):
        self.inner, self.refuse, self.applied = inner, refuse, applied
        self.error = error or OSError("disk full")
        self.ends_tried = 0
        #: whether the run's lease is released (a RUNNING row written without a lease) refused too
        self.refuse_release = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def commit(self, batch: Batch) -> None:
        run = batch.run
        if run is not None and run.status != RunStatus.RUNNING:
            self.ends_tried += 1
            if self.refuse > 0:
                self.refuse -= 1
                if self.applied:
                    self.inner.commit(batch)
                raise self.error
        elif self.refuse_release and run is not None and run.lease_owner is None:
            raise OSError("disk full (the lease's release too)")
        self.inner.commit(batch)


class World:
    def __init__(self) -> None:
        self.charges: list[str] = []

    def charge(self, info: EffectInfo) -> str:
        self.charges.append(info.key)
        info.usage(tokens=10)
        return f"receipt-{len(self.charges)}"


def order_graph(world: World, name: str = "order") -> Graph:
    g = Graph(name, state=Order)

    @g.node()
    async def pay(state, ctx):
        return {"receipt": await ctx.effect("charge", world.charge)}

    @g.node(after=["pay"])
    async def notify(state, ctx):
        ctx.usage(tokens=1)
        return {"sent": True}

    return g


def assert_gapless_trace(store: CheckpointStore, run_id: str) -> None:
    seqs = [e.seq for e in store.events(run_id)]
    assert seqs == list(range(1, len(seqs) + 1))
    ends = [e.type for e in store.events(run_id) if str(e.type).startswith("run.")]
    assert len(ends) == len(set(ends)), ends   # one run.started, one run.succeeded


async def test_a_final_commit_refused_once_is_retried_and_the_run_ends_normally(store: CheckpointStore) -> None:
    world = World()
    refusing = RefusingStore(store, refuse=1)
    rt = Runtime(store=refusing)
    try:
        run = await rt.start(order_graph(world), {})
        assert run.status == RunStatus.SUCCEEDED and run.lease_owner is None
        assert refusing.ends_tried == 2
        stored = store.get_run(run.id)
        assert stored.status == RunStatus.SUCCEEDED and stored.lease_owner is None
        assert stored.usage["tokens"] == 11 and world.charges == [world.charges[0]]
        assert_gapless_trace(store, run.id)
        assert len(store.checkpoints(run.id)) == len({c.id for c in store.checkpoints(run.id)})
        assert (await rt.state_at((await rt.history(run.id))[-1].id)).model_dump() == \
            {"receipt": "receipt-1", "sent": True, "approved": False}
    finally:
        rt.close()


async def test_a_final_commit_applied_but_reported_refused_is_not_written_again(store: CheckpointStore) -> None:
    world = World()
    refusing = RefusingStore(store, refuse=1, applied=True)
    rt = Runtime(store=refusing)
    try:
        run = await rt.start(order_graph(world), {})
        assert run.status == RunStatus.SUCCEEDED
        assert_gapless_trace(store, run.id)
        assert len(store.checkpoints(run.id)) == len({c.id for c in store.checkpoints(run.id)})
        assert store.get_run(run.id).usage["tokens"] == 11
    finally:
        rt.close()


async def test_a_pause_whose_commit_is_refused_once_pauses_normally(store: CheckpointStore) -> None:
    g = Graph("approval", state=Order)

    @g.node()
    async def ask(state, ctx):
        return {"approved": (await ctx.interrupt({"question": "ship it?"}))["yes"]}

    rt = Runtime(store=RefusingStore(store, refuse=1))
    try:
        run = await rt.start(g, {})
        assert run.status == RunStatus.INTERRUPTED
        assert_gapless_trace(store, run.id)
        run = await rt.resume(run.id, {"yes": True})
        assert run.status == RunStatus.SUCCEEDED
    finally:
        rt.close()


async def test_a_final_commit_refused_for_good_says_so_and_another_process_resumes_the_run_at_once(
        store: CheckpointStore) -> None:
    world = World()
    refusing = RefusingStore(store, refuse=10**6)
    rt = Runtime(store=refusing, lease_ttl=3600.0)
    # another owner: this process's lease binds it
    other = Runtime(store=store, lease_ttl=3600.0, graphs=[order_graph(world)])
    try:
        with pytest.raises(EndNotRecorded) as raised:
            await rt.start(order_graph(world), {})
        [run] = store.list_runs()
        assert raised.value.run_id == run.id and raised.value.released
        message = str(raised.value)
        assert run.id in message and f"harness resume {run.id}" in message and "disk full" in message
        assert isinstance(raised.value.__cause__, OSError)
        assert 2 <= refusing.ends_tried <= 5   # tried again, a few times only
        # still running in the store, but held by nobody: recoverable now, not after an hour
        assert run.status == RunStatus.RUNNING and run.lease_owner is None and run.lease_expires_at is None
        assert other.orphaned(run)

        ended = await other.resume(run.id)
        assert ended.id == run.id and ended.status == RunStatus.SUCCEEDED
        assert world.charges == [world.charges[0]]    # the effect ran once
        assert [e.status for e in store.journal([run.id])] == [EffectStatus.STARTED, EffectStatus.SUCCEEDED]
        # the effect's 10 tokens counted once; notify's own token may have reached the store
        # (a group commit) before its outcome did, and notify then really ran twice
        assert store.get_run(run.id).usage["tokens"] in (11, 12)
        assert (await other.state_at((await other.history(run.id))[-1].id)).model_dump() == \
            {"receipt": "receipt-1", "sent": True, "approved": False}
        assert_gapless_trace(store, run.id)
    finally:
        rt.close()
        other.close()


async def test_when_the_lease_cannot_be_released_either_the_error_says_to_wait_for_it(
        store: CheckpointStore) -> None:
    refusing = RefusingStore(store, refuse=10**6)
    refusing.refuse_release = True
    rt = Runtime(store=refusing, lease_ttl=3600.0)
    other = Runtime(store=store, lease_ttl=3600.0)
    try:
        with pytest.raises(EndNotRecorded) as raised:
            await rt.start(order_graph(World()), {})
        [run] = store.list_runs()
        assert not raised.value.released and "once its lease expires" in str(raised.value)
        assert run.status == RunStatus.RUNNING and run.lease_owner == rt.owner
        with pytest.raises(InvalidRequest, match="until its lease expires"):
            await other.resume(run.id)
    finally:
        rt.close()
        other.close()


async def test_lease_lost_at_the_end_is_not_retried(store: CheckpointStore) -> None:
    refusing = RefusingStore(store, refuse=10**6, error=LeaseLost("another process took the run over"))
    rt = Runtime(store=refusing)
    try:
        with pytest.raises(LeaseLost):
            await rt.start(order_graph(World()), {})
        assert refusing.ends_tried == 1
    finally:
        rt.close()


async def test_a_driver_error_whose_failed_end_is_refused_too_leaves_the_run_resumable(
        store: CheckpointStore) -> None:
    """A commit refused mid-run (before an effect's call) stops the driver, which records the
    run FAILED; when the store refuses that too, the caller learns the run can be resumed,
    and it can, at once: the effect is then called, once."""
    world = World()
    refusing = RefusingStore(store, refuse=10**6)
    inner_commit = refusing.commit
    mid_run = []

    def commit(batch: Batch) -> None:   # the one forcing the effect's start to disk, before its call
        if not mid_run and any(e.status == EffectStatus.STARTED for e in batch.effects):
            mid_run.append(batch)
            raise OSError("disk full")
        inner_commit(batch)

    refusing.commit = commit  # type: ignore[method-assign]
    rt = Runtime(store=refusing, lease_ttl=3600.0)
    other = Runtime(store=store, lease_ttl=3600.0, graphs=[order_graph(world)])
    try:
        with pytest.raises(EndNotRecorded) as raised:
            await rt.start(order_graph(world), {})
        assert mid_run and raised.value.released
        assert str(raised.value.__cause__) == "disk full"   # the driver's own error
        [run] = store.list_runs()
        assert run.status == RunStatus.RUNNING and other.orphaned(run)
        # the effect's 10 tokens, and notify's 1 if the first driver ran it and a group commit
        # took its usage before the end was refused (where they fell depends on timing)
        before = run.usage["tokens"]
        assert before in (10, 11)
        seen = len(store.events(run.id))
        assert (await other.resume(run.id)).status == RunStatus.SUCCEEDED
        # the effect is served, not counted again; each notify run on resume counts its 1
        notify_runs = sum(e.type == "node.start" and e.node == "notify" for e in store.events(run.id)[seen:])
        assert len(world.charges) == 1 and store.get_run(run.id).usage["tokens"] == before + notify_runs
        assert_gapless_trace(store, run.id)
    finally:
        rt.close()
        other.close()


# ------------------------------------------------------------------ usage reported after an end that was not recorded


class Late(BaseModel):
    text: str = ""
    done: bool = False


class LateCall:
    """An effect in a ``def`` node whose deadline gives up on it; its thread goes on until
    ``release`` and then reports 500 tokens, after the run's driver has stopped."""

    def __init__(self) -> None:
        self.release, self.reported = threading.Event(), threading.Event()
        self.started = threading.Event()
        self.calls = {"llm": 0, "other": 0}

    def graph(self) -> Graph:
        g = Graph("late-usage", state=Late)

        def llm(info: EffectInfo) -> str:
            self.started.set()   # its start is on disk: forced before the call
            self.release.wait(10)
            self.calls["llm"] += 1
            info.usage(tokens=500)
            self.reported.set()
            return "late"

        @g.node(timeout=0.3)
        def ask(state: Late, ctx: NodeContext) -> dict[str, Any]:
            return {"text": ctx.effect("llm", llm)}

        @g.node()
        async def other(state: Late, ctx: NodeContext) -> dict[str, Any]:
            # after the effect's start was committed: this node's outcome waits for the end's batch
            await asyncio.to_thread(self.started.wait, 10)
            self.calls["other"] += 1
            ctx.usage(tokens=7)
            return {"done": True}

        return g

    async def report(self, store: CheckpointStore, run_id: str, tokens: int) -> None:
        """Let the effect finish, and wait until the run's row shows ``tokens``."""
        self.release.set()
        assert await asyncio.to_thread(self.reported.wait, 10)
        for _ in range(500):
            if store.get_run(run_id).usage["tokens"] == tokens:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"the row's usage is {store.get_run(run_id).usage}, not {tokens} tokens")


async def test_usage_reported_after_an_unrecorded_end_counts_once_with_the_work_resume_redoes(
        store: CheckpointStore) -> None:
    late = LateCall()
    # one batch for the whole run: ``other``'s success and its 7 tokens are in the refused end
    rt = Runtime(store=RefusingStore(store, refuse=10**6), lease_ttl=3600.0, group_commit=5.0)
    other = Runtime(store=store, lease_ttl=3600.0, graphs=[late.graph()])
    try:
        with pytest.raises(EndNotRecorded):
            await rt.start(late.graph(), {})
        [run] = store.list_runs()
        assert run.status == RunStatus.RUNNING and run.usage["tokens"] == 0
        # the late 500 tokens go on the row; the 7 of the unrecorded work do not: resume redoes it
        await late.report(store, run.id, 500)
        resumed = await other.resume(run.id)
        assert late.calls == {"llm": 1, "other": 2}
        assert store.get_run(resumed.id).usage["tokens"] == 507
    finally:
        rt.close()
        other.close()


class DroppedConnection(RefusingStore):
    """The end's commit goes in, then the connection drops: the commit and every read
    fail until ``down`` is cleared."""

    down = False

    def commit(self, batch: Batch) -> None:
        if self.down:
            raise OSError("connection down")
        self.inner.commit(batch)
        if batch.run is not None and batch.run.status != RunStatus.RUNNING:
            self.down = True
            raise OSError("connection lost while committing")

    def get_run(self, run_id: str) -> Any:
        if self.down:
            raise OSError("connection down")
        return self.inner.get_run(run_id)


async def test_late_usage_after_an_end_of_unknown_outcome_keeps_the_end_that_went_in(
        store: CheckpointStore) -> None:
    late = LateCall()
    dropping = DroppedConnection(store)
    rt = Runtime(store=dropping, lease_ttl=3600.0)
    try:
        with pytest.raises(EndNotRecorded) as raised:
            await rt.start(late.graph(), {})
        assert not raised.value.released and "may still be running" in str(raised.value)
        [run] = store.list_runs()
        assert run.status == RunStatus.FAILED   # the end did go in
        ended = (run.status, run.event_seq, len(store.events(run.id)))
        dropping.down = False
        await late.report(store, run.id, 507)
        run = store.get_run(run.id)
        assert (run.status, run.event_seq, len(store.events(run.id))) == ended   # not set back to RUNNING
    finally:
        rt.close()
