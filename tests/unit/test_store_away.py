"""A store that cannot be reached for a while (a database restarting), on every store:
the run goes on, keeping its step commits (an effect's outcome among them) until the
store is back; an effect whose start cannot be recorded is not called, and its node's
retry policy tries it again; a run that ends while the store is away waits for it.
Nothing is written twice and no effect is made twice."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pydantic import BaseModel

from runtime import EffectInfo, EffectStatus, Graph, NodeContext, RetryPolicy, Runtime, RunStatus
from runtime.core.records import Batch
from runtime.store.base import CheckpointStore

from test_end_commit import assert_gapless_trace


class AwayStore:
    """A real store that, for ``back_in`` seconds after ``go_away``, refuses every commit
    and read of a run, as a database that is restarting does."""

    def __init__(self, inner: CheckpointStore):
        self.inner = inner
        self.back_at = 0.0   # away until then (``time.monotonic``)
        self.refused = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _check(self) -> None:
        if time.monotonic() < self.back_at:
            self.refused += 1
            raise ConnectionRefusedError("connection refused")

    def commit(self, batch: Batch) -> None:
        self._check()
        self.inner.commit(batch)

    def get_run(self, run_id: str) -> Any:
        self._check()
        return self.inner.get_run(run_id)

    def go_away(self, back_in: float) -> None:   # from any thread (a sync effect's)
        self.back_at = time.monotonic() + back_in


class Order(BaseModel):
    receipt: str = ""
    notes: list[str] = []


def order(store: AwayStore, calls: list[str], *, away_at: str, back_in: float) -> Graph:
    """pay (an effect) → note → finish; the store goes away at ``away_at``: right after the
    effect's call ("outcome"), just before its start is recorded ("start"), or from
    ``note`` until after the run's end ("end")."""
    g = Graph(f"away_{away_at}", state=Order)

    def charge(info: EffectInfo) -> str:
        calls.append(info.key)
        if away_at == "outcome":
            store.go_away(back_in)
        return f"receipt-{len(calls)}"

    @g.node(retry=RetryPolicy(max_attempts=20, initial_interval=0.05, backoff=1.5, max_interval=0.2))
    async def pay(state: Order, ctx: NodeContext) -> dict[str, Any]:
        if away_at == "start" and ctx.attempt == 1:
            store.go_away(back_in)
        return {"receipt": await ctx.effect("charge", charge)}

    @g.node(after=["pay"])
    async def note(state: Order, ctx: NodeContext) -> dict[str, Any]:
        if away_at == "end":   # away from here until after the run's end
            store.go_away(back_in)
        await asyncio.sleep(0.05)   # the group commit is tried meanwhile
        return {"notes": [*state.notes, "noted"]}

    @g.node(after=["note"])
    async def finish(state: Order, ctx: NodeContext) -> dict[str, Any]:
        return {"notes": [*state.notes, "done"]}

    return g


async def test_an_effects_outcome_is_kept_while_the_store_is_away_and_recorded_once_it_is_back(
        store: CheckpointStore) -> None:
    away, calls = AwayStore(store), []
    rt = Runtime(store=away)   # type: ignore[arg-type]
    try:
        run = await rt.start(order(away, calls, away_at="outcome", back_in=0.5), {})
        assert away.refused >= 2   # the outcome's commit, and the tries after it
        assert run.status == RunStatus.SUCCEEDED, run.error
        assert len(calls) == 1
        assert [e.status for e in store.journal([run.id])] == [EffectStatus.STARTED, EffectStatus.SUCCEEDED]
        assert_gapless_trace(store, run.id)
        assert (await rt.state_at((await rt.history(run.id))[-1].id)).model_dump() == \
            {"receipt": "receipt-1", "notes": ["noted", "done"]}
    finally:
        rt.close()


async def test_an_effect_whose_start_cannot_be_recorded_is_tried_again_by_its_retry_policy(
        store: CheckpointStore) -> None:
    away, calls = AwayStore(store), []
    rt = Runtime(store=away)   # type: ignore[arg-type]
    try:
        run = await rt.start(order(away, calls, away_at="start", back_in=0.3), {})
        assert run.status == RunStatus.SUCCEEDED, run.error
        assert len(calls) == 1   # not called while its start could not be recorded
        attempts = [a for a in store.node_attempts(run.id) if a.node == "pay"]
        assert len(attempts) >= 2 and attempts[0].error_class == "transient"
        assert "could not be recorded" in (attempts[0].error or "")
        assert_gapless_trace(store, run.id)
    finally:
        rt.close()


async def test_a_run_that_ends_while_the_store_is_still_away_waits_for_it(store: CheckpointStore) -> None:
    away, calls = AwayStore(store), []
    rt = Runtime(store=away)   # type: ignore[arg-type]
    try:
        run = await rt.start(order(away, calls, away_at="end", back_in=1.0), {})
        assert run.status == RunStatus.SUCCEEDED, run.error
        stored = store.get_run(run.id)
        assert stored.status == RunStatus.SUCCEEDED and stored.lease_owner is None
        assert len(calls) == 1
        assert_gapless_trace(store, run.id)
    finally:
        rt.close()
