"""A sync effect's thread cannot be stopped: when its attempt stops waiting for it (the
node's timeout, the run's deadline), the thread goes on, and the outcome it ends with is
recorded then. A retry or a continuation is served that outcome instead of asking a person
whether the effect happened (or running it again after a failure it knows of)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from pydantic import BaseModel

from runtime import Graph, InterruptKind, MemoryStore, RetryPolicy, Runtime, RunStatus, SqlStore
from runtime.core.records import EffectStatus

#: the effect's call outlasts the node's timeout, and ends before the retry
TIMEOUT, CALL, BACKOFF = 0.2, 0.4, 0.8


class S(BaseModel):
    receipt: str = ""


def charging(calls: list[int], fail_first: bool = False, retry: RetryPolicy | None = None) -> Graph:
    """``pay`` charges through a sync effect that takes longer than the node may."""
    g = Graph("late-charge", state=S)

    def charge() -> str:
        calls.append(1)
        if len(calls) == 1:   # the first call outlasts its attempt; a second is quick
            time.sleep(CALL)
        if fail_first and len(calls) == 1:
            raise ConnectionError("the payment service hung up")
        return f"receipt-{len(calls)}"

    @g.node(timeout=TIMEOUT, retry=retry or RetryPolicy(max_attempts=2, initial_interval=BACKOFF))
    async def pay(s: S, ctx) -> dict:
        return {"receipt": await ctx.effect("charge", charge, request={"amount": 10})}

    return g


@pytest.fixture(params=["memory", "sqlite"])
def rt(request, tmp_path: Path):
    store = MemoryStore() if request.param == "memory" else SqlStore(f"sqlite:///{tmp_path / 'h.db'}")
    runtime = Runtime(store)
    yield runtime
    runtime.close()


async def test_the_retry_is_served_what_the_timed_out_call_returned(rt: Runtime) -> None:
    calls: list[int] = []
    run = await rt.start(charging(calls), {})
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert calls == [1] and (await rt.thread_state(run.thread_id)).receipt == "receipt-1"
    assert rt.store.interrupts(run.id) == []   # nobody was asked whether it happened
    assert [(e.status, e.attempt) for e in rt.store.journal([run.id])] == \
        [(EffectStatus.STARTED, 1), (EffectStatus.SUCCEEDED, 1)]


async def test_a_failure_the_timed_out_call_ended_with_lets_the_retry_call_again(rt: Runtime) -> None:
    calls: list[int] = []
    run = await rt.start(charging(calls, fail_first=True), {})
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert len(calls) == 2 and (await rt.thread_state(run.thread_id)).receipt == "receipt-2"
    assert [e.status for e in rt.store.journal([run.id])] == \
        [EffectStatus.STARTED, EffectStatus.FAILED, EffectStatus.STARTED, EffectStatus.SUCCEEDED]


async def test_an_outcome_that_comes_after_the_run_failed_is_served_to_its_continuation(rt: Runtime) -> None:
    calls: list[int] = []
    run = await rt.start(charging(calls, retry=RetryPolicy(max_attempts=1)), {})
    assert run.status == RunStatus.FAILED and run.error["class"] == "deadline"
    deadline = time.monotonic() + 5
    while [e.status for e in rt.store.journal([run.id])] != [EffectStatus.STARTED, EffectStatus.SUCCEEDED]:
        assert time.monotonic() < deadline, "the late outcome was not recorded"
        await _pause()
    assert rt.store.get_run(run.id).status == RunStatus.FAILED   # its end stays as it was
    cont = await rt.resume(run.id)
    assert cont.status == RunStatus.SUCCEEDED and calls == [1]
    assert (await rt.thread_state(run.thread_id)).receipt == "receipt-1"
    assert all(i.kind != InterruptKind.IN_DOUBT for i in rt.store.interrupts(cont.id))


async def test_an_outcome_still_unknown_when_the_retry_comes_is_asked_about(rt: Runtime) -> None:
    """A retry before the thread ends cannot know: it asks, as before; the outcome that comes
    later is recorded all the same."""
    calls: list[int] = []
    release = threading.Event()
    g = Graph("late-charge", state=S)

    @g.node(timeout=TIMEOUT, retry=RetryPolicy(max_attempts=2, initial_interval=0.01))
    async def pay(s: S, ctx) -> dict:
        return {"receipt": await ctx.effect("charge", lambda: calls.append(1) or release.wait(5) and "late")}

    run = await rt.start(g, {})
    assert run.status == RunStatus.INTERRUPTED
    [question] = rt.store.interrupts(run.id)
    assert question.kind == InterruptKind.IN_DOUBT
    release.set()
    deadline = time.monotonic() + 5
    while EffectStatus.SUCCEEDED not in [e.status for e in rt.store.journal([run.id])]:
        assert time.monotonic() < deadline, "the late outcome was not recorded"
        await _pause()
    done = await rt.resume(run.id, {"action": "retry"})
    assert done.status == RunStatus.SUCCEEDED and calls == [1]   # served what is now known
    assert (await rt.thread_state(run.thread_id)).receipt == "late"


@pytest.mark.parametrize("idempotent", [False, True])
async def test_a_retry_that_comes_while_the_call_still_runs_here_waits_for_it(rt: Runtime, idempotent: bool) -> None:
    """The thread ends within the retry's own time: its outcome is waited for and served —
    nobody is asked, and an idempotent effect is not called a second time beside it."""
    calls: list[int] = []
    g = Graph("late-charge", state=S)

    def charge() -> str:   # outlasts the first attempt (0.5 s), ends early in the second
        calls.append(1)
        time.sleep(0.6 if len(calls) == 1 else 0)
        return f"receipt-{len(calls)}"

    @g.node(timeout=0.5, retry=RetryPolicy(max_attempts=2, initial_interval=0.01))
    async def pay(s: S, ctx) -> dict:
        return {"receipt": await ctx.effect("charge", charge, request={"amount": 10}, idempotent=idempotent)}

    started = time.monotonic()
    run = await rt.start(g, {})
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert calls == [1] and (await rt.thread_state(run.thread_id)).receipt == "receipt-1"
    assert rt.store.interrupts(run.id) == []
    assert time.monotonic() - started < 1.0


async def _pause() -> None:
    await asyncio.sleep(0.02)
