"""The seed experiment: a sibling's failure never repeats a successful side effect.

Nodes A and B run in parallel. A performs a counted external effect through
``ctx.effect``; B fails on its first attempt. Without a retry policy the run FAILS
and ``resume`` continues it as a new continuation run where B's second attempt
succeeds; A must not run again and its effect must have happened exactly once.
With ``retry=RetryPolicy(max_attempts=2)`` on B the retry happens inside the same
run, with the same guarantee for A.

Every relative ordering of "A's progress" and "B's failure" is forced with gates
(``threading.Event``, usable from async nodes, sync nodes and effect functions alike)
plus a wait on the store until the other node's outcome is *recorded*, so no
ordering depends on timing:

* ``a_first``       A has finished (its success is in the store) before B fails;
* ``before_effect`` B's failure is recorded while A has not called its effect yet;
* ``in_effect``     B's failure is recorded while A's effect function is executing;
* ``after_effect``  B's failure is recorded after A's effect returned, before A returns.

Each ordering runs with A/B async/sync in all four combinations, on MemoryStore and
on SqlStore (a SQLite file).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness_checks import assert_trace_consistent, effect_entries, statuses
from pydantic import BaseModel

from runtime import (
    Graph,
    MemoryStore,
    NodeStatus,
    RetryPolicy,
    RunKind,
    RunStatus,
    Runtime,
    SqlStore,
    TransientError,
)
from runtime import ExecutableGraph
from runtime import EffectStatus

TIMEOUT = 10.0          # no gate or condition may take longer than this
ORDERS = ["a_first", "before_effect", "in_effect", "after_effect"]
KINDS = [("async", "async"), ("sync", "async"), ("async", "sync"), ("sync", "sync")]
KIND_IDS = [f"A_{a}-B_{b}" for a, b in KINDS]


class SeedState(BaseModel):
    a: str | None = None
    b: str | None = None
    receipt: str | None = None


class Probe:
    """What the outside world saw, plus the gates that force an ordering."""

    def __init__(self, rt: Runtime):
        self.rt = rt
        self.lock = threading.Lock()
        self.a_calls = 0
        self.b_calls = 0
        self.effect_keys: list[str] = []
        self.problems: list[str] = []
        self.a_at_point = threading.Event()   # A reached the point where B must fail
        self.a_returning = threading.Event()  # A is about to return (ordering a_first)
        self.b_raising = threading.Event()    # B is about to raise its failure

    def bump(self, who: str) -> int:
        with self.lock:
            n = getattr(self, f"{who}_calls") + 1
            setattr(self, f"{who}_calls", n)
            return n

    def charge(self, key: str) -> str:
        with self.lock:
            self.effect_keys.append(key)
            return f"receipt-{len(self.effect_keys)}"

    def recorded(self, run_id: str, node: str, types: tuple[str, ...]) -> bool:
        return any(e.node == node and e.type in types for e in self.rt.store.events(run_id))

    # -- waiting: gates and store conditions, each bounded by TIMEOUT

    def _timeout(self, what: str) -> AssertionError:
        msg = f"timed out waiting for {what}"
        self.problems.append(msg)
        return AssertionError(msg)

    def gate(self, ev: threading.Event, what: str) -> None:
        if not ev.wait(TIMEOUT):
            raise self._timeout(what)

    async def agate(self, ev: threading.Event, what: str) -> None:
        if not await asyncio.to_thread(ev.wait, TIMEOUT):
            raise self._timeout(what)

    def until(self, cond: Callable[[], bool], what: str) -> None:
        end = time.monotonic() + TIMEOUT
        while not cond():
            if time.monotonic() > end:
                raise self._timeout(what)
            time.sleep(0.001)

    async def auntil(self, cond: Callable[[], bool], what: str) -> None:
        end = time.monotonic() + TIMEOUT
        while not cond():
            if time.monotonic() > end:
                raise self._timeout(what)
            await asyncio.sleep(0.001)


def build(probe: Probe, *, a_kind: str, b_kind: str, order: str, b_retry: bool) -> ExecutableGraph:
    g = Graph(f"seed-{a_kind}-{b_kind}-{order}-{'retry' if b_retry else 'noretry'}", state=SeedState)
    b_failed_types = ("node.retry",) if b_retry else ("node.fail",)
    policy = RetryPolicy(max_attempts=2, initial_interval=0.01) if b_retry else None

    def b_failure_recorded(run_id: str) -> Callable[[], bool]:
        return lambda: probe.recorded(run_id, "b", b_failed_types)

    # ---- A: a counted effect; pauses at `order` until B's failure is recorded

    def pause(run_id: str) -> None:
        probe.a_at_point.set()
        probe.gate(probe.b_raising, "B to raise")
        probe.until(b_failure_recorded(run_id), "B's failure to be recorded")

    async def apause(run_id: str) -> None:
        probe.a_at_point.set()
        await probe.agate(probe.b_raising, "B to raise")
        await probe.auntil(b_failure_recorded(run_id), "B's failure to be recorded")

    if a_kind == "async":
        async def a(state: SeedState, ctx: Any) -> dict:
            probe.bump("a")
            if order == "before_effect":
                await apause(ctx.run_id)

            async def charge(info: Any) -> str:
                receipt = probe.charge(info.key)
                if order == "in_effect":
                    await apause(ctx.run_id)
                return receipt

            receipt = await ctx.effect("charge", charge, request={"amount": 10})
            if order == "after_effect":
                await apause(ctx.run_id)
            probe.a_returning.set()
            return {"a": "A", "receipt": receipt}
    else:
        def a(state: SeedState, ctx: Any) -> dict:
            probe.bump("a")
            if order == "before_effect":
                pause(ctx.run_id)

            def charge(info: Any) -> str:
                receipt = probe.charge(info.key)
                if order == "in_effect":
                    pause(ctx.run_id)
                return receipt

            receipt = ctx.effect("charge", charge, request={"amount": 10})
            if order == "after_effect":
                pause(ctx.run_id)
            probe.a_returning.set()
            return {"a": "A", "receipt": receipt}

    # ---- B: fails once (after A reached its point), succeeds afterwards

    def a_success_recorded(run_id: str) -> Callable[[], bool]:
        return lambda: probe.recorded(run_id, "a", ("node.succeed",))

    if b_kind == "async":
        async def b(state: SeedState, ctx: Any) -> dict:
            if probe.bump("b") == 1:
                if order == "a_first":
                    await probe.agate(probe.a_returning, "A to return")
                    await probe.auntil(a_success_recorded(ctx.run_id), "A's success to be recorded")
                else:
                    await probe.agate(probe.a_at_point, f"A to reach {order}")
                probe.b_raising.set()
                raise TransientError("B fails on its first attempt")
            return {"b": "B"}
    else:
        def b(state: SeedState, ctx: Any) -> dict:
            if probe.bump("b") == 1:
                if order == "a_first":
                    probe.gate(probe.a_returning, "A to return")
                    probe.until(a_success_recorded(ctx.run_id), "A's success to be recorded")
                else:
                    probe.gate(probe.a_at_point, f"A to reach {order}")
                probe.b_raising.set()
                raise TransientError("B fails on its first attempt")
            return {"b": "B"}

    g.add_node("a", a)
    g.add_node("b", b, retry=policy)
    return g.compile()


@pytest.fixture(params=["memory", "sqlite"])
def seed_rt(request: pytest.FixtureRequest, tmp_path: Path):
    store = MemoryStore() if request.param == "memory" else SqlStore(f"sqlite:///{tmp_path / 'seed.db'}")
    runtime = Runtime(store=store)
    yield runtime
    runtime.close()


def _a_effects(rt: Runtime, run_ids: list[str]) -> list:
    return effect_entries(rt.store.journal(run_ids), "a", "charge")


async def assert_ordering(rt: Runtime, run_id: str, order: str, b_failed: str) -> None:
    """The trace shows that the forced ordering really happened."""
    events = await rt.events(run_id)

    def seq(type_: str, node: str) -> int:
        found = [e.seq for e in events if e.type == type_ and e.node == node]
        assert found, f"no {type_} event for {node}"
        return found[0]

    b_fail = seq(b_failed, "b")
    started, done, a_ok = seq("effect.started", "a"), seq("effect.succeeded", "a"), seq("node.succeed", "a")
    assert started < done < a_ok
    where = {"a_first": a_ok < b_fail,
             "before_effect": b_fail < started,
             "in_effect": started < b_fail < done,
             "after_effect": done < b_fail < a_ok}[order]
    assert where, f"ordering {order} did not happen: {[(e.seq, e.type, e.node) for e in events]}"


@pytest.mark.parametrize("a_kind,b_kind", KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("order", ORDERS)
async def test_sibling_failure_then_continuation_never_repeats_the_effect(
        seed_rt: Runtime, a_kind: str, b_kind: str, order: str) -> None:
    rt = seed_rt
    probe = Probe(rt)
    graph = build(probe, a_kind=a_kind, b_kind=b_kind, order=order, b_retry=False)

    failed = await asyncio.wait_for(rt.start(graph, {}), TIMEOUT * 2)

    assert probe.problems == []
    assert failed.status == RunStatus.FAILED, failed.error
    assert failed.kind == RunKind.MAIN
    assert failed.error is not None and failed.error.get("node") == "b"
    assert failed.error.get("class") == "transient"
    assert (probe.a_calls, len(probe.effect_keys), probe.b_calls) == (1, 1, 1)
    # A's success was recorded in the failed run, B's failure too
    head = (await rt.history(failed.id))[-1]
    assert head.node_states == {"a": NodeStatus.SUCCEEDED, "b": NodeStatus.FAILED}
    assert head.snapshot is not None
    assert (await rt.state_at(head.id)).model_dump() == {"a": "A", "b": None, "receipt": "receipt-1"}
    assert statuses(_a_effects(rt, [failed.id])) == [EffectStatus.STARTED, EffectStatus.SUCCEEDED]
    await assert_ordering(rt, failed.id, order, "node.fail")

    cont = await asyncio.wait_for(rt.resume(failed.id), TIMEOUT * 2)

    assert probe.problems == []
    assert cont.id != failed.id
    assert cont.kind == RunKind.CONTINUATION
    assert cont.parent_run_id == failed.id
    assert cont.thread_id == failed.thread_id
    assert cont.base_checkpoint_id == head.id
    assert cont.status == RunStatus.SUCCEEDED, cont.error
    # the effect happened exactly once, A never ran again, B ran a second time
    assert len(probe.effect_keys) == 1
    assert probe.a_calls == 1
    assert probe.b_calls == 2
    # the failed run is terminal and links to its continuation
    again = await rt.get_run(failed.id)
    assert again.status == RunStatus.FAILED
    assert again.error == failed.error
    assert [r.id for r in rt.store.child_runs(failed.id)] == [cont.id]
    # the continuation inherited A and never started it
    cont_events = await rt.events(cont.id)
    assert cont_events[0].type == "run.created"
    assert cont_events[0].data["inherited"] == {"a": "succeeded"}
    assert not [e for e in cont_events if e.node == "a"]
    assert {a.node for a in await rt.attempts(cont.id)} == {"b"}
    # the journal holds exactly one executed effect, in the failed run; none in the continuation
    lineage = _a_effects(rt, [failed.id, cont.id])
    assert statuses(lineage) == [EffectStatus.STARTED, EffectStatus.SUCCEEDED]
    assert {e.run_id for e in lineage} == {failed.id}
    assert lineage[-1].key == probe.effect_keys[0]
    assert rt.store.journal([cont.id]) == []
    # the final state has both nodes' writes
    cps = await rt.history(cont.id)
    assert cps[-1].node_states == {"a": NodeStatus.SUCCEEDED, "b": NodeStatus.SUCCEEDED}
    assert (await rt.state_at(cps[-1].id)).model_dump() == {"a": "A", "b": "B", "receipt": "receipt-1"}
    # trace and checkpoints agree in both runs
    await assert_trace_consistent(rt, graph, failed.id)
    await assert_trace_consistent(rt, graph, cont.id)


@pytest.mark.parametrize("a_kind,b_kind", KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("order", ORDERS)
async def test_sibling_retry_in_the_same_run_never_repeats_the_effect(
        seed_rt: Runtime, a_kind: str, b_kind: str, order: str) -> None:
    rt = seed_rt
    probe = Probe(rt)
    graph = build(probe, a_kind=a_kind, b_kind=b_kind, order=order, b_retry=True)

    run = await asyncio.wait_for(rt.start(graph, {}), TIMEOUT * 2)

    assert probe.problems == []
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert (probe.a_calls, len(probe.effect_keys), probe.b_calls) == (1, 1, 2)
    assert rt.store.child_runs(run.id) == []
    await assert_ordering(rt, run.id, order, "node.retry")
    attempts = await rt.attempts(run.id)
    assert [(x.node, x.attempt, x.status) for x in attempts if x.node == "b"] == [
        ("b", 1, NodeStatus.FAILED), ("b", 2, NodeStatus.SUCCEEDED)]
    assert [(x.node, x.attempt, x.status) for x in attempts if x.node == "a"] == [
        ("a", 1, NodeStatus.SUCCEEDED)]
    events = await rt.events(run.id)
    assert [e.attempt for e in events if e.type == "node.start" and e.node == "a"] == [1]
    assert [e.attempt for e in events if e.type == "node.start" and e.node == "b"] == [1, 2]
    effects = _a_effects(rt, [run.id])
    assert statuses(effects) == [EffectStatus.STARTED, EffectStatus.SUCCEEDED]
    assert effects[-1].key == probe.effect_keys[0]
    cps = await rt.history(run.id)
    assert cps[-1].node_states == {"a": NodeStatus.SUCCEEDED, "b": NodeStatus.SUCCEEDED}
    assert (await rt.state_at(cps[-1].id)).model_dump() == {"a": "A", "b": "B", "receipt": "receipt-1"}
    await assert_trace_consistent(rt, graph, run.id)
