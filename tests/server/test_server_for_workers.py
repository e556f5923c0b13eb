"""A debugger whose runs are driven by worker processes (``harness serve --workers``), or
an API call asking for it (``"queue": true``): an answer leaves the run QUEUED for a worker,
and nothing of it runs in the server; a worker then goes on with it."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from local_client import TestClient
from pydantic import BaseModel

from runtime import Graph, Runtime, RunStatus, SqlStore
from server.web import create_app

from test_answer_together import field, post_all


class Approval(BaseModel):
    approve: bool


def approve_then_work(done: list[str]) -> Graph:
    g = Graph("approve_then_work")

    @g.node()
    async def ask(state: Any, ctx: Any) -> dict[str, Any]:
        return {"approved": (await ctx.interrupt({"question": "go?"}, response=Approval)).approve}

    @g.node(after=["ask"])
    def work(state: Any) -> dict[str, Any]:
        done.append("work")
        return {"worked": True}

    return g


def paused(url: str, graph: Graph) -> str:
    async def go() -> str:
        rt = Runtime(store=SqlStore(url))
        try:
            run = await rt.start(graph, {})
            assert run.status == RunStatus.INTERRUPTED
            return run.id
        finally:
            rt.close()
    return asyncio.run(go())


def worker_goes_on(url: str, graph: Graph, run_id: str) -> RunStatus:
    async def go() -> RunStatus:
        rt = Runtime(store=SqlStore(url), graphs=[graph])
        try:
            return (await rt.resume(run_id)).status
        finally:
            rt.close()
    return asyncio.run(go())


def test_a_server_for_workers_leaves_an_answered_run_queued_for_one(tmp_path: Path) -> None:
    url, done = f"sqlite:///{tmp_path / 'w.db'}", []
    graph = approve_then_work(done)
    run_id = paused(url, graph)
    server = Runtime(store=SqlStore(url), graphs=[graph])
    try:
        with TestClient(create_app(server, workers=True)) as client:
            [question] = server.store.interrupts(run_id)
            answered = post_all(client, run_id, {field(question, "approve"): "true"})
            assert answered.status_code in (302, 303), answered.text
            run = server.store.get_run(run_id)
            assert run.status == RunStatus.QUEUED and run.lease_owner is None
            assert done == [] and not client.app.state.tasks   # nothing driven in the server
            # its export is refused until a worker has driven it: the link leads to the reason
            # (a link marked ``download`` would have the browser drop the answer, saying nothing)
            page = client.get(f"/runs/{run_id}").text
            link = re.search(r'<a[^>]*id="export"[^>]*>', page)
            assert link is not None and "download" not in link.group(0)
            refused = client.get(f"/runs/{run_id}/export")
            assert refused.status_code == 409 and refused.headers["content-type"].startswith("text/html")
            assert "queued" in refused.text, refused.text
    finally:
        server.close()
    assert worker_goes_on(url, graph, run_id) == RunStatus.SUCCEEDED and done == ["work"]


def test_an_api_answer_can_ask_to_leave_the_run_to_a_worker(tmp_path: Path) -> None:
    url, done = f"sqlite:///{tmp_path / 'a.db'}", []
    graph = approve_then_work(done)
    run_id = paused(url, graph)
    server = Runtime(store=SqlStore(url), graphs=[graph])
    try:
        with TestClient(create_app(server)) as client:
            [question] = server.store.interrupts(run_id)
            r = client.post(f"/api/runs/{run_id}/resume",
                            json={"answers": {question.id: {"approve": True}}, "queue": True})
            assert r.status_code == 202 and r.json() == {"run_id": run_id}
            assert server.store.get_run(run_id).status == RunStatus.QUEUED and done == []
            again = client.post(f"/api/runs/{run_id}/resume",
                                json={"answers": {question.id: {"approve": False}}, "queue": True})
            assert again.status_code in (409, 422), again.text
            bad = client.post(f"/api/runs/{run_id}/resume", json={"queue": "soon"})
            assert bad.status_code == 422 and "queue" in bad.json()["error"]
    finally:
        server.close()
    assert worker_goes_on(url, graph, run_id) == RunStatus.SUCCEEDED and done == ["work"]
