"""Budgets across a run's lineage, on every store: a continuation starts with its
parent's usage; usage an effect reports with ``info.usage`` counts once, however
often its recorded result is served; mocked effects count nothing; ``resume`` and
``fork`` take new limits (checked before anything is written); the CLI options."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from runtime import (
    EffectInfo,
    EffectStatus,
    ErrorClass,
    Graph,
    InvalidRequest,
    MemoryStore,
    NodeContext,
    RetryPolicy,
    Run,
    RunKind,
    RunStatus,
    Runtime,
    SqlStore,
    TransientError,
    append,
)
from runtime.engine import effects
from server.cli import main

FAST = dict(initial_interval=0.001, backoff=1.0)


class S(BaseModel):
    log: Annotated[list[str], append] = []
    text: str = ""


class Calls:
    """How often each piece of node or effect code really ran."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def __call__(self, name: str) -> int:
        self.counts[name] = self.counts.get(name, 0) + 1
        return self.counts[name]


def spend_then_fail_once(calls: Calls) -> Graph:
    """a reports cost 7; b fails on its first call (a bug), then reports cost 4."""
    g = Graph("spend", state=S)

    @g.node()
    def a(state: S, ctx: NodeContext) -> dict[str, Any]:
        ctx.usage(tokens=70, cost=7)
        return {"log": ["a"]}

    @g.node(after=["a"])
    def b(state: S, ctx: NodeContext) -> dict[str, Any]:
        if calls("b") == 1:
            raise RuntimeError("bug fixed in the next deploy")
        ctx.usage(tokens=40, cost=4)
        return {"log": ["b"]}

    return g


def model_call(calls: Calls, *, tokens: int = 100, cost: float = 0.5, answer: str = "hello") -> Any:
    """An effect function that calls a model (counted in ``calls``) and reports its usage."""
    def call(info: EffectInfo) -> str:
        calls("model")
        info.usage(tokens=tokens, cost=cost)
        return answer
    return call


# --------------------------------------------------------------------------- continuations

async def test_a_continuation_starts_with_its_parents_usage_so_the_cost_budget_spans_the_chain(rt: Runtime):
    failed = await rt.start(spend_then_fail_once(Calls()), {}, max_cost=10)
    assert failed.status == RunStatus.FAILED and failed.error["class"] == ErrorClass.INTERNAL
    assert failed.usage["cost"] == 7
    cont = await rt.resume(failed.id)
    assert cont.kind == RunKind.CONTINUATION
    assert cont.status == RunStatus.FAILED and cont.error["class"] == ErrorClass.LIMIT_EXCEEDED
    assert "cost 11 > max_cost 10" in cont.error["message"]
    assert (await rt.get_run(cont.id)).usage == {"tokens": 110, "cost": 11.0, "steps": 3}


async def test_max_steps_counts_across_the_continuation_chain(rt: Runtime):
    g = Graph("steps", state=S)
    calls = Calls()
    g.add_node("a", lambda s: {"log": ["a"]})

    @g.node(after=["a"])
    def b(state: S) -> dict[str, Any]:
        if calls("b") == 1:
            raise RuntimeError("bug")
        return {"log": ["b"]}

    g.add_node("c", lambda s: {"log": ["c"]}, after=["b"])
    failed = await rt.start(g, {}, max_steps=3)
    assert failed.status == RunStatus.FAILED and failed.usage["steps"] == 2
    cont = await rt.resume(failed.id)
    assert cont.status == RunStatus.FAILED and cont.error["class"] == ErrorClass.LIMIT_EXCEEDED
    assert "max_steps=3 before node 'c'" in cont.error["message"]
    assert (await rt.get_run(cont.id)).usage["steps"] == 3


async def test_a_continuation_that_could_start_nothing_is_refused_and_nothing_is_made(rt: Runtime):
    """Its steps used up (or its budget exceeded): it would fail before any node, and then
    stand in the way of resuming the run with higher limits ("already continued")."""
    g = Graph("two-steps", state=S)
    g.add_node("a", lambda s: {"log": ["a"]})
    g.add_node("b", lambda s: {"log": ["b"]}, after=["a"])
    g.add_node("c", lambda s: {"log": ["c"]}, after=["b"])
    failed = await rt.start(g, {}, max_steps=2)
    assert failed.error["class"] == ErrorClass.LIMIT_EXCEEDED and failed.usage["steps"] == 2
    before = (await rt.runs(), await rt.get_run(failed.id))
    with pytest.raises(InvalidRequest) as e:
        await rt.resume(failed.id)
    assert str(e.value) == (f"run {failed.id} has used what its limits allow (steps 2 of max_steps 2, raise "
                            f"max_steps): a continuation could start nothing; resume it giving higher limits")
    assert (await rt.runs(), await rt.get_run(failed.id)) == before
    with pytest.raises(InvalidRequest, match="steps 2 of max_steps 2"):
        await rt.resume(failed.id, max_steps=2)   # given, but no higher
    done = await rt.resume(failed.id, max_steps=3)
    assert done.status == RunStatus.SUCCEEDED and done.usage["steps"] == 3


async def test_a_run_that_used_its_steps_but_failed_otherwise_still_continues(rt: Runtime):
    """Its steps are all used, but it failed on a condition, not at max_steps: going on may
    start nothing (the condition now false skips its node), so the resume is not refused."""
    flaky = Calls()

    def ready(s: S) -> bool:
        if flaky("when") == 1:
            raise ConnectionError("the feature-flag service is down")
        return False

    g = Graph("zero-steps-left", state=S)
    g.add_node("a", lambda s: {"log": ["a"]})
    g.add_node("b", lambda s: {"log": ["b"]}, after=["a"], when=ready)
    failed = await rt.start(g, {}, max_steps=1)
    assert failed.error["class"] == ErrorClass.TRANSIENT and failed.usage["steps"] == 1
    done = await rt.resume(failed.id)
    assert done.status == RunStatus.SUCCEEDED and done.usage["steps"] == 1


async def test_resume_with_a_raised_max_cost_lets_the_continuation_finish(rt: Runtime):
    failed = await rt.start(spend_then_fail_once(Calls()), {}, max_cost=10, max_steps=50)
    cont = await rt.resume(failed.id, max_cost=20)
    assert cont.status == RunStatus.SUCCEEDED
    stored = await rt.get_run(cont.id)
    assert stored.limits["max_cost"] == 20 and stored.limits["max_steps"] == 50  # the rest is inherited
    assert stored.usage["cost"] == 11


async def test_resume_gives_a_continuation_a_new_deadline(rt: Runtime):
    failed = await rt.start(spend_then_fail_once(Calls()), {}, deadline=60)
    before = rt.env.now()
    cont = await rt.resume(failed.id, deadline=3600)
    stored = await rt.get_run(cont.id)
    assert stored.limits["deadline_s"] == 3600 and stored.limits["deadline_at"] >= before + 3600


async def test_costs_that_add_up_to_the_budget_exactly_stay_within_it(rt: Runtime):
    """0.1 + 0.1 + 0.1 is 0.30000000000000004 in floating point: still a budget of 0.3."""
    g = Graph("tenths", state=S)
    for name, after in (("a", []), ("b", ["a"]), ("c", ["b"]), ("d", ["c"])):
        def spend(state: S, ctx: NodeContext, name: str = name) -> dict[str, Any]:
            ctx.usage(cost=0.1)
            return {"log": [name]}
        g.add_node(name, spend, after=after)
    within = await rt.start(g, {}, max_cost=0.4)
    assert within.status == RunStatus.SUCCEEDED, within.error
    over = await rt.start(g, {}, max_cost=0.3)
    assert over.status == RunStatus.FAILED and over.error["node"] == "d"
    assert "cost 0.4 > max_cost 0.3" in over.error["message"]


async def test_a_runs_cost_is_the_sum_of_its_costs_without_floating_point_noise(rt: Runtime):
    g = Graph("cents", state=S)

    @g.node()
    def spend(state: S, ctx: NodeContext) -> dict[str, Any]:
        for _ in range(10):
            ctx.usage(cost=0.01)
        return {}

    run = await rt.start(g, {})
    assert run.usage["cost"] == 0.1   # not 0.09999999999999999
    assert [e.data["cost"] for e in await rt.events(run.id) if e.type == "usage"] == [0.1]


# --------------------------------------------------------------------------- effect usage

async def test_effect_usage_served_from_the_journal_on_retry_is_counted_once(rt: Runtime):
    g = Graph("retry", state=S)
    calls = Calls()

    @g.node(retry=RetryPolicy(max_attempts=2, **FAST))
    async def ask(state: S, ctx: NodeContext) -> dict[str, Any]:
        text = await ctx.effect("llm", model_call(calls), request={"prompt": "hi"})
        if calls("ask") == 1:
            raise TransientError("the parser flaked")
        return {"text": text}

    run = await rt.start(g, {})
    assert run.status == RunStatus.SUCCEEDED and calls.counts == {"model": 1, "ask": 2}
    assert (await rt.get_run(run.id)).usage == {"tokens": 100, "cost": 0.5, "steps": 2}


async def test_effect_usage_served_from_the_journal_on_resume_is_counted_once(rt: Runtime):
    g = Graph("pause", state=S)
    calls = Calls()

    @g.node()
    async def ask(state: S, ctx: NodeContext) -> dict[str, Any]:
        text = await ctx.effect("llm", model_call(calls))
        ok = await ctx.interrupt({"question": f"send {text!r}?"})
        return {"text": text if ok else ""}

    paused = await rt.start(g, {})
    assert paused.status == RunStatus.INTERRUPTED
    run = await rt.resume(paused.id, True)
    assert run.status == RunStatus.SUCCEEDED and calls.counts == {"model": 1}
    assert (await rt.get_run(run.id)).usage == {"tokens": 100, "cost": 0.5, "steps": 2}


async def test_effect_usage_reported_from_a_thread_is_counted_once_across_a_continuation(rt: Runtime):
    g = Graph("sync", state=S)
    calls = Calls()

    @g.node()
    def ask(state: S, ctx: NodeContext) -> dict[str, Any]:  # a sync node: the effect runs in a thread
        text = ctx.effect("llm", model_call(calls, tokens=30, cost=0.25))
        if calls("ask") == 1:
            raise RuntimeError("bug after the model call")
        return {"text": text}

    failed = await rt.start(g, {})
    assert failed.usage == {"tokens": 30, "cost": 0.25, "steps": 1}
    cont = await rt.resume(failed.id)
    assert cont.status == RunStatus.SUCCEEDED and calls.counts == {"model": 1, "ask": 2}
    assert (await rt.get_run(cont.id)).usage == {"tokens": 30, "cost": 0.25, "steps": 2}


def late_answer(calls: Calls, started: threading.Event, release: threading.Event,
                result: Callable[[], object] = lambda: "late answer") -> Callable[[EffectInfo], object]:
    """An effect that waits for ``release`` (its run may end meanwhile), then reports 500
    tokens and returns ``result()``."""
    def call(info: EffectInfo) -> object:
        calls("model")
        started.set()
        release.wait(10)
        info.usage(tokens=500, cost=5)
        return result()
    return call


@pytest.fixture
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cancel waits a moment for a sync effect's thread (``CANCEL_GRACE``): here the thread
    is held past it on purpose, so the moment is made short (the order of events is the same)."""
    monkeypatch.setattr(effects, "CANCEL_GRACE", 0.2)


class LateRun:
    """A run of one ``def`` node calling ``late_answer``; ``finished`` once ``ctx.effect`` returned."""

    def __init__(self, rt: Runtime, name: str, result: Callable[[], object] = lambda: "late answer"):
        self.rt, self.calls = rt, Calls()
        started, self.release, self.finished = threading.Event(), threading.Event(), threading.Event()
        self.started = started
        call = late_answer(self.calls, started, self.release, result)
        self.graph = g = Graph(name, state=S)

        @g.node()
        def ask(state: S, ctx: NodeContext) -> dict[str, Any]:
            try:
                return {"text": ctx.effect("llm", call)}
            finally:
                self.finished.set()

    async def start(self) -> tuple[asyncio.Task[Run], Run]:
        """Start it (max_tokens=400) and wait until the effect is called: its task and run."""
        task = asyncio.create_task(self.rt.start(self.graph, {}, max_tokens=400))
        await asyncio.to_thread(self.started.wait, 10)
        [run] = await self.rt.runs()
        return task, run


@pytest.mark.usefixtures("short_grace")
async def test_a_sync_effect_of_an_async_node_given_up_on_by_a_cancel_is_journaled_once_it_ends(rt: Runtime):
    """As for a ``def`` node: the cancel stops waiting for the thread after its grace, but the
    outcome the thread comes to is journaled, so the continuation is served it rather than
    asking whether it happened (or calling it again)."""
    calls, started, release = Calls(), threading.Event(), threading.Event()
    call = late_answer(calls, started, release, lambda: "late answer")
    g = Graph("late_async", state=S)

    @g.node()
    async def ask(state: S, ctx: NodeContext) -> dict[str, Any]:
        return {"text": await ctx.effect("llm", call)}

    task = asyncio.create_task(rt.start(g, {}, max_tokens=1000))
    await asyncio.to_thread(started.wait, 10)
    [run] = await rt.runs()
    await rt.cancel(run.id, "stop")
    with contextlib.suppress(asyncio.CancelledError):
        await task
    release.set()
    for _ in range(500):
        if len(rt.store.journal([run.id])) == 2:
            break
        await asyncio.sleep(0.01)
    assert [e.status for e in rt.store.journal([run.id])] == [EffectStatus.STARTED, EffectStatus.SUCCEEDED]
    assert (await rt.get_run(run.id)).usage["tokens"] == 500
    going_on = await rt.resume(run.id)
    assert going_on.status == RunStatus.SUCCEEDED and calls.counts == {"model": 1}
    assert (await rt.state_at((await rt.history(going_on.id))[-1].id)).text == "late answer"


@pytest.mark.parametrize("end", ["cancel", "stop_waiting"])
@pytest.mark.usefixtures("short_grace")
async def test_effect_usage_reported_after_the_run_ended_counts_once_across_the_lineage(rt: Runtime, end: str):
    """A ``def`` node's thread outlives its run's end; the effect it finishes then is journaled,
    and its usage goes onto the ended run: the continuation served that result starts with it,
    is held to the budget by it, and never counts it again."""
    late = LateRun(rt, "late")
    calls, release, finished = late.calls, late.release, late.finished
    task, ended = await late.start()
    if end == "cancel":
        await rt.cancel(ended.id, "stop")
    else:   # the caller's task is cancelled: the run ends CANCELLED as well
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    ended = await rt.get_run(ended.id)
    assert ended.status == RunStatus.CANCELLED
    release.set()
    await asyncio.to_thread(finished.wait, 10)   # ``ctx.effect`` returned: its outcome is journaled
    assert [e.status for e in rt.store.journal([ended.id])] == [EffectStatus.STARTED, EffectStatus.SUCCEEDED]
    assert (await rt.get_run(ended.id)).usage == {"tokens": 500, "cost": 5.0, "steps": 1}

    with pytest.raises(InvalidRequest, match=r"\(tokens 500 > max_tokens 400, raise the budget\)"):
        await rt.resume(ended.id)   # over its budget already: a continuation could start nothing
    cont = await rt.resume(ended.id, max_tokens=1000)
    assert cont.status == RunStatus.SUCCEEDED and calls.counts == {"model": 1}   # served from the journal
    assert (await rt.get_run(cont.id)).usage == {"tokens": 500, "cost": 5.0, "steps": 2}


@pytest.mark.usefixtures("short_grace")
async def test_usage_of_an_effect_whose_late_result_cannot_be_stored_counts_once_across_the_lineage(
        rt: Runtime):
    """The effect ran and was paid for, but its result has no JSON form: the entry stays in
    doubt, and the usage still goes onto the ended run, so the lineage's budget holds it."""
    late = LateRun(rt, "late_unstorable", result=object)   # no JSON form
    calls, release, finished = late.calls, late.release, late.finished
    task, ended = await late.start()
    await rt.cancel(ended.id, "stop")
    await task
    release.set()
    await asyncio.to_thread(finished.wait, 10)
    assert [e.status for e in rt.store.journal([ended.id])] == [EffectStatus.STARTED]
    assert (await rt.get_run(ended.id)).usage == {"tokens": 500, "cost": 5.0, "steps": 1}

    with pytest.raises(InvalidRequest, match="tokens 500 > max_tokens 400"):
        await rt.resume(ended.id)
    paused = await rt.resume(ended.id, max_tokens=1000)   # in doubt: a person says what it returned
    assert paused.status == RunStatus.INTERRUPTED
    done = await rt.resume(paused.id, {"action": "result", "result": "late answer"})
    assert done.status == RunStatus.SUCCEEDED and calls.counts == {"model": 1}
    assert (await rt.get_run(done.id)).usage == {"tokens": 500, "cost": 5.0, "steps": 3}   # asked, answered


async def test_usage_of_an_effect_that_outlived_its_deadline_counts_once_across_the_lineage(rt: Runtime):
    """The node's deadline gave up on the effect, but its thread went on, called the model
    and reported what it spent after the run had failed: the outcome is journaled and the
    usage goes onto the failed run, where a continuation starts from it and is served the
    result without counting it again."""
    g = Graph("late_deadline", state=S)
    calls, release, reported = Calls(), threading.Event(), threading.Event()

    def call(info: EffectInfo) -> str:
        try:
            release.wait(10)
            calls("model")
            info.usage(tokens=500, cost=5)
            return "too late"
        finally:
            reported.set()

    @g.node(timeout=1.0)   # room for the continuation on a loaded machine: its served call returns at once
    def ask(state: S, ctx: NodeContext) -> dict[str, Any]:
        return {"text": ctx.effect("llm", call)}

    failed = await rt.start(g, {})
    assert failed.status == RunStatus.FAILED and failed.error["class"] == ErrorClass.DEADLINE
    release.set()
    await asyncio.to_thread(reported.wait, 10)
    for _ in range(500):   # the outcome is recorded as the thread's end reaches the event loop
        if len(rt.store.journal([failed.id])) == 2:
            break
        await asyncio.sleep(0.01)
    assert [e.status for e in rt.store.journal([failed.id])] == [EffectStatus.STARTED, EffectStatus.SUCCEEDED]
    assert (await rt.get_run(failed.id)).usage == {"tokens": 500, "cost": 5.0, "steps": 1}
    cont = await rt.resume(failed.id)   # served what the thread returned: nobody is asked
    assert cont.status == RunStatus.SUCCEEDED and calls.counts == {"model": 1}
    assert (await rt.get_run(cont.id)).usage["tokens"] == 500


@pytest.mark.usefixtures("short_grace")
async def test_a_late_effect_of_a_run_already_continued_is_left_in_doubt_and_changes_neither_run(
        rt: Runtime, caplog: pytest.LogCaptureFixture):
    """The continuation claimed the ended run and copied its usage: the late outcome is refused
    (the run's fence moved on), so the continuation's question stands and nothing is counted twice."""
    caplog.set_level(logging.INFO, logger="runtime.engine.recorder")
    g = Graph("late_continued", state=S)
    calls, started, release, finished = Calls(), threading.Event(), threading.Event(), threading.Event()

    call = late_answer(calls, started, release)

    @g.node()
    def ask(state: S, ctx: NodeContext) -> dict[str, Any]:
        first = calls("ask") == 1   # the continuation's attempt is asked about the effect at once
        try:
            return {"text": ctx.effect("llm", call)}
        finally:
            if first:
                finished.set()

    task = asyncio.create_task(rt.start(g, {}))
    await asyncio.to_thread(started.wait, 10)
    [ended] = await rt.runs()
    await rt.cancel(ended.id, "stop")
    await task
    paused = await rt.resume(ended.id)   # the effect is in doubt: a person is asked
    assert paused.status == RunStatus.INTERRUPTED
    release.set()
    await asyncio.to_thread(finished.wait, 10)
    assert [e.status for e in rt.store.journal([ended.id])] == [EffectStatus.STARTED]
    assert (await rt.get_run(ended.id)).usage["tokens"] == 0
    assert (await rt.get_run(paused.id)).usage["tokens"] == 0
    assert "another process took the run over" in caplog.text
    done = await rt.resume(paused.id, {"action": "result", "result": "late answer"})
    assert done.status == RunStatus.SUCCEEDED and calls.counts["model"] == 1


async def test_an_effect_over_the_budget_ends_the_run_and_its_paid_result_is_served_later(rt: Runtime):
    g = Graph("costly", state=S)
    calls = Calls()

    @g.node()
    async def ask(state: S, ctx: NodeContext) -> dict[str, Any]:
        return {"text": await ctx.effect("llm", model_call(calls, tokens=5, cost=12))}

    failed = await rt.start(g, {}, max_cost=10)
    assert failed.status == RunStatus.FAILED and failed.error["class"] == ErrorClass.LIMIT_EXCEEDED
    assert "cost 12 > max_cost 10" in failed.error["message"]
    assert [e.status for e in rt.store.journal([failed.id])] == [EffectStatus.STARTED, EffectStatus.SUCCEEDED]
    cont = await rt.resume(failed.id, max_cost=20)
    assert cont.status == RunStatus.SUCCEEDED and calls.counts == {"model": 1}
    assert (await rt.get_run(cont.id)).usage == {"tokens": 5, "cost": 12.0, "steps": 2}


async def test_an_effect_that_fails_after_spending_past_the_budget_ends_the_run_with_limit_exceeded(
        rt: Runtime):
    g = Graph("spent_then_broke", state=S)

    def call(info: EffectInfo) -> str:
        info.usage(tokens=5, cost=12)
        raise TransientError("the model's reply was cut off")

    @g.node(retry=RetryPolicy(max_attempts=3, **FAST))
    async def ask(state: S, ctx: NodeContext) -> dict[str, Any]:
        return {"text": await ctx.effect("llm", call)}

    run = await rt.start(g, {}, max_cost=10)
    assert run.status == RunStatus.FAILED and run.error["class"] == ErrorClass.LIMIT_EXCEEDED
    [attempt] = await rt.attempts(run.id)  # a transient failure, but the money is spent: no retry
    assert attempt.error_class == ErrorClass.LIMIT_EXCEEDED and "cut off" in (attempt.error or "")
    assert [e.status for e in rt.store.journal([run.id])] == [EffectStatus.STARTED, EffectStatus.FAILED]
    assert (await rt.get_run(run.id)).usage == {"tokens": 5, "cost": 12.0, "steps": 1}


async def test_no_effect_starts_once_the_run_is_out_of_budget(rt: Runtime):
    g = Graph("caught", state=S)
    calls = Calls()

    @g.node()
    async def ask(state: S, ctx: NodeContext) -> dict[str, Any]:
        try:
            ctx.usage(tokens=500)
        except Exception:  # noqa: BLE001  # node code that swallows the budget error
            pass
        return {"text": await ctx.effect("llm", model_call(calls))}

    run = await rt.start(g, {}, max_tokens=100)
    assert run.status == RunStatus.FAILED and run.error["class"] == ErrorClass.LIMIT_EXCEEDED
    assert calls.counts == {} and rt.store.journal([run.id]) == []


async def test_effect_usage_must_be_whole_tokens_and_a_finite_cost(rt: Runtime):
    g = Graph("bad_usage", state=S)

    @g.node()
    async def ask(state: S, ctx: NodeContext) -> dict[str, Any]:
        return {"text": await ctx.effect("llm", lambda info: info.usage(cost=math.nan))}

    run = await rt.start(g, {})
    assert run.status == RunStatus.FAILED and run.error["class"] == ErrorClass.INVALID_INPUT
    assert "effect 'llm': usage cost must be a finite number" in run.error["message"]
    assert (await rt.get_run(run.id)).usage["cost"] == 0


@pytest.mark.parametrize("tokens, cost", [(-100, 0.0), (0, -5.0), (0, math.nan), (0, math.inf), (1.5, 0.0),
                                          (True, 0.0), (0, "3")])
async def test_node_usage_must_be_whole_tokens_and_a_finite_cost_of_at_least_0(rt: Runtime, tokens, cost):
    """A negative or NaN figure would lower the run's usage (or make it NaN) and so defeat its budget."""
    g = Graph("bad_node_usage", state=S)

    @g.node()
    def a(state: S, ctx: NodeContext) -> dict[str, Any]:
        ctx.usage(tokens=10, cost=1.0)
        ctx.usage(tokens=tokens, cost=cost)
        return {"log": ["a"]}

    run = await rt.start(g, {}, max_tokens=50, max_cost=5)
    assert run.status == RunStatus.FAILED and run.error["class"] == ErrorClass.INVALID_INPUT
    assert "usage tokens must be a whole number" in run.error["message"] \
        or "usage cost must be a finite number" in run.error["message"]
    assert (await rt.get_run(run.id)).usage == {"tokens": 10, "cost": 1.0, "steps": 1}


# --------------------------------------------------------------------------- branches

def effect_graph(calls: Calls) -> Graph:
    g = Graph("branchy", state=S)

    @g.node()
    def prepare(state: S) -> dict[str, Any]:
        return {"log": ["prepared"]}

    @g.node(after=["prepare"])
    async def ask(state: S, ctx: NodeContext) -> dict[str, Any]:
        return {"text": await ctx.effect("llm", model_call(calls))}

    return g


async def test_a_fork_with_mocked_effects_counts_none_of_their_usage(rt: Runtime):
    calls = Calls()
    run = await rt.start(effect_graph(calls), {})
    assert run.usage["tokens"] == 100
    fork = await rt.fork((await rt.history(run.id))[0].id)
    assert fork.status == RunStatus.SUCCEEDED and calls.counts == {"model": 1}
    assert (await rt.get_run(fork.id)).usage == {"tokens": 0, "cost": 0.0, "steps": 2}


async def test_a_replay_counts_none_of_its_mocked_effects_usage(rt: Runtime):
    calls = Calls()
    run = await rt.start(effect_graph(calls), {})
    report = await rt.replay(run.id)
    assert report.same and calls.counts == {"model": 1}
    assert (await rt.get_run(report.run_id)).usage == {"tokens": 0, "cost": 0.0, "steps": 2}


async def test_a_fork_takes_the_limits_it_is_given_and_copies_the_rest(rt: Runtime):
    run = await rt.start(effect_graph(Calls()), {}, max_cost=10, max_tokens=1000)
    fork = await rt.fork((await rt.history(run.id))[0].id, max_steps=1, max_cost=3)
    assert fork.status == RunStatus.FAILED and fork.error["class"] == ErrorClass.LIMIT_EXCEEDED
    assert "max_steps=1 before node 'ask'" in fork.error["message"]
    assert (await rt.get_run(fork.id)).limits == {"max_steps": 1, "max_tokens": 1000, "max_cost": 3}


# --------------------------------------------------------------------------- answering a paused run

def pause_between_spending(calls: Calls) -> Graph:
    """a reports cost 7; b asks a person, then reports cost 4."""
    g = Graph("approve", state=S)

    @g.node()
    def a(state: S, ctx: NodeContext) -> dict[str, Any]:
        ctx.usage(cost=7)
        return {"log": ["a"]}

    @g.node(after=["a"])
    async def b(state: S, ctx: NodeContext) -> dict[str, Any]:
        await ctx.interrupt({"question": "spend 4 more?"})
        calls("b answered")
        ctx.usage(cost=4)
        return {"log": ["b"]}

    return g


async def test_answering_with_a_raised_budget_applies_to_the_same_run(rt: Runtime):
    paused = await rt.start(pause_between_spending(Calls()), {}, max_cost=10)
    assert paused.status == RunStatus.INTERRUPTED
    run = await rt.resume(paused.id, True, max_cost=20)
    assert run.id == paused.id and run.status == RunStatus.SUCCEEDED
    assert run.limits["max_cost"] == 20 and run.usage["cost"] == 11


async def test_answering_with_a_budget_below_the_usage_so_far_ends_the_run_at_once(rt: Runtime):
    calls = Calls()
    paused = await rt.start(pause_between_spending(calls), {}, max_cost=10)
    run = await rt.resume(paused.id, True, max_cost=5)
    assert run.status == RunStatus.FAILED and run.error["class"] == ErrorClass.LIMIT_EXCEEDED
    assert "cost 7 > max_cost 5" in run.error["message"] and calls.counts == {}
    assert (await rt.get_run(run.id)).status == RunStatus.FAILED
    # the answer is kept: a continuation with a larger budget goes on with it, not asking again
    cont = await rt.resume(run.id, max_cost=20)
    assert cont.status == RunStatus.SUCCEEDED and calls.counts == {"b answered": 1}
    assert [i.status for i in await rt.interrupts(cont.id)] == []


async def test_answering_without_limits_keeps_the_runs_budget(rt: Runtime):
    paused = await rt.start(pause_between_spending(Calls()), {}, max_cost=10)
    run = await rt.resume(paused.id, True)
    assert run.status == RunStatus.FAILED and run.error["class"] == ErrorClass.LIMIT_EXCEEDED
    assert run.limits == {"max_cost": 10}


@pytest.mark.parametrize("store_kind", [
    "memory",
    "sqlite",
])
async def test_new_limits_of_an_answered_run_are_stored_with_it(tmp_path: Path, store_kind: str):
    store = MemoryStore() if store_kind == "memory" else SqlStore(f"sqlite:///{tmp_path / 'h.db'}")
    rt = Runtime(store)
    try:
        paused = await rt.start(pause_between_spending(Calls()), {}, max_cost=10)
        await rt.resume(paused.id, True, max_cost=20)
        assert (await rt.get_run(paused.id)).limits["max_cost"] == 20
    finally:
        rt.close()


# --------------------------------------------------------------------------- invalid limits

BAD_LIMITS = [("max_cost", -1.0), ("max_cost", math.inf), ("max_tokens", 1.5), ("max_steps", 0),
              ("deadline", math.nan), ("max_steps", True),
              # too large for a float: refused, not an OverflowError
              pytest.param("max_cost", 10**400, id="max_cost-10**400"),
              pytest.param("deadline", 10**400, id="deadline-10**400")]


@pytest.mark.parametrize(("name", "value"), BAD_LIMITS)
async def test_resume_of_a_failed_run_with_an_invalid_limit_is_rejected_and_writes_nothing(
        rt: Runtime, name: str, value: Any):
    failed = await rt.start(spend_then_fail_once(Calls()), {}, max_cost=10)
    events = await rt.events(failed.id)
    with pytest.raises(InvalidRequest, match=f"{name} must be"):
        await rt.resume(failed.id, **{name: value})
    assert rt.store.child_runs(failed.id) == [] and await rt.events(failed.id) == events
    assert await rt.get_run(failed.id) == failed


@pytest.mark.parametrize(("name", "value"), BAD_LIMITS)
async def test_answering_with_an_invalid_limit_is_rejected_and_writes_nothing(rt: Runtime, name: str, value: Any):
    paused = await rt.start(pause_between_spending(Calls()), {}, max_cost=10)
    events = await rt.events(paused.id)
    with pytest.raises(InvalidRequest, match=f"{name} must be"):
        await rt.resume(paused.id, True, **{name: value})
    assert await rt.events(paused.id) == events and await rt.get_run(paused.id) == paused
    assert len(await rt.interrupts(paused.id)) == 1


@pytest.mark.parametrize(("name", "value"), BAD_LIMITS)
async def test_fork_with_an_invalid_limit_is_rejected_and_writes_nothing(rt: Runtime, name: str, value: Any):
    run = await rt.start(effect_graph(Calls()), {})
    with pytest.raises(InvalidRequest, match=f"{name} must be"):
        await rt.fork((await rt.history(run.id))[0].id, **{name: value})
    assert [r.id for r in await rt.runs()] == [run.id]


# --------------------------------------------------------------------------- command line

GRAPH = textwrap.dedent('''
    from pydantic import BaseModel
    from runtime import Graph

    class State(BaseModel):
        done: bool = False

    graph = Graph("budget_demo", state=State)

    @graph.node()
    def a(state, ctx):
        ctx.usage(cost=7)
        return {}

    @graph.node(after=["a"])
    def b(state, ctx):
        ctx.usage(cost=4)
        return {"done": True}
''')


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "budget_graph.py").write_text(GRAPH)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARNESS_DB", raising=False)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    return tmp_path


def harness(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_resume_with_max_cost_lets_the_continuation_finish(workdir: Path, capsys: pytest.CaptureFixture[str]):
    code, out, _ = harness(capsys, "run", "budget_graph:graph", "--max-cost", "10", "--json")
    failed = json.loads(out)["run"]
    assert code == 1 and failed["error"]["class"] == "limit_exceeded"
    code, out, _ = harness(capsys, "resume", failed["id"], "--max-cost", "20", "--json")
    cont = json.loads(out)["run"]
    assert code == 0 and cont["status"] == "succeeded" and cont["kind"] == "continuation"
    assert cont["limits"] == {"max_cost": 20} and cont["usage"]["cost"] == 15


def test_cli_fork_takes_max_steps(workdir: Path, capsys: pytest.CaptureFixture[str]):
    code, out, _ = harness(capsys, "run", "budget_graph:graph", "--json")
    first = json.loads(out)["checkpoints"][0]["id"]
    code, out, _ = harness(capsys, "fork", first, "--max-steps", "1", "--json")
    fork = json.loads(out)["run"]
    assert code == 1 and fork["error"]["class"] == "limit_exceeded" and fork["limits"] == {"max_steps": 1}


@pytest.mark.parametrize("value", ["0", "-2", "nan", "inf", "lots"])
def test_cli_max_cost_must_be_a_number_above_0(workdir: Path, capsys: pytest.CaptureFixture[str], value: str):
    code, _, err = harness(capsys, "resume", "run_x", "--max-cost", value)
    assert code == 2 and "--max-cost: must be a number above 0" in err


async def test_the_runs_error_for_a_spent_budget_does_not_depend_on_who_notices_first(rt: Runtime):
    """The loop may notice the spent budget between steps before the node that spent it
    fails, or collect that failure first; either way the run ends with one error, naming
    the instance whose usage spent the budget."""
    import asyncio

    errors = []
    for loop_first in (False, True):
        g = Graph(f"spent_{loop_first}", state=S)

        @g.node()
        async def ask(state: S, ctx: NodeContext, loop_first: bool = loop_first) -> dict[str, Any]:
            if loop_first:
                try:
                    ctx.usage(tokens=500)
                except Exception:  # noqa: BLE001  # caught: the loop's next look at the budget stops the run
                    pass
                await asyncio.sleep(0.1)   # several group-commit windows: the loop looks meanwhile
            ctx.usage(tokens=500 if not loop_first else 1)
            return {"text": "unreachable"}

        run = await rt.start(g, {}, max_tokens=100)
        assert run.status == RunStatus.FAILED
        errors.append(dict(run.error or {}))
    assert errors[0] == errors[1] == {"class": ErrorClass.LIMIT_EXCEEDED.value,
                                      "message": "run budget exceeded: tokens 500 > max_tokens 100", "node": "ask"}
