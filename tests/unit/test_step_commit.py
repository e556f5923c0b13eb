"""A store that refuses a commit in the middle of a run (a step's outcome, an effect's
journal entry), on every store: the commit is tried once more at once, and the run
goes on as if nothing happened. A refused commit the store had in fact applied (a
connection lost while committing) is recognised from the run's row and not written twice.
"""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from runtime import EffectStatus, Graph, NodeContext, Runtime, RunStatus, append
from runtime.core.records import Batch, EventType
from runtime.store.base import CheckpointStore

from test_end_commit import Order, World, assert_gapless_trace, order_graph


class RefusingStore:
    """A real store whose ``refuse`` commits after the first ``skip`` that keep the run
    RUNNING are refused (``applied``: the commit went in, but its caller was told it failed)."""

    def __init__(self, inner: CheckpointStore, *, skip: int, refuse: int = 1, applied: bool = False):
        self.inner, self.skip, self.refuse, self.applied = inner, skip, refuse, applied
        self.refused = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def commit(self, batch: Batch) -> None:
        if batch.run is not None and batch.run.status == RunStatus.RUNNING:
            if self.skip > 0:
                self.skip -= 1
            elif self.refuse > 0:
                self.refuse_once(batch)
        self.inner.commit(batch)

    def refuse_once(self, batch: Batch) -> None:
        """Report ``batch`` refused (applied first when ``applied``: the connection lost
        while committing)."""
        self.refuse -= 1
        self.refused += 1
        if self.applied:
            self.inner.commit(batch)
        raise OSError("connection reset by peer")


@pytest.mark.parametrize("skip", [0, 1])   # the effect's STARTED entry, its outcome
async def test_a_commit_refused_once_mid_run_is_tried_again_and_the_run_ends_normally(
        store: CheckpointStore, skip: int) -> None:
    world = World()
    refusing = RefusingStore(store, skip=skip)
    rt = Runtime(store=refusing)
    try:
        run = await rt.start(order_graph(world), {})
        assert refusing.refused == 1
        assert run.status == RunStatus.SUCCEEDED, run.error
        assert world.charges == [world.charges[0]]
        assert store.get_run(run.id).usage["tokens"] == 11
        assert_gapless_trace(store, run.id)
    finally:
        rt.close()


@pytest.mark.parametrize("skip", [0, 1])   # the effect's STARTED entry, its outcome
async def test_a_commit_applied_but_reported_refused_mid_run_is_not_written_again(
        store: CheckpointStore, skip: int) -> None:
    world = World()
    refusing = RefusingStore(store, skip=skip, applied=True)
    rt = Runtime(store=refusing)
    try:
        run = await rt.start(order_graph(world), {})
        assert refusing.refused == 1 and run.status == RunStatus.SUCCEEDED, run.error
        assert_gapless_trace(store, run.id)
        assert len(store.checkpoints(run.id)) == len({c.id for c in store.checkpoints(run.id)})
        assert world.charges == [world.charges[0]]
        assert (await rt.state_at((await rt.history(run.id))[-1].id)).model_dump() == \
            Order(receipt="receipt-1", sent=True).model_dump()
    finally:
        rt.close()



class RefusingStarts(RefusingStore):
    """Refuses ``refuse`` commits that journal an effect's STARTED entry, and only those."""

    def commit(self, batch: Batch) -> None:
        if self.refuse > 0 and any(e.status == EffectStatus.STARTED for e in batch.effects):
            self.refuse -= 1
            self.refused += 1
            raise OSError("connection reset by peer")
        self.inner.commit(batch)


async def test_an_effect_whose_start_cannot_be_recorded_is_not_called_and_not_left_in_doubt(
        store: CheckpointStore) -> None:
    """The STARTED entry's commit is refused twice (the retry too): the effect is not
    called and its node fails. The entry still goes into the store with the failure's
    batch, but beside an outcome saying it was not called: a resume calls the effect
    once, with no question about whether it happened."""
    world = World()
    refusing = RefusingStarts(store, skip=0, refuse=2)
    rt = Runtime(store=refusing)
    try:
        run = await rt.start(order_graph(world), {})
        assert refusing.refused == 2
        assert run.status == RunStatus.FAILED and world.charges == []
        assert "connection reset" in run.error["message"]
        journal = store.journal([run.id])
        assert [e.status for e in journal] == [EffectStatus.STARTED, EffectStatus.FAILED]
        assert "not called" in (journal[-1].error or "")
        resumed = await rt.resume(run.id)
        assert resumed.status == RunStatus.SUCCEEDED, resumed.error
        assert len(world.charges) == 1 and store.interrupts(run.id) == []
        assert_gapless_trace(store, run.id)
    finally:
        rt.close()


class RefusingCustom(RefusingStore):
    """Refuses the first commit that records a ``ctx.emit`` payload, and only that one."""

    def commit(self, batch: Batch) -> None:
        if self.refuse > 0 and any(e.type == EventType.CUSTOM for e in batch.events):
            self.refuse_once(batch)
        self.inner.commit(batch)


class Chunks(BaseModel):
    log: Annotated[list[str], append] = []


def write(state: Chunks, ctx: NodeContext) -> dict[str, Any]:
    ctx.emit({"progress": 0.5})
    ctx.emit({"token": "hel"}, ephemeral=True)
    return {"log": ["written"]}


async def write_async(state: Chunks, ctx: NodeContext) -> dict[str, Any]:
    return write(state, ctx)


@pytest.mark.parametrize("applied", [False, True])
@pytest.mark.parametrize("node", [write, write_async], ids=["def", "async-def"])
async def test_a_commit_refused_once_before_a_streamed_token_chunk_is_tried_again(
        store: CheckpointStore, applied: bool, node: Any) -> None:
    """An ephemeral event first commits what was recorded before it (so a reader sees them
    in order): that commit, refused once, is tried again as any other is, and not written
    twice when the store had applied it; the node is not failed by it."""
    g = Graph("chunks", state=Chunks)
    g.add_node("write", node)
    refusing = RefusingCustom(store, skip=0, applied=applied)
    rt = Runtime(store=refusing)
    try:
        events = [ev async for ev in rt.stream(g, {})]
        run = store.get_run(events[0].run_id)
        assert refusing.refused == 1
        assert run.status == RunStatus.SUCCEEDED, run.error
        assert [e.data for e in events if e.type == "custom"] == [{"payload": {"progress": 0.5}},
                                                                  {"payload": {"token": "hel"}}]
        assert_gapless_trace(store, run.id)
    finally:
        rt.close()
