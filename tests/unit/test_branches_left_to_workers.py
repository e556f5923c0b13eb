"""``fork(..., queue=True)`` and ``submit_replay``, on every store: the branch is created
QUEUED, without a lease, and nothing of it runs in the calling process; a worker (another
Runtime over the same store: all it knows of the branch is what the store holds) claims it
with ``resume(run_id)`` and drives it with the effects mode, mocks, limits and patched input
it was created with. Bad requests change nothing."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from runtime import (EffectInfo, EffectStatus, ErrorClass, Graph, InterruptKind, InvalidRequest, NodeContext,
                     Runtime, RunKind, RunStatus)
from runtime.store.base import CheckpointStore


class Order(BaseModel):
    amount: int = 10
    receipt: str = ""
    confirmed: bool = False


class World:
    """The outside world: every real call of the charge effect is counted."""

    def __init__(self) -> None:
        self.charges: list[str] = []

    def charge(self, info: EffectInfo) -> str:
        self.charges.append(info.key)
        return f"receipt-{len(self.charges)}"


def checkout(world: World) -> Graph:
    g = Graph("checkout", state=Order)

    @g.node()
    def price(state: Order) -> dict[str, Any]:
        return {"amount": state.amount}

    @g.node(after=["price"])
    async def pay(state: Order, ctx: NodeContext) -> dict[str, Any]:
        return {"receipt": await ctx.effect("charge", world.charge, request={"amount": state.amount})}

    @g.node(after=["pay"])
    def confirm(state: Order) -> dict[str, Any]:
        return {"confirmed": True}

    return g


class Recorded:
    """A succeeded checkout run, the process that made it, and a worker over the same store."""

    def __init__(self, store: CheckpointStore) -> None:
        self.world, self.store = World(), store
        self.here = Runtime(store=store, graphs=[checkout(self.world)])
        self.worker = Runtime(store=store, graphs=[checkout(self.world)])

    async def run(self) -> str:
        done = await self.here.start(checkout(self.world), {"amount": 10})
        assert done.status == RunStatus.SUCCEEDED and len(self.world.charges) == 1
        return done.id

    async def checkpoint_after(self, run_id: str, node: str) -> str:
        return next(cp.id for cp in await self.here.history(run_id) if node in cp.nodes)

    def close(self) -> None:
        self.here.close()
        self.worker.close()


@pytest.fixture
def recorded(store: CheckpointStore) -> Any:
    r = Recorded(store)
    yield r
    r.close()


async def test_a_queued_fork_is_created_for_a_worker_and_nothing_of_it_runs_here(recorded: Recorded) -> None:
    run_id = await recorded.run()
    cp = await recorded.checkpoint_after(run_id, "price")
    fork = await recorded.here.fork(cp, queue=True)
    assert fork.status == RunStatus.QUEUED and fork.kind == RunKind.FORK and fork.lease_owner is None
    stored = recorded.store.get_run(fork.id)
    assert stored.status == RunStatus.QUEUED and stored.lease_owner is None and stored.parent_run_id == run_id
    assert [e.type for e in recorded.store.events(fork.id)] == ["run.created"]
    assert recorded.store.journal([fork.id]) == [] and recorded.store.node_attempts(fork.id) == []

    done = await recorded.worker.resume(fork.id)   # what a worker does with a queued run
    assert done.status == RunStatus.SUCCEEDED, done.error
    assert len(recorded.world.charges) == 1   # the recorded charge was served, not made again
    [served] = recorded.store.journal([fork.id])
    assert served.status == EffectStatus.MOCKED and served.source == f"run:{run_id}"
    assert [e.type for e in recorded.store.events(fork.id)][:2] == ["run.created", "run.claim"]


async def test_a_worker_drives_a_queued_fork_from_its_patched_input(recorded: Recorded) -> None:
    run_id = await recorded.run()
    cp = await recorded.checkpoint_after(run_id, "price")
    fork = await recorded.here.fork(cp, {"amount": 7}, queue=True, mocks={"charge": "mocked-7"})
    assert [e.type for e in recorded.store.events(fork.id)] == ["run.created", "state.patched"]
    assert [c.source for c in await recorded.here.history(fork.id)] == ["fork", "patch"]

    done = await recorded.worker.resume(fork.id)
    assert done.status == RunStatus.SUCCEEDED, done.error
    state = await recorded.worker.state_at((await recorded.worker.history(fork.id))[-1].id)
    assert state.model_dump() == {"amount": 7, "receipt": "mocked-7", "confirmed": True}
    [served] = recorded.store.journal([fork.id])
    assert served.status == EffectStatus.MOCKED and served.source == "mocks"
    assert len(recorded.world.charges) == 1


async def test_a_queued_mocked_fork_pauses_on_an_unrecorded_effect_in_the_worker_instead_of_running_it(
        recorded: Recorded) -> None:
    run_id = await recorded.run()
    cp = await recorded.checkpoint_after(run_id, "price")
    fork = await recorded.here.fork(cp, {"amount": 99}, queue=True)   # a request the recording never made

    paused = await recorded.worker.resume(fork.id)
    assert paused.status == RunStatus.INTERRUPTED
    [question] = await recorded.worker.interrupts(fork.id)
    assert question.kind == InterruptKind.UNRECORDED and question.node == "pay"
    assert len(recorded.world.charges) == 1   # never called live by the worker


async def test_a_queued_live_fork_runs_its_effects_for_real_in_the_worker(recorded: Recorded) -> None:
    run_id = await recorded.run()
    cp = await recorded.checkpoint_after(run_id, "price")
    fork = await recorded.here.fork(cp, queue=True, effects="live")
    assert recorded.world.charges[1:] == []
    done = await recorded.worker.resume(fork.id)
    assert done.status == RunStatus.SUCCEEDED, done.error
    assert len(recorded.world.charges) == 2 and recorded.world.charges[0] != recorded.world.charges[1]  # new key


async def test_a_queued_fork_keeps_the_limits_it_was_given_for_the_worker(recorded: Recorded) -> None:
    run_id = await recorded.run()
    cp = await recorded.checkpoint_after(run_id, "price")
    fork = await recorded.here.fork(cp, queue=True, max_steps=1)   # pay, then no room for confirm
    assert recorded.store.get_run(fork.id).limits["max_steps"] == 1
    done = await recorded.worker.resume(fork.id)
    assert done.status == RunStatus.FAILED and done.error is not None
    assert done.error["class"] == ErrorClass.LIMIT_EXCEEDED


async def test_a_submitted_replay_is_queued_and_reported_once_a_worker_ran_it(recorded: Recorded) -> None:
    run_id = await recorded.run()
    replay = await recorded.here.submit_replay(run_id)
    assert replay.status == RunStatus.QUEUED and replay.kind == RunKind.REPLAY and replay.lease_owner is None
    assert recorded.store.node_attempts(replay.id) == []
    early = await recorded.here.replay_report(replay.id)   # nothing ran yet: nothing compared yet
    assert early.status == "queued" and {n.verdict for n in early.nodes} == {"not run"}

    done = await recorded.worker.resume(replay.id)
    assert done.status == RunStatus.SUCCEEDED, done.error
    report = await recorded.here.replay_report(replay.id)   # recorded data: any process reads it
    assert report.status == "succeeded" and report.same
    assert len(recorded.world.charges) == 1
    assert {e.status for e in recorded.store.journal([replay.id])} == {EffectStatus.MOCKED}


async def test_a_submitted_replay_from_a_checkpoint_serves_the_mocks_it_was_given(recorded: Recorded) -> None:
    run_id = await recorded.run()
    cp = await recorded.checkpoint_after(run_id, "price")
    replay = await recorded.here.submit_replay(cp, mocks={"unused": 1})
    assert recorded.store.get_run(replay.id).options["mocks"] == {"unused": 1}
    done = await recorded.worker.resume(replay.id)
    assert done.status == RunStatus.SUCCEEDED
    assert (await recorded.worker.replay_report(replay.id)).node("price").verdict == "inherited"


async def test_branches_that_cannot_be_left_to_workers_change_nothing(recorded: Recorded) -> None:
    run_id = await recorded.run()
    cp = await recorded.checkpoint_after(run_id, "price")
    before = recorded.store.list_runs()
    with pytest.raises(InvalidRequest, match="queue must be True or False"):
        await recorded.here.fork(cp, queue="yes")   # type: ignore[arg-type]
    # code made by a factory: a worker could not import it, and would run other code of its version
    with pytest.raises(InvalidRequest, match="a queued branch is driven by a worker, which must import its code"):
        await recorded.here.fork(cp, queue=True, graph=checkout(recorded.world))
    with pytest.raises(InvalidRequest, match="must import its code"):
        await recorded.here.submit_replay(run_id, checkout(recorded.world))
    with pytest.raises(InvalidRequest, match="patch does not fit"):
        await recorded.here.fork(cp, {"amount": "many"}, queue=True)
    with pytest.raises(InvalidRequest, match="mocks only apply"):
        await recorded.here.fork(cp, queue=True, effects="live", mocks={"charge": "x"})
    assert recorded.store.list_runs() == before
