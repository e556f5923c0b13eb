"""An export is of stopped runs (the import refuses a running one): exporting a thread
while one of its runs is running is refused at once, naming the run, rather than
writing a document no store would take."""

from __future__ import annotations

import asyncio

import pytest
from runtime import InvalidRequest, MemoryStore, RunStatus, Runtime
from runtime.store.base import CheckpointStore

from test_takeover_without_code import gated


async def test_a_thread_with_a_running_run_is_not_exported_until_it_stops(store: CheckpointStore) -> None:
    rt = Runtime(store=store)
    g, started, go = gated("slow_export")
    task = asyncio.create_task(rt.start(g, {}, thread_id="busy"))
    await asyncio.wait_for(started.wait(), 10)
    run_id = (await rt.runs(thread_id="busy"))[0].id

    with pytest.raises(InvalidRequest, match=f"run {run_id} of thread busy is running"):
        await rt.export_thread(run_id)

    go.set()
    assert (await asyncio.wait_for(task, 10)).status == RunStatus.SUCCEEDED
    other = Runtime(store=MemoryStore(), graphs=[g])
    imported = await other.import_thread(await rt.export_thread(run_id))
    assert [r.status for r in imported] == [RunStatus.SUCCEEDED]
    other.close()
    rt.close()
