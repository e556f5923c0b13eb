"""Recorded answers given again to the questions of map items, on every store: a replay
or a continuation reuses an answer the code's response model still takes, and asks
again when that model no longer takes it (instead of failing the node on it)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel

from runtime import ExecutableGraph, Graph, NodeContext, RunStatus, Runtime, append


class S(BaseModel):
    items: list[int] = []
    notes: Annotated[list[str], append] = []


class Approval(BaseModel):
    approve: bool


class Reasoned(BaseModel):
    approve: bool
    reason: str


def reviews(response: list[type[BaseModel]], failing: set[int] | None = None) -> ExecutableGraph:
    """plan → review[i]: each item asks a person with the model ``response[0]``; the items
    in ``failing`` fail once after their answer."""
    g = Graph("reviews", state=S)

    @g.node()
    def plan(s: S) -> dict[str, Any]:
        return {"items": [0, 1]}

    @g.node(after=["plan"], map_over="items")
    async def review(s: S, ctx: NodeContext, item: int) -> dict[str, Any]:
        answer = await ctx.interrupt({"review": item}, response=response[0])
        if failing and item in failing:
            failing.discard(item)
            raise PermissionError(f"item {item} refused")
        return {"notes": [f"{item}:{answer.model_dump()}"]}

    return g.compile()


async def answer_all(rt: Runtime, run_id: str, value: dict[str, Any]) -> Any:
    return await rt.resume(run_id, answers={i.id: value for i in await rt.interrupts(run_id)})


async def test_a_replay_whose_code_no_longer_takes_a_recorded_answer_asks_again(rt: Runtime):
    run = await rt.start(reviews([Approval]), {})
    run = await answer_all(rt, run.id, {"approve": True})
    assert run.status == RunStatus.SUCCEEDED

    report = await rt.replay(run.id, reviews([Reasoned]))
    assert report.status == "interrupted"   # not failed on a ValidationError of the old answer
    asked = await rt.interrupts(report.run_id)
    assert sorted(i.node for i in asked) == ["review[0]", "review[1]"]
    assert all(i.payload["value"] == {"review": i.node == "review[1]"} for i in asked)
    assert all(report.node(n).reused_answers == () for n in ("review[0]", "review[1]"))

    await answer_all(rt, report.run_id, {"approve": False, "reason": "no"})
    again = await rt.replay_report(report.run_id)
    assert again.status == "succeeded"
    assert [n.verdict for n in again.nodes if n.node.startswith("review[")] == ["different", "different"]


async def test_a_replay_reuses_the_answers_its_code_still_takes(rt: Runtime):
    run = await rt.start(reviews([Approval]), {})
    run = await answer_all(rt, run.id, {"approve": True})
    asked = {i.node: i.id for i in await rt.interrupts(run.id, pending=False)}
    report = await rt.replay(run.id, reviews([Approval]))
    assert report.status == "succeeded" and report.same
    assert report.node("review[1]").reused_answers == (asked["review[1]"],)


async def test_a_continuation_after_the_response_model_changed_asks_again(rt: Runtime):
    response: list[type[BaseModel]] = [Approval]
    graph = reviews(response, failing={1})
    run = await rt.start(graph, {})
    failed = await answer_all(rt, run.id, {"approve": True})
    assert failed.status == RunStatus.FAILED and failed.error["node"] == "review[1]"

    response[0] = Reasoned   # the code changed before the failed run was continued
    continued = await rt.resume(failed.id)
    assert continued.status == RunStatus.INTERRUPTED
    [question] = await rt.interrupts(continued.id)
    assert question.node == "review[1]"
    done = await rt.resume(continued.id, {"approve": True, "reason": "checked"})
    assert done.status == RunStatus.SUCCEEDED
    state = await rt.state_at((await rt.history(done.id))[-1].id)
    assert state.notes == ["0:{'approve': True}", "1:{'approve': True, 'reason': 'checked'}"]


async def test_a_question_reads_back_as_asked_with_its_answer_model(rt: Runtime):
    run = await rt.start(reviews([Approval]), {})
    asked = sorted(await rt.interrupts(run.id), key=lambda i: i.node)
    assert [i.value for i in asked] == [{"review": 0}, {"review": 1}]
    assert {i.response_ref for i in asked} == {f"{__name__}:Approval"}
    assert all(i.response_schema["properties"] == {"approve": {"title": "Approve", "type": "boolean"}} for i in asked)
