"""Forks and replays on a debugger whose runs are driven by worker processes (``harness serve
--workers``), or asked for through the API (``"queue": true``): the branch is created QUEUED
and nothing of it runs in the server; the page the person lands on shows it queued and
follows it as a worker (another Runtime over the same store, as another process would be)
drives it, with the effects mode and mocks it was given."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from local_client import TestClient
from pydantic import BaseModel

from runtime import EffectInfo, Graph, InterruptKind, NodeContext, Runtime, RunStatus, SqlStore
from server.web import create_app

from test_live import parse


class Order(BaseModel):
    amount: int = 10
    receipt: str = ""


def checkout(calls: list[int]) -> Graph:
    g = Graph("worker_checkout", state=Order)

    @g.node()
    def price(state: Order) -> dict[str, Any]:
        return {"amount": state.amount}

    @g.node(after=["price"])
    async def pay(state: Order, ctx: NodeContext) -> dict[str, Any]:
        def charge(info: EffectInfo) -> str:
            calls.append(state.amount)
            return f"receipt-{state.amount}"
        return {"receipt": await ctx.effect("charge", charge, request={"amount": state.amount})}

    return g


class Setup:
    """A recorded checkout run in a SQLite file, and the debugger's Runtime over it."""

    def __init__(self, tmp_path: Path) -> None:
        self.url, self.calls = f"sqlite:///{tmp_path / 'w.db'}", []
        self.graph = checkout(self.calls)

        async def record() -> str:
            rt = Runtime(store=SqlStore(self.url))
            try:
                return (await rt.start(self.graph, {"amount": 10})).id
            finally:
                rt.close()

        self.run_id = asyncio.run(record())
        assert self.calls == [10]
        self.server = Runtime(store=SqlStore(self.url), graphs=[self.graph])
        self.cp = next(c.id for c in self.server.store.checkpoints(self.run_id) if "price" in c.nodes)

    def worker(self, run_id: str) -> RunStatus:
        """What a worker does with a queued run: claim it and drive it."""
        async def go() -> RunStatus:
            rt = Runtime(store=SqlStore(self.url), graphs=[self.graph])
            try:
                return (await rt.resume(run_id)).status
            finally:
                rt.close()
        return asyncio.run(go())


@pytest.fixture
def setup(tmp_path: Path) -> Any:
    s = Setup(tmp_path)
    yield s
    s.server.close()


def csrf(client: TestClient[Any], url: str) -> str:
    found = re.search(r'name="_csrf_token" value="([^"]+)"', client.get(url).text)
    assert found
    return found.group(1)


def left_to_workers(setup: Setup, client: TestClient[Any], run_id: str) -> None:
    """The branch waits QUEUED, without a lease, and nothing of it ran or runs in the server."""
    run = setup.server.store.get_run(run_id)
    assert run.status == RunStatus.QUEUED and run.lease_owner is None
    assert setup.server.store.node_attempts(run_id) == [] and setup.calls == [10]
    assert not client.app.state.tasks   # no task drives anything in the server


def test_a_fork_on_a_server_for_workers_is_queued_and_its_page_follows_the_worker(setup: Setup) -> None:
    with TestClient(create_app(setup.server, workers=True)) as client:
        url = f"/checkpoints/{setup.cp}/fork"
        form = client.get(url).text
        assert "the fork waits QUEUED for one" in form
        r = client.post(url, data={"_csrf_token": csrf(client, url), "action": "create", "effects": "mock",
                                   "patch": '{"amount": 7}', "mocks": '{"charge": "mocked-7"}'},
                        follow_redirects=False)
        assert r.status_code == 303, r.text
        fork_id = r.headers["location"].removeprefix("/runs/")
        left_to_workers(setup, client, fork_id)

        page = client.get(f"/runs/{fork_id}").text
        assert 'id="queued-note"' in page and f'sse-connect="/runs/{fork_id}/live"' in page
        driving = threading.Thread(target=lambda: (time.sleep(0.3), setup.worker(fork_id)))
        driving.start()
        live = client.get(f"/runs/{fork_id}/live", timeout=30)   # until the run ends
        driving.join(30)
        messages = parse(live.text)
        assert any(e == "event" and "run.claim" in d for e, d in messages)
        assert messages[-1] == ("end", "succeeded")
        assert not client.app.state.tasks
    [served] = setup.server.store.journal([fork_id])
    assert served.source == "mocks" and served.result == "mocked-7"
    assert setup.calls == [10]   # the worker served the mock: no effect was called for real


def test_a_queued_mocked_fork_pauses_in_the_worker_instead_of_calling_an_unrecorded_effect(setup: Setup) -> None:
    with TestClient(create_app(setup.server, workers=True)) as client:
        r = client.post(f"/api/checkpoints/{setup.cp}/fork", json={"patch": {"amount": 99}})
        assert r.status_code == 202, r.text
        fork_id = r.json()["run_id"]
        left_to_workers(setup, client, fork_id)
    assert setup.worker(fork_id) == RunStatus.INTERRUPTED
    [question] = setup.server.store.interrupts(fork_id)
    assert question.kind == InterruptKind.UNRECORDED and setup.calls == [10]


def test_a_replay_on_a_server_for_workers_is_queued_and_its_report_follows_the_worker(setup: Setup) -> None:
    with TestClient(create_app(setup.server, workers=True)) as client:
        url = f"/runs/{setup.run_id}/replay"
        assert "the replay waits QUEUED for one" in client.get(url).text
        r = client.post(url, data={"_csrf_token": csrf(client, url)}, follow_redirects=False)
        assert r.status_code == 303, r.text
        report_url = r.headers["location"]
        replay_id = report_url.removeprefix("/runs/").removesuffix("/report")
        left_to_workers(setup, client, replay_id)
        queued = client.get(report_url).text
        assert "waiting for a worker to take it" in queued and 'hx-trigger="every 1s"' in queued

        assert setup.worker(replay_id) == RunStatus.SUCCEEDED
        done = client.get(report_url).text
        assert "Every node did what the recording did." in done and 'hx-trigger="every 1s"' not in done
        assert not client.app.state.tasks
    assert setup.calls == [10]



def test_a_replay_from_a_checkpoint_on_a_server_for_workers_is_queued_from_that_checkpoint(setup: Setup) -> None:
    with TestClient(create_app(setup.server, workers=True)) as client:
        url = f"/checkpoints/{setup.cp}/replay"
        assert "the replay waits QUEUED for one" in client.get(url).text
        r = client.post(url, data={"_csrf_token": csrf(client, url)}, follow_redirects=False)
        assert r.status_code == 303, r.text
        replay_id = r.headers["location"].removeprefix("/runs/").removesuffix("/report")
        left_to_workers(setup, client, replay_id)
        assert setup.server.store.get_run(replay_id).base_checkpoint_id == setup.cp

        assert setup.worker(replay_id) == RunStatus.SUCCEEDED
        assert "Every node did what the recording did." in client.get(r.headers["location"]).text
        assert not client.app.state.tasks
    assert setup.calls == [10]

def test_the_api_queues_a_fork_or_a_replay_when_asked(setup: Setup) -> None:
    with TestClient(create_app(setup.server)) as client:
        fork = client.post(f"/api/checkpoints/{setup.cp}/fork", json={"queue": True, "max_steps": 5})
        assert fork.status_code == 202, fork.text
        fork_id = fork.json()["run_id"]
        left_to_workers(setup, client, fork_id)
        assert setup.server.store.get_run(fork_id).limits["max_steps"] == 5
        replay = client.post(f"/api/runs/{setup.run_id}/replay", json={"queue": True})
        assert replay.status_code == 202, replay.text
        replay_id = replay.json()["run_id"]
        left_to_workers(setup, client, replay_id)
        assert client.get(f"/api/runs/{replay_id}/report").json()["status"] == "queued"

        for path in (f"/api/checkpoints/{setup.cp}/fork", f"/api/runs/{setup.run_id}/replay"):
            bad = client.post(path, json={"queue": "soon"})
            assert bad.status_code == 422 and "queue" in bad.json()["error"]
        assert len(setup.server.store.list_runs()) == 3   # the refusals created nothing

        paths = client.get("/schema/openapi.json").json()["paths"]
        for path in ("/api/checkpoints/{checkpoint_id}/fork", "/api/runs/{run_id}/replay"):
            body = paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]
            assert "QUEUED for one" in body["properties"]["queue"]["description"]
    assert setup.worker(fork_id) == RunStatus.SUCCEEDED and setup.worker(replay_id) == RunStatus.SUCCEEDED
    assert setup.calls == [10]
