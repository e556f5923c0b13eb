"""Compensation on a debugger whose runs are driven by worker processes (``harness serve
--workers``), or asked for through the API (``"queue": true``): the undo functions run in a
worker, never in the server — a Compensate press and a cancel whose policy compensates
it leave an ask in the store; the run's page says so until a worker has made it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from local_client import TestClient
from pydantic import BaseModel

from runtime import EffectInfo, Graph, NodeContext, Runtime, RunStatus, SqlStore
from runtime.core.records import EffectStatus
from server.web import create_app

from test_branches_for_workers import csrf

UNDONE: list[str] = []


def release(info: EffectInfo) -> None:
    UNDONE.append(str(info.result))


class Trip(BaseModel):
    booking: str = ""
    approved: bool = False


def trip() -> Graph:
    g = Graph("workers_trip", state=Trip)

    @g.node()
    async def book(state: Trip, ctx: NodeContext) -> dict[str, Any]:
        return {"booking": await ctx.effect("hotel", lambda: "hotel-7", compensate=release)}

    @g.node(after=["book"])
    def approve(state: Trip, ctx: NodeContext) -> dict[str, Any]:
        return {"approved": bool(ctx.interrupt({"question": "keep it?"}))}

    return g


class Setup:
    """A trip paused for approval in a SQLite file, and the debugger's Runtime over it."""

    def __init__(self, tmp_path: Path, **options: Any) -> None:
        UNDONE.clear()
        self.url, self.graph = f"sqlite:///{tmp_path / 'c.db'}", trip()

        async def record() -> str:
            rt = Runtime(store=SqlStore(self.url))
            try:
                return (await rt.start(self.graph, {}, **options)).id
            finally:
                rt.close()
        self.run_id = asyncio.run(record())
        self.server = Runtime(store=SqlStore(self.url), graphs=[self.graph])

    def worker(self) -> None:
        """What a worker does with the asks: make each compensation, then forget the ask."""
        async def go() -> None:
            rt = Runtime(store=SqlStore(self.url), graphs=[self.graph])
            try:
                for ask in rt.store.compensation_asks():
                    made = await rt.compensate_asked(ask)
                    assert made is not None and made.complete
            finally:
                rt.close()
        asyncio.run(go())


@pytest.fixture
def paused(tmp_path: Path) -> Any:
    s = Setup(tmp_path)
    yield s
    s.server.close()


@pytest.fixture
def with_policy(tmp_path: Path) -> Any:
    s = Setup(tmp_path, compensate_on=["cancelled"])
    yield s
    s.server.close()


def test_compensate_on_a_server_for_workers_is_asked_of_a_worker(paused: Setup) -> None:
    asyncio.run(paused.server.cancel(paused.run_id))
    with TestClient(create_app(paused.server, workers=True)) as client:
        url = f"/runs/{paused.run_id}"
        r = client.post(f"{url}/compensate", data={"_csrf_token": csrf(client, url)})
        assert r.status_code == 200, r.text
        assert "left to a worker" in r.text
        assert UNDONE == [] and not client.app.state.tasks   # nothing undone in the server
        assert 'id="compensation-asked"' in client.get(url).text

        paused.worker()
        assert UNDONE == ["hotel-7"]
        page = client.get(url).text
        assert 'id="compensation-asked"' not in page and 'id="compensated-note"' in page
    assert paused.server.store.journal([paused.run_id])[-1].status == EffectStatus.COMPENSATED


def test_a_cancel_on_a_server_for_workers_leaves_its_policy_to_a_worker(with_policy: Setup) -> None:
    with TestClient(create_app(with_policy.server, workers=True)) as client:
        url = f"/runs/{with_policy.run_id}"
        r = client.post(f"{url}/cancel", data={"_csrf_token": csrf(client, url), "reason": "no trip"})
        assert r.status_code < 400, r.text
        deadline = time.monotonic() + 10
        while with_policy.server.store.get_run(with_policy.run_id).status != RunStatus.CANCELLED:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        while client.app.state.tasks:   # the cancel's own task, ending
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert UNDONE == []
        assert [a.run_id for a in with_policy.server.store.compensation_asks()] == [with_policy.run_id]
    with_policy.worker()
    assert UNDONE == ["hotel-7"]


def test_the_api_asks_a_worker_when_asked_to_queue(paused: Setup) -> None:
    asyncio.run(paused.server.cancel(paused.run_id))
    with TestClient(create_app(paused.server)) as client:
        bad = client.post(f"/api/runs/{paused.run_id}/compensate", json={"queue": "later"})
        assert bad.status_code == 422 and "queue" in bad.json()["error"]
        r = client.post(f"/api/runs/{paused.run_id}/compensate", json={"queue": True, "retry_in_doubt": True})
        assert r.status_code == 202, r.text
        assert r.json() == {"run_id": paused.run_id, "complete": False, "queued": True, "steps": []}
        [ask] = paused.server.store.compensation_asks()
        assert ask.retry_in_doubt and UNDONE == []
        here = client.post(f"/api/runs/{paused.run_id}/compensate", json={})   # not asked to queue: made here
        assert here.status_code == 200 and here.json()["complete"] is True
        assert UNDONE == ["hotel-7"]
