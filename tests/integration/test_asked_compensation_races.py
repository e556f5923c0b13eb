"""Compensations made by more than one process: an undo that outlasts the compensating
process's lease keeps it (renewed), so no other process takes the run over and undoes the
effect again; of two workers that both saw one ask, the second finds it made and undoes
nothing (a failed undo waits to be asked again); two processes asking at once both succeed."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from runtime import EffectInfo, Graph, InvalidRequest, NodeContext, Runtime, RunStatus, SqlStore
from runtime.core.records import EffectStatus

UNDONE: list[str] = []
SLOW_UNDO = {"seconds": 0.0, "fail": False}


async def release(info: EffectInfo) -> None:
    await asyncio.sleep(SLOW_UNDO["seconds"])
    UNDONE.append(str(info.result))
    if SLOW_UNDO["fail"]:
        raise RuntimeError("the hotel's line is busy")


class Trip(BaseModel):
    booking: str = ""


def trip() -> Graph:
    g = Graph("raced_trip", state=Trip)

    @g.node()
    async def book(state: Trip, ctx: NodeContext) -> dict[str, Any]:
        return {"booking": await ctx.effect("hotel", lambda: "hotel-9", compensate=release)}

    @g.node(after=["book"])
    def fail(state: Trip) -> dict[str, Any]:
        raise RuntimeError("no flight")

    return g


@pytest.fixture(params=["sqlite", "postgres"])
def failed_trip(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    UNDONE.clear()
    SLOW_UNDO.update(seconds=0.0, fail=False)
    url = f"sqlite:///{tmp_path / 'race.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")

    async def record() -> str:
        rt = Runtime(store=SqlStore(url))
        try:
            run = await rt.start(trip(), {})
            assert run.status == RunStatus.FAILED
            return run.id
        finally:
            rt.close()
    return url, asyncio.run(record())


def test_an_undo_longer_than_the_lease_keeps_the_run_from_other_processes(failed_trip: tuple[str, str]) -> None:
    url, run_id = failed_trip
    SLOW_UNDO["seconds"] = 2.5   # past the 1 s lease of the process undoing it

    async def go() -> None:
        first = Runtime(store=SqlStore(url), lease_ttl=1.0)
        second = Runtime(store=SqlStore(url), lease_ttl=1.0)
        try:
            undoing = asyncio.create_task(first.compensate(run_id))
            await asyncio.sleep(1.6)
            with pytest.raises(InvalidRequest, match="being compensated by another caller"):
                await second.compensate(run_id, retry_in_doubt=True)
            assert (await undoing).complete
        finally:
            first.close()
            second.close()
    asyncio.run(go())
    assert UNDONE == ["hotel-9"]


def test_of_two_workers_that_saw_one_ask_the_second_finds_it_made(failed_trip: tuple[str, str]) -> None:
    url, run_id = failed_trip
    SLOW_UNDO["fail"] = True   # a failed undo waits to be asked again: no worker retries it on its own

    async def go() -> None:
        asking, one, other = (Runtime(store=SqlStore(url)) for _ in range(3))
        try:
            assert (await asking.compensate(run_id, queue=True)).queued
            [ask] = one.store.compensation_asks()
            [seen] = other.store.compensation_asks()   # listed before the first made it
            made = await one.compensate_asked(ask)
            assert made is not None and [s.status.value for s in made.steps] == ["failed"]
            assert await other.compensate_asked(seen) is None
            assert one.store.compensation_asks() == []
            statuses = [e.status for e in one.store.journal([run_id])]
            assert statuses.count(EffectStatus.COMPENSATION_FAILED) == 1
        finally:
            for rt in (asking, one, other):
                rt.close()
    asyncio.run(go())
    assert UNDONE == ["hotel-9"]


def test_an_ask_made_again_while_a_worker_makes_it_stays(failed_trip: tuple[str, str]) -> None:
    url, run_id = failed_trip
    SLOW_UNDO.update(seconds=0.5, fail=True)

    async def go() -> None:
        worker, person = Runtime(store=SqlStore(url)), Runtime(store=SqlStore(url))
        try:
            await person.compensate(run_id, queue=True)
            [ask] = worker.store.compensation_asks()
            making = asyncio.create_task(worker.compensate_asked(ask))
            await asyncio.sleep(0.2)
            await person.compensate(run_id, queue=True)   # the undo failed before: asked again
            await making
            [again] = worker.store.compensation_asks()
            assert again.at > ask.at
        finally:
            worker.close()
            person.close()
    asyncio.run(go())


def test_two_processes_asking_at_once_both_succeed(failed_trip: tuple[str, str]) -> None:
    url, run_id = failed_trip
    stores = [SqlStore(url) for _ in range(4)]
    errors: list[BaseException] = []

    def ask(store: SqlStore, base: float) -> None:
        try:
            for i in range(25):
                store.ask_compensation(run_id, False, base + i)
        except BaseException as e:   # noqa: BLE001 (collected, then asserted)
            errors.append(e)
    threads = [threading.Thread(target=ask, args=(s, 1000.0 * n)) for n, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        assert len(stores[0].compensation_asks()) == 1
    finally:
        for s in stores:
            s.close()
