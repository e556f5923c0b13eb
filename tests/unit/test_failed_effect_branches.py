"""A fork or replay meeting an effect its source called and that failed: it has no result
to serve, so the branch asks a person; the question says the call failed (with its
error), and a replay's report compares the request with the failed call's, not as new."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel

from runtime import EffectStatus, Graph, InterruptKind, NodeContext, RunStatus, Runtime
from runtime.core.records import JournalEntry
from runtime.graph.reducers import append
from runtime.travel.report import EffectVerdict, Verdict, effective_effects
from server.present import interrupt_question


class Batch(BaseModel):
    items: list[int] = []
    out: Annotated[list[int], append] = []


def batch_graph(calls: list[int]) -> Graph:
    g = Graph("failing-item", state=Batch)

    @g.node()
    async def plan(s: Batch) -> dict:
        return {"items": [1, 2, 3]}

    @g.node(after=["plan"], map_over="items")
    async def work(s: Batch, ctx: NodeContext, item: int) -> dict:
        def call() -> int:
            calls.append(item)
            if item == 2:
                raise RuntimeError("upstream 503")
            return item * 10
        return {"out": [await ctx.effect("api.call", call, request={"item": item})]}

    return g


async def test_a_replay_asks_about_an_effect_whose_recorded_call_failed_and_says_so(rt: Runtime):
    calls: list[int] = []
    run = await rt.start(batch_graph(calls), {})
    assert run.status == RunStatus.FAILED and sorted(calls) == [1, 2, 3]

    report = await rt.replay(run.id)
    assert sorted(calls) == [1, 2, 3]   # nothing called again: the failed call is not retried live
    assert report.status == RunStatus.INTERRUPTED
    [question] = await rt.interrupts(report.run_id)
    value = question.payload["value"]
    assert question.kind == InterruptKind.UNRECORDED and question.node == "work[1]"
    [failed] = [e for e in rt.store.journal([run.id]) if e.status == EffectStatus.FAILED]
    assert value["recorded_request"] == {"item": 2}
    assert value["failed"] == {"run_id": run.id, "key": failed.key, "error": "RuntimeError: upstream 503"}
    assert "in_doubt" not in value
    assert "called this effect and it failed (RuntimeError: upstream 503)" in value["question"]
    assert f"run {run.id} called it and it failed: RuntimeError: upstream 503" in interrupt_question(question)
    # the report compares the replay's request with the failed call's: the same request, not a new effect
    [effect] = report.node("work[1]").effects
    assert (effect.verdict, effect.request, effect.recorded_request) == (EffectVerdict.SAME, {"item": 2}, {"item": 2})
    assert report.node("work[1]").verdict == Verdict.PAUSED

    rt_report = await rt.resume(report.run_id, {"action": "mock", "result": 20})
    assert rt_report.status == RunStatus.SUCCEEDED and sorted(calls) == [1, 2, 3]
    done = await rt.replay_report(report.run_id)
    item = done.node("work[1]")
    assert (item.verdict, item.recorded_status, item.replay_status) == (Verdict.DIFFERENT, "failed", "succeeded")
    assert [e.verdict for e in item.effects] == [EffectVerdict.SAME]


async def test_a_fork_asks_about_an_effect_whose_recorded_call_failed_and_says_so(rt: Runtime):
    calls: list[int] = []
    run = await rt.start(batch_graph(calls), {})
    [plan_cp] = [cp for cp in await rt.history(run.id) if cp.nodes == ("plan",)]
    branch = await rt.fork(plan_cp.id)
    assert branch.status == RunStatus.INTERRUPTED and sorted(calls) == [1, 2, 3]
    [question] = await rt.interrupts(branch.id)
    assert question.node == "work[1]" and question.payload["value"]["failed"]["run_id"] == run.id


def _entry(status: EffectStatus, request: int, run: str = "r1") -> JournalEntry:
    return JournalEntry(run_id=run, node="n", name="e", occurrence=0, attempt=1, key="k",
                        status=status, request={"r": request})


def test_a_served_record_stands_for_its_identity_before_a_failed_call():
    S, F, M = EffectStatus.SUCCEEDED, EffectStatus.FAILED, EffectStatus.MOCKED
    # a failed attempt, then a retry that succeeded: the success is the identity's record
    assert [e.request for e in effective_effects([_entry(F, 1), _entry(S, 2)])["n"]] == [{"r": 2}]
    # only failed calls: the last of them
    assert [e.request for e in effective_effects([_entry(F, 1), _entry(F, 2)])["n"]] == [{"r": 2}]
    # served first (a continuation's source), failed later: the served record stays
    assert [e.request for e in effective_effects([_entry(M, 1), _entry(F, 2, "r2")])["n"]] == [{"r": 1}]
    # started only: never an effective record
    assert effective_effects([_entry(EffectStatus.STARTED, 1)]) == {}
