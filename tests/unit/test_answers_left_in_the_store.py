"""Answers to a run another process drives while it still runs other branches (ADR 0011):
they are checked, left in the store, and taken by the process driving the run within a
heartbeat, or as it would pause; the caller gets the run once it next pauses or ends.

Two Runtimes on one SQLite file are two processes here: each has its own owner, and
neither knows the other's loops (``tests/integration/test_answer_from_another_process.py``
does the same with a real second process)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated

import pytest
from pydantic import BaseModel

from runtime import Graph, NodeContext, NodeStatus, Runtime, RunStatus, SqlStore, append
from runtime.core.errors import InvalidAnswer, InvalidRequest
from runtime.engine.takeover import TakeOver
from server.present import load_run_view
from test_answering_a_running_run import ask_beside_work


@pytest.fixture
def two(tmp_path: Path) -> Iterator[tuple[Runtime, Runtime]]:
    """(the Runtime that drives runs, another one on the same database): heartbeats short
    enough that a left answer is taken within a test's patience."""
    url = f"sqlite:///{tmp_path / 'h.db'}"
    driver, other = Runtime(SqlStore(url), heartbeat=0.05), Runtime(SqlStore(url), heartbeat=0.05)
    yield driver, other
    driver.close()
    other.close()


async def until(holds: Callable[[], object], what: str, patience: float = 10.0) -> None:
    """Wait until ``holds()`` is true; fail naming ``what`` after ``patience`` seconds."""
    deadline = time.monotonic() + patience
    while not holds():
        assert time.monotonic() < deadline, f"{what} did not happen"
        await asyncio.sleep(0.005)


async def asked(store: SqlStore) -> tuple[str, str]:
    """(run id, question id) once the run has asked."""
    await until(lambda: store.list_runs() and store.interrupts(store.list_runs()[0].id), "the question")
    run = store.list_runs()[0]
    return run.id, store.interrupts(run.id)[0].id


async def settled(store: SqlStore, run_id: str, node: str) -> None:
    await until(lambda: (cp := store.find_checkpoint(run_id)) is not None
                and cp.node_states.get(node) == NodeStatus.SUCCEEDED, f"{node} succeeding")


async def test_an_answer_from_another_process_is_taken_while_the_run_goes_on(two) -> None:
    """The answered node and what follows it run while the other branch still works; the run
    never pauses, and the answer is recorded once, with who gave it."""
    driver, other = two
    gate = asyncio.Event()
    graph = ask_beside_work(gate).compile()
    started = asyncio.create_task(driver.start(graph, {}))
    run_id, question = await asked(other.store)
    answering = asyncio.create_task(other.resume(run_id, "yes", answered_by="ada"))
    await settled(other.store, run_id, "after")
    assert not answering.done() and other.store.get_run(run_id).status == RunStatus.RUNNING
    assert other.store.sent_answers(run_id) == {}   # taken: recorded, no longer left
    gate.set()
    done = await asyncio.wait_for(answering, 5)
    assert done.status == RunStatus.SUCCEEDED and (await started).status == RunStatus.SUCCEEDED
    assert sorted((await other.thread_state(done.thread_id)).out) == ["after", "ask:yes", "work"]
    events = other.store.events(run_id)
    assert "run.interrupt" not in [e.type for e in events]   # it never paused
    assert [e.data for e in events if e.type == "interrupt.answered"] == [{"interrupt_id": question, "by": "ada"}]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_an_answer_left_as_the_run_would_pause_is_taken_instead_of_pausing(tmp_path: Path) -> None:
    """With a heartbeat too long to poll in time, the run finds the answer as it would pause."""
    url = f"sqlite:///{tmp_path / 'h.db'}"
    driver, other = Runtime(SqlStore(url), heartbeat=30.0), Runtime(SqlStore(url))
    try:
        gate = asyncio.Event()
        started = asyncio.create_task(driver.start(ask_beside_work(gate).compile(), {}))
        run_id, question = await asked(other.store)
        answering = asyncio.create_task(other.resume(run_id, "yes"))
        await until(lambda: other.store.sent_answers(run_id), "the answer left")
        assert other.store.interrupt(question).status.value == "pending"   # not polled yet
        view = await load_run_view(other, run_id)   # what `harness show` prints
        assert '  answer sent: "yes" (the process driving the run takes it within a heartbeat)' in view.lines()
        assert view.to_json()["sent"][question]["answer"] == "yes"
        gate.set()
        done = await asyncio.wait_for(answering, 5)
        assert done.status == RunStatus.SUCCEEDED and (await started).status == RunStatus.SUCCEEDED
        assert "run.interrupt" not in [e.type for e in other.store.events(run_id)]
    finally:
        driver.close()
        other.close()


async def test_an_answer_the_run_paused_without_taking_is_given_by_its_sender(two, monkeypatch) -> None:
    """The run paused before it took the answer (its process never read it): the caller that
    left it answers the paused run, which goes on and ends."""
    driver, other = two
    real = TakeOver.take_sent
    monkeypatch.setattr(TakeOver, "take_sent",
                        lambda self: False if self.env.owner == driver.env.owner else real(self))
    gate = asyncio.Event()
    graph = ask_beside_work(gate).compile()
    driver.graphs.register(graph)
    other.graphs.register(graph)
    started = asyncio.create_task(driver.start(graph, {}))
    run_id, _ = await asked(other.store)
    answering = asyncio.create_task(other.resume(run_id, "yes"))
    await until(lambda: other.store.sent_answers(run_id), "the answer left")
    gate.set()
    assert (await asyncio.wait_for(started, 10)).status == RunStatus.INTERRUPTED
    done = await asyncio.wait_for(answering, 5)
    assert done.status == RunStatus.SUCCEEDED
    assert sorted((await other.thread_state(done.thread_id)).out) == ["after", "ask:yes", "work"]


async def test_a_bad_or_second_answer_is_refused_before_anything_is_left(two) -> None:
    """Checked before it is left: an answer that does not fit, one to an unknown question, or
    new limits, change nothing; a second answer to the same question is refused as already
    answered, and the first one is the one taken."""
    driver, other = two
    gate = asyncio.Event()
    graph = ask_beside_work(gate, typed=True).compile()
    other.graphs.register(graph)
    started = asyncio.create_task(driver.start(graph, {}))
    run_id, question = await asked(other.store)
    with pytest.raises(InvalidAnswer, match=f"answer to interrupt {question} is invalid"):
        await other.resume(run_id, {"go": "perhaps"})
    with pytest.raises(InvalidAnswer, match=f"no pending interrupt int_nope; pending: {question}"):
        await other.resume(run_id, answers={"int_nope": {"go": True}})
    with pytest.raises(InvalidRequest, match="running: new limits are given when it has paused or ended"):
        await other.resume(run_id, {"go": True}, max_steps=5)
    assert other.store.sent_answers(run_id) == {}
    assert other.store.interrupt(question).status.value == "pending"
    first = asyncio.create_task(other.resume(run_id, {"go": False}, answered_by="ada"))
    await until(lambda: other.store.sent_answers(run_id), "the answer left")
    with pytest.raises(InvalidAnswer, match="already answered"):
        await other.resume(run_id, {"go": True}, answered_by="bob")
    gate.set()
    assert (await asyncio.wait_for(first, 5)).status == RunStatus.SUCCEEDED
    await asyncio.wait_for(started, 10)
    assert other.store.interrupt(question).answer == {"go": False}
    assert "ask:False" in (await other.thread_state(run_id)).out


async def test_two_callers_answering_two_questions_are_both_taken(two) -> None:
    """Two map items ask; two other callers answer one each while the run still works: both
    answers are taken, whichever comes first, and both calls return the ended run."""
    driver, other = two

    class M(BaseModel):
        items: list[int] = []
        out: Annotated[list[str], append] = []

    gate = asyncio.Event()
    g = Graph("left-answers-map", state=M)

    @g.node()
    def plan(s: M) -> dict:
        return {"items": [0, 1]}

    @g.node(after=["plan"], map_over="items")
    async def item(s: M, ctx: NodeContext, item: int) -> dict:
        return {"out": [f"{item}:{await ctx.interrupt({'item': item})}"]}

    @g.node()
    async def work(s: M) -> dict:
        await gate.wait()
        return {"out": ["work"]}

    graph = g.compile()
    started = asyncio.create_task(driver.start(graph, {}))
    await until(lambda: other.store.list_runs() and len(other.store.interrupts(other.store.list_runs()[0].id)) == 2,
                "two questions")
    run_id = other.store.list_runs()[0].id
    q0, q1 = (i.id for i in other.store.interrupts(run_id))
    third = Runtime(SqlStore(other.store.url), heartbeat=0.05)
    try:
        answering = [asyncio.create_task(other.resume(run_id, answers={q0: "a"})),
                     asyncio.create_task(third.resume(run_id, answers={q1: "b"}))]
        await until(lambda: all(i.status.value == "answered" for i in other.store.interrupts(run_id)),
                    "both answers taken")
        gate.set()
        for task in answering:
            assert (await asyncio.wait_for(task, 5)).status == RunStatus.SUCCEEDED
        assert (await asyncio.wait_for(started, 10)).status == RunStatus.SUCCEEDED
        assert sorted((await other.thread_state(run_id)).out) == ["0:a", "1:b", "work"]
    finally:
        third.close()


async def test_an_answer_left_for_a_process_that_froze_is_given_by_recovering_the_run(tmp_path: Path) -> None:
    """The driving process stops answering (its event loop held, as by SIGSTOP) after the
    question was asked; the answer left for it waits until its lease expires, then the caller
    recovers the run, which takes the answer and ends: the caller gets the ended run."""
    url = f"sqlite:///{tmp_path / 'h.db'}"
    frozen = threading.Event()

    class F(BaseModel):
        out: Annotated[list[str], append] = []

    g = Graph("frozen-driver", state=F)

    @g.node()
    async def ask(s: F, ctx: NodeContext) -> dict:
        return {"out": [f"ask:{await ctx.interrupt({'q': 'go?'})}"]}

    @g.node()
    async def work(s: F) -> dict:
        if not frozen.is_set():   # only in the first process: it holds its loop, as if stopped
            frozen.set()
            await asyncio.sleep(0.3)   # the question is committed first
            time.sleep(3)
        return {"out": ["work"]}

    graph = g.compile()
    driver = Runtime(SqlStore(url), lease_ttl=1.0)
    other = Runtime(SqlStore(url), graphs=[graph], lease_ttl=1.0)
    ended: list[object] = []

    def drive() -> None:
        try:
            ended.append(asyncio.run(driver.start(graph, {})))
        except Exception as e:   # it wakes up to find the run taken over
            ended.append(e)

    thread = threading.Thread(target=drive)
    thread.start()
    try:
        run_id, question = await asked(other.store)
        done = await asyncio.wait_for(other.resume(run_id, "yes", answered_by="ada"), 20)
        assert done.status == RunStatus.SUCCEEDED and done.id == run_id
        assert sorted((await other.thread_state(run_id)).out) == ["ask:yes", "work"]
        assert other.store.interrupt(question).answer == "yes"
    finally:
        await asyncio.to_thread(thread.join, 10)
        driver.close()
        other.close()
