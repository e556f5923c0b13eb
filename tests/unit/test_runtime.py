"""Runtime behaviour a user relies on, on every store: failure vs cancel, retries by
error class, deadlines, limits, interrupts, in-doubt effects, continuations."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Annotated

import pytest
from pydantic import BaseModel

from runtime import (
    ErrorClass,
    Graph,
    InvalidAnswer,
    InvalidRequest,
    NodeStatus,
    PermissionDeniedError,
    RetryPolicy,
    RunKind,
    RunStatus,
    Runtime,
    TransientError,
    append,
)
from runtime import EffectStatus, InterruptKind, InterruptStatus
from runtime.core.errors import InvalidInputError
from runtime.engine import effects

FAST = dict(initial_interval=0.001, backoff=1.0)


class S(BaseModel):
    log: Annotated[list[str], append] = []
    value: str = ""
    n: int = 0


async def final_state(rt: Runtime, run_id: str) -> S:
    return await rt.state_at((await rt.history(run_id))[-1].id)  # type: ignore[return-value]


async def node_status(rt: Runtime, run_id: str, node: str) -> NodeStatus:
    return (await rt.history(run_id))[-1].node_states[node]


# --------------------------------------------------------------------------- failure vs cancel

async def test_failure_is_classified_and_not_retried_for_invalid_input(rt: Runtime):
    g = Graph("g", state=S)
    calls = []

    @g.node(retry=RetryPolicy(max_attempts=3, **FAST))
    def bad(state):
        calls.append(1)
        raise ValueError("order id must be positive")

    run = await rt.start(g, {})
    assert run.status == RunStatus.FAILED
    assert run.error["class"] == ErrorClass.INVALID_INPUT
    assert "order id must be positive" in run.error["message"] and run.error["node"] == "bad"
    assert len(calls) == 1
    attempt = (await rt.attempts(run.id))[0]
    assert attempt.error_class == "invalid_input" and attempt.decision.startswith("fail: invalid_input")


async def test_cancel_ends_cancelled_with_reason_and_nothing_retries(rt: Runtime):
    g = Graph("g", state=S)
    started = asyncio.Event()
    attempts = []

    @g.node(retry=RetryPolicy(max_attempts=5, **FAST))
    async def slow(state):
        attempts.append(1)
        started.set()
        await asyncio.sleep(30)

    task = asyncio.create_task(rt.start(g, {}))
    await started.wait()
    run_id = (await rt.runs())[0].id
    cancelled = await rt.cancel(run_id, "operator stopped it")
    assert cancelled.status == RunStatus.CANCELLED
    assert cancelled.error == {"class": "cancelled", "message": "operator stopped it"}
    assert (await task).status == RunStatus.CANCELLED
    assert attempts == [1]
    assert await node_status(rt, run_id, "slow") == NodeStatus.CANCELLED
    assert (await rt.attempts(run_id))[0].error_class == "cancelled"


@pytest.mark.parametrize("outcome, deadline, node", [("result", None, "async"), ("error", None, "async"),
                                                    ("result", 60.0, "async"), ("result", None, "def"),
                                                    ("error", None, "def")])
async def test_a_cancel_during_a_sync_effect_waits_for_it_and_records_its_outcome(rt: Runtime, outcome: str,
                                                                                   deadline: float | None, node: str):
    """A sync effect's thread cannot be stopped (nor a ``def`` node's, which calls it). A
    cancel waits for it (a moment), so its outcome is journaled before the run's end: a
    continuation resumed at once is served the result (or may try the failed call again)
    instead of being asked whether the effect happened. With a deadline too."""
    g = Graph("g", state=S)
    started, release, calls = threading.Event(), threading.Event(), []

    def charge() -> str:
        calls.append(1)
        started.set()
        release.wait(10)
        if outcome == "error" and len(calls) == 1:
            raise ConnectionError("card declined")
        return "rcpt-1"

    async def pay_async(state, ctx):
        return {"value": await ctx.effect("charge", charge)}

    def pay_def(state, ctx):
        return {"value": ctx.effect("charge", charge)}

    g.add_node("pay", pay_async if node == "async" else pay_def)
    task = asyncio.create_task(rt.start(g, {}, deadline=deadline))
    await asyncio.to_thread(started.wait, 10)
    run_id = (await rt.runs())[0].id
    asyncio.get_running_loop().call_later(0.2, release.set)   # the effect is still running when the cancel comes
    cancelled = await rt.cancel(run_id, "operator stopped it")
    assert cancelled.status == RunStatus.CANCELLED and (await task).status == RunStatus.CANCELLED
    assert await node_status(rt, run_id, "pay") == NodeStatus.CANCELLED
    [started_entry, ended] = rt.store.journal([run_id])
    assert started_entry.status == EffectStatus.STARTED
    assert ended.status == (EffectStatus.SUCCEEDED if outcome == "result" else EffectStatus.FAILED)
    types = [str(e.type) for e in await rt.events(run_id)]
    assert types[-1] == "run.cancel" and ("effect.succeeded" if outcome == "result" else "effect.failed") in types

    cont = await rt.resume(run_id)
    assert cont.status == RunStatus.SUCCEEDED and await rt.interrupts(cont.id) == []
    assert (await final_state(rt, cont.id)).value == "rcpt-1"
    assert len(calls) == (1 if outcome == "result" else 2)   # served, or the failed call tried again


async def test_a_cancel_waits_for_a_def_nodes_effect_even_while_its_thread_is_descheduled(
        rt: Runtime, monkeypatch: pytest.MonkeyPatch):
    """A ``def`` node's thread hands its effect to the event loop, which starts it at once; the
    thread may then lose the processor for a while. A cancel that comes meanwhile still waits
    for the effect's outcome and journals it."""
    g = Graph("g", state=S)
    started, release = threading.Event(), threading.Event()
    hand_over = asyncio.run_coroutine_threadsafe

    def descheduled(coro, loop):
        future = hand_over(coro, loop)
        time.sleep(0.4)   # the effect starts, and the cancel comes, before this thread goes on
        return future

    def charge() -> str:
        started.set()
        release.wait(10)
        return "rcpt-1"

    def pay(state, ctx):
        return {"value": ctx.effect("charge", charge)}

    g.add_node("pay", pay)
    monkeypatch.setattr(asyncio, "run_coroutine_threadsafe", descheduled)
    task = asyncio.create_task(rt.start(g, {}))
    await asyncio.to_thread(started.wait, 10)
    run_id = (await rt.runs())[0].id
    asyncio.get_running_loop().call_later(0.1, release.set)
    assert (await rt.cancel(run_id, "operator stopped it")).status == RunStatus.CANCELLED
    assert (await task).status == RunStatus.CANCELLED
    assert [e.status for e in rt.store.journal([run_id])] == [EffectStatus.STARTED, EffectStatus.SUCCEEDED]


async def test_a_cancel_gives_up_on_a_sync_effect_that_hangs_and_leaves_it_in_doubt(rt: Runtime,
                                                                                    monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(effects, "CANCEL_GRACE", 0.2)
    g = Graph("g", state=S)
    started, release = threading.Event(), threading.Event()

    def hang() -> str:
        started.set()
        release.wait(10)
        return "late"

    @g.node()
    async def pay(state, ctx):
        return {"value": await ctx.effect("charge", hang)}

    task = asyncio.create_task(rt.start(g, {}))
    await asyncio.to_thread(started.wait, 10)
    run_id = (await rt.runs())[0].id
    t0 = time.monotonic()
    assert (await rt.cancel(run_id, "stop")).status == RunStatus.CANCELLED
    assert time.monotonic() - t0 < 5 and (await task).status == RunStatus.CANCELLED
    release.set()
    assert [e.status for e in rt.store.journal([run_id])] == [EffectStatus.STARTED]   # its outcome is unknown
    cont = await rt.resume(run_id)
    [doubt] = await rt.interrupts(cont.id)
    assert cont.status == RunStatus.INTERRUPTED and doubt.kind == InterruptKind.IN_DOUBT


async def test_a_def_node_can_see_its_run_being_cancelled_and_stop(rt: Runtime):
    g = Graph("g", state=S)
    started, seen = threading.Event(), []

    @g.node()
    def long(state, ctx):
        started.set()
        for _ in range(1000):
            if ctx.cancelling():
                seen.append(True)
                return {}
            time.sleep(0.01)
        return {}

    task = asyncio.create_task(rt.start(g, {}))
    await asyncio.to_thread(started.wait, 10)
    assert (await rt.cancel((await rt.runs())[0].id, "stop")).status == RunStatus.CANCELLED
    assert (await task).status == RunStatus.CANCELLED
    for _ in range(200):   # the thread notices within its next poll
        if seen:
            break
        await asyncio.sleep(0.01)
    assert seen == [True]


async def test_an_effect_a_sync_node_finishes_after_its_run_was_cancelled_is_journaled_off_the_trace(
        rt: Runtime, monkeypatch: pytest.MonkeyPatch):
    """A ``def`` node's effect that outlasts the cancel's wait: the run ends at the cancel,
    and the effect that thread finishes later is journaled without an event after the
    run's end; a continuation is served it."""
    monkeypatch.setattr(effects, "CANCEL_GRACE", 0.2)
    g = Graph("g", state=S)
    started, release, finished, calls = threading.Event(), threading.Event(), threading.Event(), []

    def charge() -> str:
        calls.append(1)
        started.set()
        release.wait(10)
        return "rcpt-9"

    @g.node()
    def pay(state, ctx):
        try:
            return {"value": ctx.effect("charge", charge)}
        finally:
            finished.set()

    task = asyncio.create_task(rt.start(g, {}))
    await asyncio.to_thread(started.wait, 10)
    run_id = (await rt.runs())[0].id
    assert (await rt.cancel(run_id, "stop")).status == RunStatus.CANCELLED
    assert (await task).status == RunStatus.CANCELLED
    events = await rt.events(run_id)
    release.set()
    await asyncio.to_thread(finished.wait, 10)
    await asyncio.sleep(0.05)
    assert await rt.events(run_id) == events and events[-1].type == "run.cancel"   # nothing after the end
    assert [e.status for e in rt.store.journal([run_id])] == [EffectStatus.STARTED, EffectStatus.SUCCEEDED]
    cont = await rt.resume(run_id)
    assert cont.status == RunStatus.SUCCEEDED and (await final_state(rt, cont.id)).value == "rcpt-9"
    assert len(calls) == 1


async def test_an_effect_asked_for_after_the_run_ended_is_neither_run_nor_served(rt: Runtime):
    """A node that leaves a task behind: its effect call, once the run has ended, is refused
    (live or mocked), and nothing is journaled for the ended run."""
    g = Graph("g", state=S)
    stray: list[asyncio.Task[object]] = []
    calls: list[int] = []

    async def later(ctx) -> object:
        await asyncio.sleep(0.1)
        return await ctx.effect("charge", lambda: calls.append(1) or "paid")

    @g.node()
    async def pay(state, ctx):
        stray.append(asyncio.create_task(later(ctx)))
        return {"value": "left a task behind"}

    run = await rt.start(g, {})
    fork = await rt.fork((await rt.history(run.id))[0].id, mocks={"charge": "mocked"})
    for r in (run, fork):
        assert r.status == RunStatus.SUCCEEDED
    for task in stray:   # refused as the node's attempt ended: the run's end changes nothing to that
        with pytest.raises(InvalidInputError, match="node 'pay' \\(attempt 1\\) was used after that attempt ended"):
            await task
    assert calls == [] and rt.store.journal([run.id]) == [] and rt.store.journal([fork.id]) == []


async def test_a_nodes_own_timeout_around_a_sync_effect_does_not_wait_for_its_thread(rt: Runtime):
    g = Graph("g", state=S)
    release = threading.Event()

    @g.node()
    async def pay(state, ctx):
        try:
            await asyncio.wait_for(ctx.effect("charge", lambda: release.wait(10)), 0.2)
        except TimeoutError:
            return {"value": "gave up"}
        return {"value": "done"}

    t0 = time.monotonic()
    run = await rt.start(g, {})
    release.set()
    assert time.monotonic() - t0 < 5
    assert run.status == RunStatus.SUCCEEDED and (await final_state(rt, run.id)).value == "gave up"


async def test_terminal_runs_cannot_be_cancelled_or_resumed(rt: Runtime):
    g = Graph("g", state=S)
    g.add_node("a", lambda s: None)
    run = await rt.start(g, {})
    with pytest.raises(InvalidRequest, match="already succeeded"):
        await rt.cancel(run.id)
    with pytest.raises(InvalidRequest, match="already succeeded"):
        await rt.resume(run.id)
    assert (await rt.get_run(run.id)).status == RunStatus.SUCCEEDED


async def test_cancelling_a_paused_run_closes_its_interrupts(rt: Runtime):
    g = Graph("g", state=S)

    @g.node()
    async def ask(state, ctx):
        await ctx.interrupt({"q": "go?"})

    run = await rt.start(g, {})
    assert run.status == RunStatus.INTERRUPTED
    run = await rt.cancel(run.id, "no longer needed")
    assert run.status == RunStatus.CANCELLED
    assert [i.status for i in await rt.interrupts(run.id, pending=False)] == [InterruptStatus.CANCELLED]
    assert await node_status(rt, run.id, "ask") == NodeStatus.CANCELLED


# --------------------------------------------------------------------------- retries by class

async def test_transient_errors_retry_with_backoff_until_max_attempts(rt: Runtime):
    g = Graph("g", state=S)
    seen = []

    @g.node(retry=RetryPolicy(max_attempts=3, initial_interval=0.01, backoff=2.0))
    async def flaky(state, ctx):
        seen.append((ctx.attempt, time.monotonic()))
        raise TransientError("503 from upstream")

    run = await rt.start(g, {})
    assert run.status == RunStatus.FAILED and run.error["class"] == "transient"
    assert [a for a, _ in seen] == [1, 2, 3]
    assert seen[2][1] - seen[1][1] >= 0.019  # second backoff is twice the first
    decisions = [a.decision for a in await rt.attempts(run.id)]
    assert decisions[0].startswith("retry in 0.01s") and decisions[1].startswith("retry in 0.02s")
    assert decisions[2] == "fail: 3 failure(s), max_attempts=3"


async def test_transient_error_recovers_on_retry(rt: Runtime):
    g = Graph("g", state=S)

    @g.node(retry=RetryPolicy(max_attempts=3, **FAST))
    def flaky(state, ctx):
        if ctx.attempt < 3:
            raise ConnectionError("reset by peer")
        return {"value": f"ok on {ctx.attempt}"}

    run = await rt.start(g, {})
    assert run.status == RunStatus.SUCCEEDED
    assert (await final_state(rt, run.id)).value == "ok on 3"


async def test_permission_errors_fail_fast(rt: Runtime):
    g = Graph("g", state=S)
    calls = []

    @g.node(retry=RetryPolicy(max_attempts=3, **FAST))
    def denied(state):
        calls.append(1)
        raise PermissionDeniedError("token lacks refunds:write")

    run = await rt.start(g, {})
    assert run.error["class"] == "permission" and calls == [1]


async def test_retry_on_can_include_other_classes(rt: Runtime):
    g = Graph("g", state=S)
    calls = []

    @g.node(retry=RetryPolicy(max_attempts=2, retry_on=frozenset({ErrorClass.INTERNAL}), **FAST))
    def buggy(state):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("flake")
        return {"n": 1}

    assert (await rt.start(g, {})).status == RunStatus.SUCCEEDED and len(calls) == 2


# --------------------------------------------------------------------------- deadlines and limits

async def test_run_deadline_bounds_node_and_effect_deadlines(rt: Runtime):
    g = Graph("g", state=S)
    seen = {}

    @g.node(timeout=60)
    async def a(state, ctx):
        seen["node"] = (ctx.deadline, ctx.remaining(), time.time())
        seen["effect"] = await ctx.effect("e", lambda info: info.deadline)
        return None

    before = time.time()
    run = await rt.start(g, {}, deadline=5.0)
    after = time.time()   # the deadline is set during the call (creating the run may take a while)
    assert run.status == RunStatus.SUCCEEDED
    deadline, remaining, at = seen["node"]
    assert before + 4.5 < deadline <= after + 5.0  # the run deadline, not the 60 s node timeout
    # what is left of it when the node asked (however long a loaded machine took to get there)
    assert 0 < remaining <= 5.0 and abs(at + remaining - deadline) < 0.5
    assert seen["effect"] == deadline


async def test_node_timeout_sets_the_attempt_deadline_and_retries(rt: Runtime):
    g = Graph("g", state=S)
    remaining = []

    @g.node(timeout=0.05, retry=RetryPolicy(max_attempts=2, **FAST))
    async def slow(state, ctx):
        remaining.append(ctx.remaining())
        await asyncio.sleep(1)

    run = await rt.start(g, {}, deadline=30)
    assert run.status == RunStatus.FAILED and run.error["class"] == "deadline"
    assert len(remaining) == 2 and all(0 < r <= 0.05 for r in remaining)
    assert "passed its deadline (timeout 0.05s)" in run.error["message"]


async def test_run_deadline_ends_the_run_with_its_reason(rt: Runtime):
    g = Graph("g", state=S)

    @g.node(retry=RetryPolicy(max_attempts=5, **FAST))
    async def slow(state):
        await asyncio.sleep(5)

    t0 = time.monotonic()
    run = await rt.start(g, {}, deadline=0.1)
    assert time.monotonic() - t0 < 2
    assert run.status == RunStatus.FAILED and run.error["class"] == "deadline"
    assert len(await rt.attempts(run.id)) == 1  # the run deadline is not retried


async def test_max_steps_ends_a_long_run(rt: Runtime):
    g = Graph("g", state=S)
    g.add_node("a", lambda s: None)
    g.add_node("b", lambda s: None, after=["a"])
    g.add_node("c", lambda s: None, after=["b"])
    run = await rt.start(g, {}, max_steps=2)
    assert run.status == RunStatus.FAILED and run.error["class"] == "limit_exceeded"
    assert "max_steps=2" in run.error["message"]
    assert run.usage["steps"] == 2


async def test_token_budget_is_enforced_through_usage(rt: Runtime):
    g = Graph("g", state=S)

    @g.node()
    async def llm(state, ctx):
        ctx.usage(tokens=600, cost=0.01)
        ctx.usage(tokens=600, cost=0.01)
        return {"value": "never"}

    run = await rt.start(g, {}, max_tokens=1000)
    assert run.status == RunStatus.FAILED and run.error["class"] == "limit_exceeded"
    assert "tokens 1200 > max_tokens 1000" in run.error["message"]
    assert (await rt.get_run(run.id)).usage["tokens"] == 1200


async def test_bad_limits_and_input_are_rejected_before_anything_is_stored(rt: Runtime):
    g = Graph("g", state=S)
    g.add_node("a", lambda s: None)
    with pytest.raises(InvalidRequest, match="deadline must be a positive number"):
        await rt.start(g, {}, deadline=-1)
    with pytest.raises(InvalidRequest, match="n: Input should be a valid integer"):
        await rt.start(g, {"n": "lots"})
    assert await rt.runs() == []


# --------------------------------------------------------------------------- writes

async def test_unknown_write_field_fails_the_node_naming_the_field(rt: Runtime):
    g = Graph("g", state=S)
    g.add_node("a", lambda s: {"colour": "red"})
    run = await rt.start(g, {})
    assert run.status == RunStatus.FAILED and run.error["class"] == "invalid_input"
    assert "'colour'" in run.error["message"]


async def test_invalid_write_value_names_the_field(rt: Runtime):
    g = Graph("g", state=S)
    g.add_node("a", lambda s: {"n": "many"})
    run = await rt.start(g, {})
    assert run.status == RunStatus.FAILED and "field 'n'" in run.error["message"]


async def test_unordered_last_value_writers_conflict(rt: Runtime):
    g = Graph("g", state=S)
    g.add_node("left", lambda s: {"value": "L"})
    g.add_node("right", lambda s: {"value": "R"})
    run = await rt.start(g, {})
    assert run.status == RunStatus.FAILED
    assert "'left' and 'right' both write last-value field 'value'" in run.error["message"]


# --------------------------------------------------------------------------- branches

async def test_when_false_skips_and_skips_propagate_and_joins_run(rt: Runtime):
    g = Graph("g", state=S)
    g.add_node("start", lambda s: {"n": 3})
    g.add_node("big", lambda s: {"log": ["big"]}, after=["start"], when=lambda s: s.n > 10)
    g.add_node("after_big", lambda s: {"log": ["after_big"]}, after=["big"])
    g.add_node("small", lambda s: {"log": ["small"]}, after=["start"], when=lambda s: s.n <= 10)
    g.add_node("join", lambda s: {"log": ["join"]}, after=["after_big", "small"])
    run = await rt.start(g, {})
    assert run.status == RunStatus.SUCCEEDED
    states = (await rt.history(run.id))[-1].node_states
    assert states["big"] == states["after_big"] == NodeStatus.SKIPPED
    assert states["join"] == NodeStatus.SUCCEEDED
    assert (await final_state(rt, run.id)).log == ["small", "join"]


# --------------------------------------------------------------------------- interrupts

class Approval(BaseModel):
    approve: bool
    note: str = ""


async def test_effects_before_each_interrupt_run_once_across_resumes(rt: Runtime):
    g = Graph("g", state=S)
    calls = {"charge": 0, "notify": 0}

    def charge():
        calls["charge"] += 1
        return "charged"

    def notify():
        calls["notify"] += 1
        return "notified"

    @g.node()
    async def two_questions(state, ctx):
        a = await ctx.effect("charge", charge)
        first = await ctx.interrupt({"q": "first?"}, response=Approval)
        b = await ctx.effect("notify", notify)
        second = await ctx.interrupt({"q": "second?"})
        return {"value": f"{a},{first.approve},{b},{second}"}

    run = await rt.start(g, {})
    assert run.status == RunStatus.INTERRUPTED
    run = await rt.resume(run.id, {"approve": True})
    assert run.status == RunStatus.INTERRUPTED
    run = await rt.resume(run.id, "yes")
    assert run.status == RunStatus.SUCCEEDED
    assert calls == {"charge": 1, "notify": 1}
    assert (await final_state(rt, run.id)).value == "charged,True,notified,yes"


async def test_invalid_answer_is_rejected_and_the_run_stays_paused(rt: Runtime):
    g = Graph("g", state=S)

    @g.node()
    async def ask(state, ctx):
        answer = await ctx.interrupt({"q": "approve?"}, response=Approval)
        return {"value": str(answer.approve)}

    run = await rt.start(g, {})
    events_before = len(await rt.events(run.id))
    with pytest.raises(InvalidAnswer, match="approve: Input should be a valid boolean"):
        await rt.resume(run.id, {"approve": "perhaps"})
    with pytest.raises(InvalidAnswer, match="approve: Field required"):
        await rt.resume(run.id, {"note": "x"})
    after = await rt.get_run(run.id)
    assert after.status == RunStatus.INTERRUPTED and after.fence == run.fence
    assert len(await rt.events(run.id)) == events_before
    assert (await rt.resume(run.id, {"approve": False})).status == RunStatus.SUCCEEDED


async def test_parallel_interrupts_are_answered_by_id(rt: Runtime):
    g = Graph("g", state=S)

    @g.node()
    def left(state, ctx):  # a sync node: ctx.interrupt blocks and returns the answer
        return {"log": [f"left:{ctx.interrupt('left?')}"]}

    @g.node()
    async def right(state, ctx):
        return {"log": [f"right:{await ctx.interrupt('right?')}"]}

    run = await rt.start(g, {})
    pending = await rt.interrupts(run.id)
    assert run.status == RunStatus.INTERRUPTED and len(pending) == 2
    with pytest.raises(InvalidAnswer, match="2 pending interrupts"):
        await rt.resume(run.id, "both")
    with pytest.raises(InvalidAnswer, match="no pending interrupt int_bogus"):
        await rt.resume(run.id, answers={"int_bogus": 1})
    by_node = {i.node: i.id for i in pending}
    run = await rt.resume(run.id, answers={by_node["left"]: "L"})
    assert run.status == RunStatus.INTERRUPTED  # right still waits
    run = await rt.resume(run.id, answers={by_node["right"]: "R"})
    assert run.status == RunStatus.SUCCEEDED
    assert (await final_state(rt, run.id)).log == ["left:L", "right:R"]


async def test_sibling_of_an_interrupted_node_finishes_and_is_kept(rt: Runtime):
    g = Graph("g", state=S)
    calls = []

    @g.node()
    async def ask(state, ctx):
        return {"value": await ctx.interrupt("ok?")}

    @g.node()
    async def work(state):
        await asyncio.sleep(0.02)
        calls.append(1)
        return {"log": ["work"]}

    run = await rt.start(g, {})
    assert run.status == RunStatus.INTERRUPTED
    assert await node_status(rt, run.id, "work") == NodeStatus.SUCCEEDED
    run = await rt.resume(run.id, "fine")
    assert calls == [1] and (await final_state(rt, run.id)).model_dump() == {"log": ["work"], "value": "fine", "n": 0}


# --------------------------------------------------------------------------- in-doubt effects

def hanging_graph(calls: list[str], idempotent: bool = False) -> Graph:
    """An effect whose first call outlives the attempt's timeout: its outcome is unknown."""
    g = Graph("g", state=S)

    async def pay(info):
        calls.append(info.key)
        if len(calls) == 1:
            await asyncio.sleep(5)
        return f"paid:{len(calls)}"

    # the first call sleeps far past the timeout; the retry (durable commits, the repeated call)
    # must fit in it on a machine busy with parallel test workers
    @g.node(timeout=0.5, retry=RetryPolicy(max_attempts=2, **FAST))
    async def charge(state, ctx):
        return {"value": await ctx.effect("pay", pay, request={"amount": 5}, idempotent=idempotent)}

    return g


async def test_in_doubt_effect_interrupts_for_a_person(rt: Runtime):
    calls: list[str] = []
    run = await rt.start(hanging_graph(calls), {})
    assert run.status == RunStatus.INTERRUPTED
    [question] = await rt.interrupts(run.id)
    assert question.kind == InterruptKind.IN_DOUBT and question.payload["value"]["effect"] == "pay"
    with pytest.raises(InvalidAnswer):
        await rt.resume(run.id, {"action": "maybe"})
    run = await rt.resume(run.id, {"action": "result", "result": "paid-by-hand"})
    assert run.status == RunStatus.SUCCEEDED and len(calls) == 1
    assert (await final_state(rt, run.id)).value == "paid-by-hand"


async def test_in_doubt_retry_calls_again_with_the_same_key(rt: Runtime):
    calls: list[str] = []
    run = await rt.start(hanging_graph(calls), {})
    run = await rt.resume(run.id, {"action": "retry"})
    assert run.status == RunStatus.SUCCEEDED and len(calls) == 2 and calls[0] == calls[1]


async def test_in_doubt_abort_fails_the_node(rt: Runtime):
    calls: list[str] = []
    run = await rt.start(hanging_graph(calls), {})
    run = await rt.resume(run.id, {"action": "abort"})
    assert run.status == RunStatus.FAILED and run.error["class"] == "in_doubt_effect"


async def test_idempotent_in_doubt_effect_is_repeated_with_the_same_key(rt: Runtime):
    calls: list[str] = []
    run = await rt.start(hanging_graph(calls, idempotent=True), {})
    assert run.status == RunStatus.SUCCEEDED
    assert len(calls) == 2 and calls[0] == calls[1]


# --------------------------------------------------------------------------- continuation

async def test_resuming_a_failed_run_continues_in_a_new_run_without_redoing_work(rt: Runtime):
    g = Graph("g", state=S)
    calls = {"a": 0, "b": 0, "effect": 0}

    def bump():
        calls["effect"] += 1
        return calls["effect"]

    @g.node()
    async def a(state, ctx):
        calls["a"] += 1
        await ctx.effect("bump", bump)
        return {"log": ["a"]}

    @g.node(after=["a"])
    def b(state):
        calls["b"] += 1
        if calls["b"] == 1:
            raise RuntimeError("bug fixed in the next deploy")
        return {"log": ["b"]}

    failed = await rt.start(g, {})
    assert failed.status == RunStatus.FAILED
    cont = await rt.resume(failed.id)
    assert cont.id != failed.id and cont.kind == RunKind.CONTINUATION
    assert cont.parent_run_id == failed.id and cont.thread_id == failed.thread_id
    assert cont.status == RunStatus.SUCCEEDED
    assert calls == {"a": 1, "b": 2, "effect": 1}
    assert (await rt.get_run(failed.id)).status == RunStatus.FAILED
    assert [r.id for r in rt.store.child_runs(failed.id)] == [cont.id]
    assert (await final_state(rt, cont.id)).log == ["a", "b"]
    assert cont.base_checkpoint_id == (await rt.history(failed.id))[-1].id


async def test_resume_with_an_answer_on_a_run_that_is_not_paused_is_rejected(rt: Runtime):
    g = Graph("g", state=S)
    g.add_node("a", lambda s: (_ for _ in ()).throw(ValueError("x")))
    run = await rt.start(g, {})
    with pytest.raises(InvalidRequest, match="not interrupted"):
        await rt.resume(run.id, {"approve": True})
    assert rt.store.child_runs(run.id) == []


async def test_submit_queues_and_resume_claims(rt: Runtime):
    g = Graph("g", state=S)
    g.add_node("a", lambda s: {"n": 1})
    queued = await rt.submit(g, {})
    assert queued.status == RunStatus.QUEUED
    run = await rt.resume(queued.id)
    assert run.id == queued.id and run.status == RunStatus.SUCCEEDED


async def test_a_pause_does_not_wait_for_a_sibling_backoff_and_the_retry_runs_after_resume(rt: Runtime):
    g = Graph("g", state=S)
    tries = []

    @g.node(retry=RetryPolicy(max_attempts=2, initial_interval=2.0))
    def flaky(state, ctx):
        tries.append(ctx.attempt)
        if ctx.attempt == 1:
            raise TransientError("later")
        return {"n": 1}

    @g.node()
    async def ask(state, ctx):
        await asyncio.sleep(0.01)
        return {"value": await ctx.interrupt("go?")}

    t0 = time.monotonic()
    run = await rt.start(g, {})
    assert run.status == RunStatus.INTERRUPTED and time.monotonic() - t0 < 1.5  # well before the 2 s backoff
    assert await node_status(rt, run.id, "flaky") == NodeStatus.RETRYING
    run = await rt.resume(run.id, "yes")
    assert run.status == RunStatus.SUCCEEDED and tries == [1, 2]


async def test_a_retryable_failure_that_arrives_while_the_run_pauses_is_retried_after_resume(rt: Runtime):
    # the other order of the test above: the pause is recorded first, then the sibling
    # fails; a pause is no reason to give up a retry, so the run pauses, not fails
    g = Graph("g", state=S)
    tries = []

    @g.node(retry=RetryPolicy(max_attempts=2, initial_interval=0.05))
    async def flaky(state, ctx):
        tries.append(ctx.attempt)
        if ctx.attempt == 1:
            await asyncio.sleep(0.05)
            raise TransientError("later")
        return {"n": 1}

    @g.node()
    async def ask(state, ctx):
        return {"value": await ctx.interrupt("go?")}

    run = await rt.start(g, {})
    assert run.status == RunStatus.INTERRUPTED
    assert await node_status(rt, run.id, "flaky") == NodeStatus.RETRYING
    attempt = [a for a in await rt.attempts(run.id) if a.node == "flaky"]
    assert [a.decision for a in attempt] == ["retry in 0.05s (failure 1 of at most 2)"]
    run = await rt.resume(run.id, "yes")
    assert run.status == RunStatus.SUCCEEDED and tries == [1, 2]


async def test_a_failure_does_not_wait_for_a_sibling_backoff(rt: Runtime):
    g = Graph("g", state=S)

    @g.node(retry=RetryPolicy(max_attempts=2, initial_interval=30))
    def flaky(state):
        raise TransientError("later")

    @g.node()
    async def broken(state):
        await asyncio.sleep(0.01)
        raise ValueError("bad input")

    t0 = time.monotonic()
    run = await rt.start(g, {})
    assert run.status == RunStatus.FAILED and run.error["node"] == "broken"
    assert time.monotonic() - t0 < 5
    assert await node_status(rt, run.id, "flaky") == NodeStatus.FAILED


async def test_a_long_node_keeps_its_run_leased_so_no_other_process_takes_it_over(tmp_path):
    from runtime import SqlStore

    url = f"sqlite:///{tmp_path / 'lease.db'}"
    owner = Runtime(store=SqlStore(url), lease_ttl=0.3, heartbeat=0.05)
    other = Runtime(store=SqlStore(url), lease_ttl=0.3)
    g = Graph("g", state=S)
    started = asyncio.Event()

    @g.node()
    async def long(state):
        started.set()
        await asyncio.sleep(1.0)
        return {"n": 1}

    other.register(g)
    task = asyncio.create_task(owner.start(g, {}))
    await started.wait()
    run_id = (await owner.runs())[0].id
    for _ in range(8):  # well past the 0.3 s lease: the heartbeat must have renewed it
        await asyncio.sleep(0.1)
        with pytest.raises(InvalidRequest, match="is running"):
            await other.resume(run_id)
    run = await task
    assert run.status == RunStatus.SUCCEEDED and run.fence == 1
    owner.close()
    other.close()


async def test_a_retry_budget_holds_across_a_pause(rt: Runtime):
    g = Graph("g", state=S)
    tries = []

    @g.node(retry=RetryPolicy(max_attempts=2, **FAST))
    async def flaky(state, ctx):
        tries.append(ctx.attempt)
        if ctx.attempt == 1:
            raise TransientError("blip")
        if ctx.attempt == 2:
            await ctx.interrupt("check?")
        raise TransientError("again")

    run = await rt.start(g, {})
    assert run.status == RunStatus.INTERRUPTED
    run = await rt.resume(run.id, "ok")
    assert run.status == RunStatus.FAILED and tries == [1, 2, 3]
    assert (await rt.attempts(run.id))[-1].decision == "fail: 2 failure(s), max_attempts=2"
