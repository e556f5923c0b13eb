"""A question a run asks while it still runs other branches is shown at once and can be
answered at once (ADR 0011): the run goes on with it, whether this server drives the run or
another process does (the answer is sent to it through the store)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path
from typing import Any

from local_client import TestClient

from runtime import Graph, Runtime, RunStatus, SqlStore
from runtime.core.records import InterruptStatus
from server.web import create_app

from test_pages import csrf


def ask_beside(gate: threading.Event) -> Graph:
    g = Graph("ask-beside")

    @g.node()
    async def ask(state: Any, ctx: Any) -> dict[str, Any]:
        return {"a": await ctx.interrupt({"q": "go?"})}

    return with_work(g, gate)


def with_work(g: Graph, gate: threading.Event, after: tuple[str, ...] = ()) -> Graph:
    """``g`` with a node ``work`` (after ``after``) that runs until ``gate`` is set."""
    async def work(state: Any) -> dict[str, Any]:
        while not gate.is_set():
            await asyncio.sleep(0.01)
        return {"b": 1}

    g.add_node("work", work, after=list(after))
    return g


def test_an_answer_to_a_run_another_process_drives_is_sent_to_it(tmp_path: Path) -> None:
    """The page says another process drives the run; the answer is sent to it through the
    store and shown as sent until it is taken, a second one is refused (409), and the process
    takes the first, here as it would pause (its heartbeat is too long to poll meanwhile)."""
    url = f"sqlite:///{tmp_path / 'h.db'}"
    gate = threading.Event()
    graph = ask_beside(gate).compile()
    driver, viewer = Runtime(store=SqlStore(url), heartbeat=30.0), Runtime(store=SqlStore(url))
    ended: list[Any] = []
    thread = threading.Thread(target=lambda: ended.append(asyncio.run(driver.start(graph, {}))))
    thread.start()
    logged: list[logging.LogRecord] = []
    watch = logging.Handler(logging.WARNING)
    watch.emit = logged.append   # type: ignore[method-assign]
    logging.getLogger("server.web.actions").addHandler(watch)
    try:
        deadline = time.monotonic() + 10
        while not (viewer.store.list_runs() and viewer.store.interrupts(viewer.store.list_runs()[0].id)):
            assert time.monotonic() < deadline, "the question was never recorded"
            time.sleep(0.01)
        run = viewer.store.list_runs()[0]
        [question] = viewer.store.interrupts(run.id)
        with TestClient(create_app(viewer)) as client:
            page = client.get(f"/interrupts/{question.id}")
            assert page.status_code == 200 and 'id="still-running"' in page.text
            assert "answer-form" in page.text and "Send the answer" in page.text
            token = csrf(client, f"/interrupts/{question.id}")
            r = client.post(f"/interrupts/{question.id}/answer", data={"_csrf_token": token, "f.answer": '"yes"'},
                            follow_redirects=False)
            assert r.status_code == 303 and r.headers["location"] == f"/interrupts/{question.id}"
            page = client.get(f"/interrupts/{question.id}").text   # where the answer says it was sent
            assert 'id="sent"' in page and "answer-form" not in page and "yes" in page
            api = client.post(f"/api/interrupts/{question.id}/answer", json={"answer": "no"})
            assert api.status_code == 409 and "already answered" in api.json()["error"]
            api = client.post(f"/api/runs/{run.id}/resume", json={"answers": {question.id: "no"}})
            assert api.status_code == 409 and "already answered" in api.json()["error"]
            assert viewer.store.interrupt(question.id).status == InterruptStatus.PENDING
            assert not logged   # a refusal is the reply, not news for the log
            gate.set()
            thread.join(10)
            assert ended and ended[0].status == RunStatus.SUCCEEDED
            assert viewer.store.interrupt(question.id).answer == "yes"
            page = client.get(f"/interrupts/{question.id}").text
            assert 'id="sent"' not in page and 'id="still-running"' not in page
    finally:
        logging.getLogger("server.web.actions").removeHandler(watch)
        gate.set()
        thread.join(10)
        driver.close()
        viewer.close()


def asks_twice(gate: threading.Event) -> Graph:
    """``first`` asks; then ``ask`` asks again while ``work`` runs until ``gate`` is set."""
    g = Graph("asks-twice")

    @g.node()
    async def first(state: Any, ctx: Any) -> dict[str, Any]:
        return {"f": await ctx.interrupt({"q": "start?"})}

    @g.node(after=["first"])
    async def ask(state: Any, ctx: Any) -> dict[str, Any]:
        return {"a": await ctx.interrupt({"q": "go?"})}

    return with_work(g, gate, after=("first",))


def test_a_run_this_server_drives_takes_an_answer_while_it_goes_on(tmp_path: Path) -> None:
    gate = threading.Event()
    graph = asks_twice(gate).compile()
    rt = Runtime(store=SqlStore(f"sqlite:///{tmp_path / 'h.db'}"), graphs=[graph])
    try:
        run = asyncio.run(rt.start(graph, {}))
        [first] = rt.store.interrupts(run.id)
        with TestClient(create_app(rt)) as client:
            assert client.post(f"/api/interrupts/{first.id}/answer", json={"answer": True}).status_code == 202
            deadline = time.monotonic() + 10   # the server drives the run on: ask asks, work runs
            while len(rt.store.interrupts(run.id)) < 2:
                assert time.monotonic() < deadline, "the second question was never recorded"
                time.sleep(0.01)
            second = next(i for i in rt.store.interrupts(run.id) if i.id != first.id)
            assert rt.store.get_run(run.id).status == RunStatus.RUNNING
            assert 'id="still-running"' not in client.get(f"/interrupts/{second.id}").text
            r = client.post(f"/api/interrupts/{second.id}/answer", json={"answer": "go"})
            assert r.status_code == 202, r.text
            while rt.store.interrupt(second.id).status != InterruptStatus.ANSWERED:
                assert time.monotonic() < deadline, "the answer was not taken"
                time.sleep(0.01)
            assert rt.store.get_run(run.id).status == RunStatus.RUNNING   # work still goes on
            gate.set()
            while rt.store.get_run(run.id).status == RunStatus.RUNNING:
                assert time.monotonic() < deadline, "the run did not end"
                time.sleep(0.01)
        assert rt.store.get_run(run.id).status == RunStatus.SUCCEEDED
        events = [e.type for e in rt.store.events(run.id)]
        assert events.count("run.interrupt") == 1   # the first question only: the second never paused it
    finally:
        gate.set()
        rt.close()


def test_a_question_answered_before_its_run_was_cancelled_says_how_the_run_ended(tmp_path: Path) -> None:
    gate = threading.Event()
    graph = ask_beside(gate).compile()
    rt = Runtime(store=SqlStore(f"sqlite:///{tmp_path / 'h.db'}"), graphs=[graph])

    async def answered_then_cancelled() -> str:
        started = asyncio.create_task(rt.start(graph, {}))
        while not (rt.store.list_runs() and rt.store.interrupts(rt.store.list_runs()[0].id)):
            await asyncio.sleep(0.01)
        run = rt.store.list_runs()[0]
        [question] = rt.store.interrupts(run.id)
        answering = asyncio.create_task(rt.resume(run.id, "yes"))
        while rt.store.interrupt(question.id).status != InterruptStatus.ANSWERED:
            await asyncio.sleep(0.01)
        await rt.cancel(run.id, "enough")
        assert (await answering).status == RunStatus.CANCELLED
        assert (await started).status == RunStatus.CANCELLED
        return question.id

    try:
        question = asyncio.run(asyncio.wait_for(answered_then_cancelled(), 10))
        with TestClient(create_app(rt)) as client:
            page = client.get(f"/interrupts/{question}").text
            assert "the run then ended cancelled; a continuation of it is given the answer" in page
            assert "the run went on from it" not in page
    finally:
        gate.set()
        rt.close()
