"""An imported thread's effects happened in the store it was exported from.

Resuming or continuing its runs here serves what they recorded and asks before any
effect they did not record (``effects="mock"``, the default); ``effects="live"`` lets
them call the outside world again. Nothing here undoes effects that happened there.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from runtime import EffectsMode, Graph, MemoryStore, NodeContext, Runtime
from runtime.core.errors import InvalidRequest
from runtime.core.records import EffectStatus, InterruptKind, InterruptStatus, Run
from runtime.core.states import RunStatus
from runtime.store.base import CheckpointStore


class Order(BaseModel):
    n: int = 0
    approved: bool = False


#: what ``undo_charge`` undid (compensations are looked up by name: module level)
UNDONE: list[str] = []


def undo_charge(info: Any) -> None:
    UNDONE.append(info.name)


def shop(calls: list[str]) -> Any:
    """charge, then ask for approval, then ship: the two effects count their calls."""
    g = Graph("imported-shop", state=Order)

    @g.node()
    async def charge(s: Order, ctx: NodeContext) -> dict:
        await ctx.effect("charge", lambda: calls.append("charge") or "receipt-1", request={"n": s.n},
                         compensate=undo_charge)
        return {"n": s.n + 1}

    @g.node(after=["charge"])
    async def approve(s: Order, ctx: NodeContext) -> dict:
        return {"approved": bool(await ctx.interrupt({"question": "ship it?"}))}

    @g.node(after=["approve"])
    async def ship(s: Order, ctx: NodeContext) -> dict:
        if s.approved:
            await ctx.effect("ship", lambda: calls.append("ship") or "parcel-1", request={"n": s.n},
                             compensate=undo_charge)
        return {}

    return g.compile()


@pytest.fixture
def calls() -> list[str]:
    """The shop's effect calls, in every store and Runtime of a test."""
    return []


@pytest.fixture
def here(other_store: CheckpointStore, calls: list[str]) -> Iterator[Runtime]:
    """The Runtime a thread is imported into: another, empty store, with the shop's code."""
    rt = Runtime(other_store, graphs=[shop(calls)])
    yield rt
    rt.close()


async def paused_elsewhere(store: CheckpointStore, calls: list[str]) -> tuple[Run, dict]:
    """A run that charged and paused for approval in ``store``, and its exported thread."""
    graph = shop(calls)
    there = Runtime(store, graphs=[graph])
    run = await there.start(graph, {"n": 1})
    assert run.status == RunStatus.INTERRUPTED and calls == ["charge"]
    return run, await there.export_thread(run.id)


async def cancelled_elsewhere(store: CheckpointStore, calls: list[str]) -> tuple[Run, dict]:
    """The run of ``paused_elsewhere``, cancelled there (it charged), and its exported thread."""
    run, _ = await paused_elsewhere(store, calls)
    there = Runtime(store, graphs=[shop(calls)])
    cancelled = await there.cancel(run.id, "changed my mind")
    assert cancelled.status == RunStatus.CANCELLED
    return run, await there.export_thread(run.id)


async def test_resuming_an_imported_run_asks_before_an_effect_it_never_recorded(
        store: CheckpointStore, here: Runtime, calls: list[str]) -> None:
    run, doc = await paused_elsewhere(store, calls)
    [imported] = await here.import_thread(doc)
    assert imported.effects_mode == EffectsMode.MOCK and imported.effects_elsewhere
    assert imported.options["imported"]["effects"] == "mock"
    assert isinstance(imported.options["imported"]["at"], float)
    paused = await here.resume(run.id, True)
    # the charge is served from the run's own journal; the shipment was never made there
    assert paused.status == RunStatus.INTERRUPTED and calls == ["charge"]
    question = next(i for i in here.store.interrupts(run.id) if i.status == InterruptStatus.PENDING)
    assert question.kind == InterruptKind.UNRECORDED and question.payload["value"]["effect"] == "ship"
    done = await here.resume(run.id, {"action": "mock", "result": "parcel-test"})
    assert done.status == RunStatus.SUCCEEDED and calls == ["charge"]
    shipped = [e for e in here.store.journal([run.id]) if e.name == "ship"]
    assert [(e.status, e.result) for e in shipped] == [(EffectStatus.MOCKED, "parcel-test")]


async def test_an_import_with_live_effects_goes_on_as_the_original_would(
        store: CheckpointStore, here: Runtime, calls: list[str]) -> None:
    run, doc = await paused_elsewhere(store, calls)
    [imported] = await here.import_thread(doc, effects="live")
    assert imported.effects_mode == EffectsMode.LIVE and not imported.effects_elsewhere
    assert imported.options["imported"]["effects"] == "live"
    done = await here.resume(run.id, True)
    assert done.status == RunStatus.SUCCEEDED and calls == ["charge", "ship"]   # the charge still once


async def test_a_failed_imported_run_continues_with_its_effects_mocked(
        store: CheckpointStore, here: Runtime, calls: list[str]) -> None:
    run, doc = await cancelled_elsewhere(store, calls)
    await here.import_thread(doc)
    continued = await here.resume(run.id)   # a continuation: it asks for approval again
    assert continued.kind.value == "continuation" and continued.effects_mode == EffectsMode.MOCK
    assert "imported" not in continued.options   # made here: what it does is this store's
    assert continued.status == RunStatus.INTERRUPTED
    asked = await here.resume(continued.id, True)
    assert asked.status == RunStatus.INTERRUPTED and calls == ["charge"]
    assert [i.kind for i in here.store.interrupts(continued.id) if i.status == InterruptStatus.PENDING] \
        == [InterruptKind.UNRECORDED]


async def test_effects_that_happened_elsewhere_are_not_undone_here(
        store: CheckpointStore, here: Runtime, calls: list[str]) -> None:
    UNDONE.clear()
    run, doc = await cancelled_elsewhere(store, calls)
    await here.import_thread(doc)
    journal = here.store.journal([run.id])
    with pytest.raises(InvalidRequest, match=r"imported with its effects mocked.*compensate it there"):
        await here.compensate(run.id)
    assert UNDONE == [] and here.store.journal([run.id]) == journal
    assert here.store.get_run(run.id).lease_owner is None
    # a store that took the thread over (a live import) may undo them
    third = Runtime(MemoryStore(), graphs=[shop(calls)])
    try:
        await third.import_thread(doc, effects="live")
        report = await third.compensate(run.id)
        assert report.complete and UNDONE == ["charge"]
    finally:
        third.close()


@pytest.mark.parametrize("effects", ["mocked", "", None, "LIVE"])
async def test_an_unknown_effects_mode_is_refused_and_nothing_is_imported(
        store: CheckpointStore, here: Runtime, calls: list[str], effects: Any) -> None:
    run, doc = await paused_elsewhere(store, calls)
    with pytest.raises(InvalidRequest, match="effects must be 'mock' or 'live'"):
        await here.import_thread(doc, effects=effects)
    assert here.store.list_runs() == []


async def test_an_imported_run_exports_and_imports_again(
        store: CheckpointStore, here: Runtime, calls: list[str]) -> None:
    """A copy of a copy: the mark travels with it, and the mode it was recorded with stays
    underneath, so a live import runs the main run live again and a mocked fork mocked."""
    run, doc = await paused_elsewhere(store, calls)
    there = Runtime(store, graphs=[shop(calls)])
    cp = store.find_checkpoint(run.id)
    assert cp is not None
    fork = await there.fork(cp.id)   # mocked, as forks are by default
    doc = await there.export_thread(run.id)
    await here.import_thread(doc)
    again = await here.export_thread(run.id)
    assert {r["run"]["options"]["imported"]["effects"] for r in again["runs"]} == {"mock"}
    third = Runtime(MemoryStore(), graphs=[shop(calls)])
    try:
        copies = {r.id: r for r in await third.import_thread(again, effects="live")}
        assert copies[run.id].effects_mode == EffectsMode.LIVE
        assert copies[fork.id].effects_mode == EffectsMode.MOCK
    finally:
        third.close()


async def test_a_malformed_import_mark_is_named_and_nothing_is_imported(
        store: CheckpointStore, here: Runtime, calls: list[str]) -> None:
    run, doc = await paused_elsewhere(store, calls)
    doc["runs"][0]["run"]["options"]["imported"] = {"at": "yesterday", "effects": "mock"}
    with pytest.raises(InvalidRequest, match=r"runs\[0\].run.*options.imported must be an object"):
        await here.import_thread(doc)
    assert here.store.list_runs() == []


async def test_a_continuation_made_here_undoes_its_own_live_effects_and_not_the_imported_ones(
        store: CheckpointStore, here: Runtime, calls: list[str]) -> None:
    """The imported run's charge happened elsewhere; the shipment a person let run live in
    its continuation happened here: compensating the continuation undoes that one only."""
    UNDONE.clear()
    run, doc = await cancelled_elsewhere(store, calls)
    await here.import_thread(doc)
    continued = await here.resume(run.id)
    paused = await here.resume(continued.id, True)   # asks about the shipment: never recorded
    assert paused.status == RunStatus.INTERRUPTED
    done = await here.resume(continued.id, {"action": "live"})
    assert done.status == RunStatus.SUCCEEDED and calls == ["charge", "ship"]
    report = await here.compensate(continued.id)
    assert [s.name for s in report.steps] == ["ship"] and report.complete   # the charge is not this store's
    assert UNDONE == ["ship"]


async def test_a_compensation_policy_leaves_effects_that_happened_elsewhere_alone(
        store: CheckpointStore, here: Runtime, calls: list[str]) -> None:
    """Cancelling an imported run whose policy undoes its effects on a cancel ends it, and
    undoes nothing (they are not this store's to undo)."""
    UNDONE.clear()
    graph = shop(calls)
    there = Runtime(store, graphs=[graph])
    run = await there.start(graph, {"n": 1}, compensate_on=["cancelled", "failed"])
    doc = await there.export_thread(run.id)
    await here.import_thread(doc)
    cancelled = await here.cancel(run.id, "not here")
    assert cancelled.status == RunStatus.CANCELLED and UNDONE == []
