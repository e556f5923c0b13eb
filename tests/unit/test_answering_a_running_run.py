"""Answers to a run that still goes on with what does not wait for them (ADR 0011): the
process driving the run takes them at once, whenever they come (before, while or after its
pause is recorded, while the asking attempt still ends). Answers from another process:
``test_answers_left_in_the_store.py``."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from typing import Annotated

import pytest
from pydantic import BaseModel

from runtime import Graph, MemoryStore, NodeContext, NodeStatus, Runtime, RunStatus, SqlStore, append
from runtime.core.errors import InvalidRequest, NodeInterrupt


class S(BaseModel):
    out: Annotated[list[str], append] = []


class T(BaseModel):
    items: list[int] = []
    turns: int = 0
    out: Annotated[list[str], append] = []


class Go(BaseModel):
    go: bool


def ask_beside_work(gate: asyncio.Event, typed: bool = False) -> Graph:
    """``ask`` asks at once (for a ``Go`` when ``typed``); ``work`` runs until ``gate``
    opens; ``after`` follows ``ask``."""
    g = Graph("ask-beside-work", state=S)

    @g.node()
    async def ask(s: S, ctx: NodeContext) -> dict:
        answer = await ctx.interrupt({"q": "go?"}, Go if typed else None)
        return {"out": [f"ask:{answer.go if typed else answer}"]}

    @g.node(after=["ask"])
    async def after(s: S) -> dict:
        return {"out": ["after"]}

    @g.node()
    async def work(s: S) -> dict:
        await gate.wait()
        return {"out": ["work"]}

    return g


async def asked(rt: Runtime, store: MemoryStore | SqlStore) -> tuple[str, str]:
    """(run id, question id) once the run has asked."""
    while not store.list_runs() or not store.interrupts(store.list_runs()[0].id):
        await asyncio.sleep(0.001)
    run = store.list_runs()[0]
    return run.id, store.interrupts(run.id)[0].id


async def test_a_question_answered_while_its_run_goes_on_is_taken_at_once() -> None:
    """The process driving the run takes the answer: the answered node and what follows it
    run while the other branch still works, and the run never pauses."""
    gate = asyncio.Event()
    rt = Runtime(MemoryStore())
    started = asyncio.create_task(rt.start(ask_beside_work(gate).compile(), {}))
    run_id, question = await asked(rt, rt.store)
    with pytest.raises(InvalidRequest, match="running: new limits are given when it has paused"):
        await rt.resume(run_id, "yes", max_steps=50)
    with pytest.raises(InvalidRequest, match=f"no pending interrupt int_nope; pending: {question}"):
        await rt.resume(run_id, answers={"int_nope": "yes"})
    answering = asyncio.create_task(rt.resume(run_id, "yes", answered_by="ada"))
    while rt.store.find_checkpoint(run_id).node_states.get("after") != NodeStatus.SUCCEEDED:
        await asyncio.sleep(0.001)   # ask and after went on while work still waits
    assert not answering.done() and rt.store.get_run(run_id).status == RunStatus.RUNNING
    gate.set()
    done = await answering
    assert done.status == RunStatus.SUCCEEDED and (await started).status == RunStatus.SUCCEEDED
    assert sorted((await rt.thread_state(done.thread_id)).out) == ["after", "ask:yes", "work"]
    events = [(e.type, e.node) for e in rt.store.events(run_id)]
    assert ("run.interrupt", None) not in events and ("run.resume", None) not in events   # it never paused
    answered = next(e for e in rt.store.events(run_id) if e.type == "interrupt.answered")
    assert answered.data == {"interrupt_id": question, "by": "ada"}
    assert [e.seq for e in rt.store.events(run_id)] == list(range(1, len(events) + 1))


async def test_an_answer_racing_the_pause_is_taken_once_whichever_comes_first() -> None:
    """Answered just before, while or just after the run pauses: taken by the running run or
    by resuming the paused one, once, and the run ends the same."""
    rng = random.Random(7)
    for _ in range(40):
        gate = asyncio.Event()
        rt = Runtime(MemoryStore())
        started = asyncio.create_task(rt.start(ask_beside_work(gate).compile(), {}))
        run_id, question = await asked(rt, rt.store)
        asyncio.get_running_loop().call_later(rng.random() * 0.002, gate.set)
        await asyncio.sleep(rng.random() * 0.003)
        done = await rt.resume(run_id, "yes")
        await started
        assert done.status == RunStatus.SUCCEEDED, done.error
        assert sorted((await rt.thread_state(done.thread_id)).out) == ["after", "ask:yes", "work"]
        assert [e.data["interrupt_id"] for e in rt.store.events(run_id) if e.type == "interrupt.answered"] == [question]
        seqs = [e.seq for e in rt.store.events(run_id)]
        assert seqs == list(range(1, len(seqs) + 1))


async def test_an_answer_given_while_the_run_records_its_pause_waits_for_it_then_resumes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The run has decided to pause and is recording it: the answer is not slipped into a
    pause half written; it waits for the pause, then resumes the run as answers to a paused
    run do."""
    from runtime.engine import loop as loop_module

    pausing = asyncio.Event()
    recorded = loop_module.commit_end

    async def slow_end(rec):
        pausing.set()
        await asyncio.sleep(0.05)
        await recorded(rec)

    monkeypatch.setattr(loop_module, "commit_end", slow_end)
    gate = asyncio.Event()
    gate.set()   # work ends at once: the run pauses for the question
    rt = Runtime(MemoryStore())
    started = asyncio.create_task(rt.start(ask_beside_work(gate).compile(), {}))
    await pausing.wait()
    [run] = rt.store.list_runs()
    run_id = run.id
    assert run.status == RunStatus.RUNNING   # the pause is not recorded yet
    done = await rt.resume(run_id, "yes")
    [question] = [i.id for i in rt.store.interrupts(run_id)]
    assert (await started).status == RunStatus.INTERRUPTED and done.status == RunStatus.SUCCEEDED
    events = [e.type for e in rt.store.events(run_id)]
    assert events.count("run.interrupt") == 1 and events.count("run.resume") == 1
    assert [e.data["interrupt_id"] for e in rt.store.events(run_id) if e.type == "interrupt.answered"] == [question]


async def test_an_answer_given_while_the_asking_attempt_still_ends_is_taken_when_it_ends() -> None:
    """The question is known before the attempt that asked it is recorded (a sync node in its
    thread, here holding on after asking): the answer is kept, and the node goes on as soon as
    its attempt is recorded, instead of the run pausing on a question already answered."""
    asked_it, release = threading.Event(), threading.Event()
    g = Graph("asks-then-lingers", state=S)

    @g.node()
    def ask(s: S, ctx: NodeContext) -> dict:
        try:
            return {"out": [f"ask:{ctx.interrupt({'q': 'go?'})}"]}
        except NodeInterrupt:
            asked_it.set()
            release.wait(5)   # the attempt ends a while after asking
            raise

    rt = Runtime(MemoryStore())
    started = asyncio.create_task(rt.start(g.compile(), {}))
    await asyncio.to_thread(asked_it.wait, 5)
    [run] = rt.store.list_runs()
    answering = asyncio.create_task(rt.resume(run.id, "yes"))
    await asyncio.sleep(0.05)
    release.set()
    done = await answering
    assert done.status == RunStatus.SUCCEEDED and (await started).status == RunStatus.SUCCEEDED
    assert (await rt.thread_state(run.thread_id)).out == ["ask:yes"]
    events = [(e.type, e.node) for e in rt.store.events(run.id)]
    assert ("run.interrupt", None) not in events
    assert events.index(("interrupt.answered", "ask")) < events.index(("node.interrupt", "ask")) \
        < events.index(("node.resume", "ask"))


async def test_map_items_and_a_loop_iteration_answered_while_the_run_goes_on() -> None:
    """Questions asked by map items and by a loop's later iteration, answered together while
    another branch still works: each instance goes on, none is asked twice, nothing pauses."""
    gate = asyncio.Event()
    g2 = Graph("instances-ask", state=T)
    g2.add_node("plan", lambda s: {"items": [0, 1, 2, 3]})

    async def work(s: T, ctx: NodeContext, item: int) -> dict:
        if item % 2 == 0:
            return {"out": [f"{item}:{await ctx.interrupt({'item': item})}"]}
        return {"out": [str(item)]}

    async def step(s: T, ctx: NodeContext) -> dict:
        if s.turns == 1:
            return {"turns": s.turns + 1, "out": [f"turn:{await ctx.interrupt({'turn': 1})}"]}
        return {"turns": s.turns + 1}

    async def slow(s: T) -> dict:
        await gate.wait()
        return {"out": ["slow"]}

    g2.add_node("work", work, after=["plan"], map_over="items")
    g2.add_node("step", step, after=["again"], max_iterations=5)
    g2.add_node("again", lambda s: None, after=["step"], when=lambda s: s.turns < 3)
    g2.add_node("slow", slow)
    rt = Runtime(MemoryStore())
    started = asyncio.create_task(rt.start(g2.compile(), {}))
    deadline = time.monotonic() + 10
    while not rt.store.list_runs() or len(rt.store.interrupts(rt.store.list_runs()[0].id)) < 3:
        assert time.monotonic() < deadline, "the three questions were never recorded"
        await asyncio.sleep(0.005)
    run_id = rt.store.list_runs()[0].id
    asked = {i.node: i.id for i in rt.store.interrupts(run_id)}
    assert set(asked) == {"work[0]", "work[2]", "step#1"}
    answering = asyncio.create_task(rt.resume(run_id, answers={q: f"ok-{node}" for node, q in asked.items()}))
    while rt.store.find_checkpoint(run_id).node_states.get("step#2") is None:
        assert time.monotonic() < deadline, "the loop did not go on"
        await asyncio.sleep(0.005)
    assert rt.store.get_run(run_id).status == RunStatus.RUNNING and not answering.done()
    gate.set()
    done = await answering
    assert done.status == RunStatus.SUCCEEDED and (await started).status == RunStatus.SUCCEEDED
    state = await rt.thread_state(done.thread_id)
    assert sorted(state.out) == sorted(["0:ok-work[0]", "1", "2:ok-work[2]", "3", "turn:ok-step#1", "slow"])
    assert len(rt.store.interrupts(run_id)) == 3   # none asked twice
    assert all(e.type != "run.interrupt" for e in rt.store.events(run_id))

