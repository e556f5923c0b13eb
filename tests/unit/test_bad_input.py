"""Bad input to the Runtime's API is refused with an error that names the problem,
and nothing is written: NaN and infinities, fractional counts, unknown input fields,
patches that are not objects, and a resume that lost a race."""

from __future__ import annotations

import asyncio
import math

import pytest
from pydantic import BaseModel, ConfigDict

from runtime import Graph, InvalidAnswer, InvalidRequest, NodeContext, Runtime, RunStatus


class S(BaseModel):
    n: int = 0
    x: float = 0.0
    notes: list[str] = []


def one_node() -> Graph:
    g = Graph("g", state=S)
    g.add_node("a", lambda s: {"n": s.n + 1})
    return g


async def nothing_stored(rt: Runtime) -> bool:
    return await rt.runs() == []


@pytest.mark.parametrize("option, value", [
    ("deadline", math.nan), ("deadline", math.inf), ("deadline", -1.0), ("deadline", True),
    ("max_steps", 1.5), ("max_steps", 0), ("max_steps", math.nan),
    ("max_tokens", 2.5), ("max_cost", math.inf), ("max_cost", math.nan),
    ("max_concurrency", 0.5), ("max_concurrency", -2),
    # too large for a float, or for the store's integer column: refused, not a raw overflow
    pytest.param("deadline", 10**400, id="deadline-10**400"), pytest.param("max_cost", 10**400, id="max_cost-10**400"),
    ("max_concurrency", 2**31),
])
async def test_a_limit_that_is_not_a_positive_finite_number_is_refused(rt: Runtime, option, value):
    with pytest.raises(InvalidRequest, match=option):
        await rt.start(one_node(), {}, **{option: value})
    assert await nothing_stored(rt)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, float("1e400")])
async def test_an_input_holding_nan_or_infinity_is_refused_naming_the_field(rt: Runtime, value):
    with pytest.raises(InvalidRequest, match="x"):
        await rt.start(one_node(), {"x": value})
    assert await nothing_stored(rt)


async def test_an_input_with_an_unknown_field_is_refused_like_a_patch(rt: Runtime):
    with pytest.raises(InvalidRequest, match="unknown state field.*'colour'"):
        await rt.start(one_node(), {"n": 1, "colour": "red"})
    assert await nothing_stored(rt)


async def test_a_state_model_that_allows_extra_fields_accepts_them_in_the_input(rt: Runtime):
    class Open(BaseModel):
        model_config = ConfigDict(extra="allow")
        n: int = 0

    g = Graph("open", state=Open)
    g.add_node("a", lambda s: None)
    run = await rt.start(g, {"colour": "red"})
    assert run.status == RunStatus.SUCCEEDED and run.input["colour"] == "red"


async def test_an_input_that_is_not_an_object_is_refused(rt: Runtime):
    with pytest.raises(InvalidRequest, match="object of state fields"):
        await rt.start(one_node(), [1, 2])  # type: ignore[arg-type]
    assert await nothing_stored(rt)


@pytest.mark.parametrize("limit", [0, -1, 1.5])
async def test_listing_runs_refuses_a_limit_below_one(rt: Runtime, limit):
    with pytest.raises(InvalidRequest, match="limit"):
        await rt.runs(limit=limit)


async def first_checkpoint(rt: Runtime) -> tuple[str, str]:
    run = await rt.start(one_node(), {})
    return run.id, (await rt.history(run.id))[0].id


@pytest.mark.parametrize("patch", [[], [1, 2], "n=3", 7])
async def test_a_patch_that_is_not_an_object_is_refused_not_ignored(rt: Runtime, patch):
    run_id, cp = await first_checkpoint(rt)
    with pytest.raises(InvalidRequest, match="object of state fields"):
        await rt.fork(cp, patch=patch)
    assert [r.id for r in await rt.runs()] == [run_id]


@pytest.mark.parametrize("value", [math.nan, math.inf])
async def test_a_patch_holding_nan_or_infinity_is_refused(rt: Runtime, value):
    run_id, cp = await first_checkpoint(rt)
    with pytest.raises(InvalidRequest, match="x"):
        await rt.fork(cp, patch={"x": value})
    assert [r.id for r in await rt.runs()] == [run_id]


def approval() -> Graph:
    g = Graph("ask", state=S)

    @g.node()
    async def ask(state: S, ctx: NodeContext) -> dict:
        answer = await ctx.interrupt({"question": "go?"})
        return {"notes": [str(answer)]}

    return g


async def test_the_loser_of_two_simultaneous_answers_is_told_it_was_already_answered(rt: Runtime):
    run = await rt.start(approval(), {})
    assert run.status == RunStatus.INTERRUPTED
    first, second = await asyncio.gather(rt.resume(run.id, "yes"), rt.resume(run.id, "no"),
                                         return_exceptions=True)
    assert isinstance(first, type(run)) and first.status == RunStatus.SUCCEEDED
    assert isinstance(second, InvalidAnswer)
    assert "already answered" in str(second) and "by id" not in str(second)
    assert (await rt.get_run(run.id)).status == RunStatus.SUCCEEDED


async def test_answering_an_interrupt_by_id_twice_says_it_was_answered(rt: Runtime):
    run = await rt.start(approval(), {})
    [pending] = await rt.interrupts(run.id)
    await rt.resume(run.id, answers={pending.id: "yes"})
    with pytest.raises(InvalidAnswer, match="already answered"):
        await rt.resume(run.id, answers={pending.id: "again"})


async def test_an_answer_holding_nan_is_refused_and_the_run_stays_paused(rt: Runtime):
    run = await rt.start(approval(), {})
    with pytest.raises(InvalidAnswer, match="no JSON form"):
        await rt.resume(run.id, {"amount": math.nan})
    assert (await rt.get_run(run.id)).status == RunStatus.INTERRUPTED


async def test_an_input_nested_deeper_than_the_store_can_read_back_is_refused(rt: Runtime):
    g = Graph("open", state=Open)
    g.add_node("a", lambda s: None)
    deep: object = "leaf"
    for _ in range(150):
        deep = [deep]
    with pytest.raises(InvalidRequest, match="nested more than 120 levels"):
        await rt.start(g, {"deep": deep})
    assert await nothing_stored(rt)


async def test_an_input_nested_to_the_limit_is_stored_and_read_back(rt: Runtime):
    g = Graph("open", state=Open)
    g.add_node("a", lambda s: None)
    deep: object = "leaf"
    for _ in range(118):
        deep = [deep]
    run = await rt.start(g, {"deep": deep})
    assert (await rt.state_at((await rt.history(run.id))[-1].id)).deep == deep  # type: ignore[attr-defined]
    other = Runtime(graphs=[g])   # and it travels: export, import elsewhere
    await other.import_thread(await rt.export_thread(run.id))
    assert (await other.state_at((await other.history(run.id))[-1].id)).deep == deep  # type: ignore[attr-defined]
    other.close()


class Open(BaseModel):
    model_config = ConfigDict(extra="allow")
    n: int = 0


async def test_nan_in_a_field_of_any_type_is_refused_not_stored_as_null(rt: Runtime):
    class Loose(BaseModel):
        v: object = None

    g = Graph("loose", state=Loose)
    g.add_node("a", lambda s: None)
    for value in (math.nan, [1, math.inf]):
        with pytest.raises(InvalidRequest, match="no JSON form"):
            await rt.start(g, {"v": value})
    assert await nothing_stored(rt)


async def test_an_unknown_start_option_is_named(rt: Runtime):
    with pytest.raises(InvalidRequest, match="unknown option.*bogus"):
        await rt.start(one_node(), {}, bogus=1)


@pytest.mark.parametrize("graph", ["pkg:graph", 5, None])
async def test_a_graph_argument_that_is_not_a_graph_is_refused(rt: Runtime, graph):
    with pytest.raises(InvalidRequest, match="expected a Graph"):
        await rt.start(graph, {})  # type: ignore[arg-type]


async def test_listing_runs_refuses_a_limit_too_large_to_store(rt: Runtime):
    with pytest.raises(InvalidRequest, match="limit"):
        await rt.runs(limit=10**30)


async def test_mocks_holding_nan_are_refused(rt: Runtime):
    run_id, cp = await first_checkpoint(rt)
    with pytest.raises(InvalidRequest, match="no JSON form"):
        await rt.fork(cp, mocks={"pay": math.nan})


async def test_a_run_or_checkpoint_record_given_for_its_id_is_refused_naming_the_argument(rt: Runtime):
    run = await rt.start(one_node(), {})
    cp = (await rt.history(run.id))[-1]
    by_run = [rt.get_run, rt.history, rt.events, rt.attempts, rt.pending_writes, rt.interrupts, rt.export_thread,
              rt.replay, rt.resume, rt.cancel, rt.compensate, rt.replay_report]
    for method in by_run:
        with pytest.raises(InvalidRequest, match=r"run(_or_checkpoint)?_id must be a string id, got Run; pass its \.id"):
            await method(run)  # type: ignore[operator]
    for call in (lambda: rt.state_at(cp), lambda: rt.fork(cp), lambda: rt.diff(cp, cp.id),  # type: ignore[arg-type]
                 lambda: rt.diff(cp.id, cp)):  # type: ignore[arg-type]
        with pytest.raises(InvalidRequest, match=r"checkpoint_id must be a string id, got Checkpoint; pass its \.id"):
            await call()
    assert [r.id for r in await rt.runs()] == [run.id]   # nothing was written


async def test_a_resume_given_an_answer_and_answers_is_refused_and_the_run_still_waits(rt: Runtime):
    run = await rt.start(approval(), {})
    [pending] = await rt.interrupts(run.id)
    events_before = len(await rt.events(run.id))
    with pytest.raises(InvalidRequest, match="not both"):
        await rt.resume(run.id, "from answer", answers={pending.id: "from answers"})
    assert (await rt.get_run(run.id)).status == RunStatus.INTERRUPTED
    assert len(await rt.events(run.id)) == events_before
    assert [i.id for i in await rt.interrupts(run.id)] == [pending.id]


@pytest.mark.parametrize("answers", [[1], ["int_x"], "int_x", {1: "yes"}])
async def test_answers_that_are_not_an_object_of_ids_are_refused_naming_the_argument(rt: Runtime, answers):
    run = await rt.start(approval(), {})
    events_before = len(await rt.events(run.id))
    with pytest.raises(InvalidRequest, match=r"answers must be an object of \{interrupt id: answer\}"):
        await rt.resume(run.id, answers=answers)
    assert (await rt.get_run(run.id)).status == RunStatus.INTERRUPTED
    assert len(await rt.events(run.id)) == events_before


@pytest.mark.parametrize("options, named", [
    ({"reason": 5}, "reason"), ({"reason": ""}, "reason"), ({"reason": "x" * 501}, "reason"),
    ({"wait": math.nan}, "wait"), ({"wait": -1}, "wait"), ({"wait": "soon"}, "wait"),
])
async def test_a_cancel_with_a_bad_reason_or_wait_is_refused_and_the_run_still_waits(rt: Runtime, options, named):
    run = await rt.start(approval(), {})
    events_before = len(await rt.events(run.id))
    with pytest.raises(InvalidRequest, match=named):
        await rt.cancel(run.id, **options)
    assert (await rt.get_run(run.id)).status == RunStatus.INTERRUPTED
    assert len(await rt.events(run.id)) == events_before
    cancelled = await rt.cancel(run.id, "x" * 500)
    assert cancelled.status == RunStatus.CANCELLED and cancelled.error["message"] == "x" * 500


@pytest.mark.parametrize("after_seq", ["3", -1, 1.5, True, 2**63])
async def test_reading_events_after_a_seq_that_is_not_a_whole_number_is_refused_naming_it(rt: Runtime, after_seq):
    run = await rt.start(one_node(), {})
    with pytest.raises(InvalidRequest, match="after_seq"):
        await rt.events(run.id, after_seq)
    assert [e.seq for e in await rt.events(run.id, 2)][0] == 3


@pytest.mark.parametrize("pending", ["no", 0, None])
async def test_listing_interrupts_with_pending_not_a_bool_is_refused_not_read_as_true(rt: Runtime, pending):
    run = await rt.start(approval(), {})
    with pytest.raises(InvalidRequest, match="pending must be True or False"):
        await rt.interrupts(run.id, pending=pending)
    assert len(await rt.interrupts(run.id, pending=False)) == 1


@pytest.mark.parametrize("value", [0, 1.5, True, 2**31])
def test_a_runtime_refuses_a_max_concurrency_its_runs_could_not_store(value):
    # every run records the Runtime's bound: one past the store's 32-bit column failed each start
    with pytest.raises(InvalidRequest, match="max_concurrency must be a whole number from 1 to 2147483647"):
        Runtime(max_concurrency=value)


class Choice(BaseModel):
    approve: bool


def two_questions() -> Graph:
    g = Graph("two_questions", state=S)

    @g.node()
    def left(state: S, ctx: NodeContext) -> dict:
        return {"n": int(ctx.interrupt({"q": "left?"}, response=Choice).approve)}

    @g.node()
    def right(state: S, ctx: NodeContext) -> dict:
        return {"x": float(ctx.interrupt({"q": "right?"}, response=Choice).approve)}

    return g


async def test_answers_that_do_not_fit_are_all_named_and_the_run_still_waits(rt: Runtime):
    run = await rt.start(two_questions(), {})
    assert run.status == RunStatus.INTERRUPTED
    left, right = sorted(await rt.interrupts(run.id), key=lambda i: i.node)
    with pytest.raises(InvalidAnswer) as refused:
        await rt.resume(run.id, answers={left.id: {"approve": "perhaps"}, right.id: {"agree": True}})
    said = str(refused.value)
    assert said.startswith("2 answers do not fit") and left.id in said and right.id in said
    assert (await rt.get_run(run.id)).status == RunStatus.INTERRUPTED
    assert all(i.status.value == "pending" for i in await rt.interrupts(run.id))
    # one bad answer of two: named alone, as before
    with pytest.raises(InvalidAnswer, match=f"answer to interrupt {right.id} is invalid") as one:
        await rt.resume(run.id, answers={left.id: {"approve": True}, right.id: {"agree": True}})
    assert left.id not in str(one.value)
    done = await rt.resume(run.id, answers={left.id: {"approve": True}, right.id: {"approve": False}})
    assert done.status == RunStatus.SUCCEEDED
