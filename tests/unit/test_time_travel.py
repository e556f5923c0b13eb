"""Time travel on every store: history you can navigate, forks with validated patches
and mocked effects, replays with divergence reports, compensation, export/import."""

from __future__ import annotations

import asyncio
from typing import Annotated

import pytest
from pydantic import BaseModel

from runtime import (
    ErrorClass,
    Graph,
    InvalidAnswer,
    InvalidRequest,
    MemoryStore,
    NodeContext,
    NotFound,
    RunKind,
    RunStatus,
    Runtime,
    SqlStore,
    append,
)
from runtime import ExecutableGraph
from runtime import EffectStatus, InterruptKind
from runtime.history.lineage import unused_mocks


class Order(BaseModel):
    order: int = 1
    amount: float = 10.0
    receipt: str = ""
    log: Annotated[list[str], append] = []
    emailed: bool = False


class Approval(BaseModel):
    approve: bool


class World:
    """The outside world: what effects and compensations did to it."""

    def __init__(self) -> None:
        self.charges: list[str] = []    # idempotency keys of charges made
        self.refunds: list[str] = []
        self.emails: list[str] = []


def shop(world: World, *, fee: float = 0.0, note: str = "looked up") -> ExecutableGraph:
    """lookup → charge (effect) → email (effect) → done; ``fee``/``note`` model a code change."""
    g = Graph("shop", state=Order)

    @g.node()
    def lookup(s: Order) -> dict:
        return {"log": [note]}

    @g.node(after=["lookup"])
    async def charge(s: Order, ctx: NodeContext) -> dict:
        def pay(info):
            world.charges.append(info.key)
            return f"rcpt-{s.order}-{len(world.charges)}"

        def refund(info):
            world.refunds.append(info.result)

        receipt = await ctx.effect("payments.charge", pay, request={"order": s.order, "amount": s.amount + fee},
                                   compensate=refund)
        return {"receipt": receipt, "log": ["charged"]}

    @g.node(after=["charge"])
    async def email(s: Order, ctx: NodeContext) -> dict:
        def send():
            world.emails.append(s.receipt)
            return "sent"

        await ctx.effect("mail.send", send, request={"to": s.order, "receipt": s.receipt})
        return {"emailed": True}

    @g.node(after=["email"])
    def done(s: Order) -> dict:
        return {"log": ["done"]}

    return g.compile()


async def state(rt: Runtime, run_id: str) -> Order:
    return await rt.state_at((await rt.history(run_id))[-1].id)  # type: ignore[return-value]


async def checkpoint_after(rt: Runtime, run_id: str, node: str) -> str:
    return next(c.id for c in await rt.history(run_id) if node in c.nodes)


async def recorded_run(rt: Runtime, world: World, **kw) -> str:
    run = await rt.start(shop(world, **kw), {"order": 7, "amount": 42.0})
    assert run.status == RunStatus.SUCCEEDED
    assert len(world.charges) == 1 and len(world.emails) == 1
    return run.id


def count_rows(rt: Runtime) -> tuple[int, int]:
    runs = rt.store.list_runs(limit=10_000)
    return len(runs), sum(len(rt.store.checkpoints(r.id)) for r in runs)


# --------------------------------------------------------------------------- history

async def test_checkpoint_view_shows_folded_nodes_pending_writes_and_next_ready(rt: Runtime):
    world = World()
    run_id = await recorded_run(rt, world)
    cps = await rt.history(run_id)
    assert [c.nodes for c in cps] == [(), ("lookup",), ("charge",), ("email",), ("done",)]
    view = await rt.checkpoint(cps[1].id)
    assert view.ready == ["charge"]
    assert [(w.node, w.value["receipt"]) for w in view.pending_writes] == [("charge", "rcpt-7-1")]
    assert view.state["log"] == ["looked up"]
    assert (await rt.checkpoint(cps[-1].id)).ready == []
    assert view.to_json()["ready"] == ["charge"]


async def test_diff_between_checkpoints_is_field_level_and_nested(rt: Runtime):
    world = World()
    run_id = await recorded_run(rt, world)
    cps = await rt.history(run_id)
    changes = {c.dotted(): (c.op, c.old, c.new) for c in await rt.diff(cps[1].id, cps[2].id)}
    assert changes == {"receipt": ("changed", "", "rcpt-7-1"), "log[1]": ("added", None, "charged")}
    assert await rt.diff(cps[2].id, cps[2].id) == []
    back = {c.dotted(): c.op for c in await rt.diff(cps[2].id, cps[1].id)}
    assert back == {"receipt": "changed", "log[1]": "removed"}


async def test_diff_across_sibling_branches_at_the_same_step(rt: Runtime):
    world = World()
    run_id = await recorded_run(rt, world)
    base = await checkpoint_after(rt, run_id, "lookup")
    a = await rt.fork(base, {"amount": 1.0}, mocks={"payments.charge": "rcpt-a"})
    b = await rt.fork(base, {"amount": 2.0}, mocks={"payments.charge": "rcpt-b"})
    assert a.thread_id == b.thread_id == run_id
    cp_a = await checkpoint_after(rt, a.id, "charge")
    cp_b = await checkpoint_after(rt, b.id, "charge")
    changes = {c.dotted(): (c.old, c.new) for c in await rt.diff(cp_a, cp_b)}
    assert changes == {"amount": (1.0, 2.0), "receipt": ("rcpt-a", "rcpt-b")}


# --------------------------------------------------------------------------- fork

async def test_fork_mid_run_executes_no_effect_and_reuses_recorded_results(rt: Runtime):
    world = World()
    run_id = await recorded_run(rt, world)
    base = await checkpoint_after(rt, run_id, "lookup")
    branch = await rt.fork(base)
    assert branch.status == RunStatus.SUCCEEDED
    assert branch.kind == RunKind.FORK and branch.parent_run_id == run_id and branch.base_checkpoint_id == base
    assert len(world.charges) == 1 and len(world.emails) == 1  # nothing reached the outside world
    assert (await state(rt, branch.id)).receipt == "rcpt-7-1"
    mocked = rt.store.journal([branch.id])
    assert [e.status for e in mocked] == [EffectStatus.MOCKED, EffectStatus.MOCKED]
    source = {e.key for e in rt.store.journal([run_id])}
    assert all(e.source == f"run:{run_id}" and e.key in source for e in mocked)  # linked to the recording
    attempts = {a.node for a in await rt.attempts(branch.id)}
    assert attempts == {"charge", "email", "done"}  # lookup finished before the base: not re-run
    assert (await rt.get_run(run_id)).status == RunStatus.SUCCEEDED


async def test_patched_fork_pauses_on_unrecorded_effect_and_a_mock_answer_completes_it(rt: Runtime):
    world = World()
    run_id = await recorded_run(rt, world)
    base = await checkpoint_after(rt, run_id, "lookup")
    branch = await rt.fork(base, patch={"amount": 5.0})
    assert branch.status == RunStatus.INTERRUPTED
    [question] = await rt.interrupts(branch.id)
    assert question.kind == InterruptKind.UNRECORDED and question.node == "charge"
    value = question.payload["value"]
    assert value["request"] == {"order": 7, "amount": 5.0}
    assert value["recorded_request"] == {"order": 7, "amount": 42.0}
    with pytest.raises(InvalidAnswer, match="mock"):
        await rt.resume(branch.id, {"action": "maybe"})
    branch = await rt.resume(branch.id, {"action": "mock", "result": "rcpt-fake"})
    # the email's request now differs too (another receipt): a second question
    assert branch.status == RunStatus.INTERRUPTED
    branch = await rt.resume(branch.id, {"action": "mock", "result": "sent"})
    assert branch.status == RunStatus.SUCCEEDED
    final = await state(rt, branch.id)
    assert final.amount == 5.0 and final.receipt == "rcpt-fake" and final.emailed
    assert len(world.charges) == 1 and len(world.emails) == 1
    history = await rt.history(branch.id)
    assert [c.source for c in history[:2]] == ["fork", "patch"]
    assert [(c.dotted(), c.new) for c in await rt.diff(history[0].id, history[1].id)] == [("amount", 5.0)]


async def test_mocks_pre_answer_unrecorded_effects(rt: Runtime):
    world = World()
    run_id = await recorded_run(rt, world)
    base = await checkpoint_after(rt, run_id, "lookup")
    branch = await rt.fork(base, {"amount": 5.0}, mocks={"payments.charge": "rcpt-m", "mail.send": "ok"})
    assert branch.status == RunStatus.SUCCEEDED
    assert (await state(rt, branch.id)).receipt == "rcpt-m"
    assert {e.source for e in rt.store.journal([branch.id])} == {"mocks"}
    assert len(world.charges) == 1


async def test_mocks_no_effect_called_are_named_once_the_branch_has_ended(rt: Runtime):
    world = World()
    run_id = await recorded_run(rt, world)
    base = await checkpoint_after(rt, run_id, "lookup")
    mocks = {"payments.charge": "rcpt-m", "mail.send": "ok", "mail.sned": "typo"}
    branch = await rt.fork(base, {"amount": 5.0}, mocks=mocks)
    assert branch.status == RunStatus.SUCCEEDED
    assert unused_mocks(rt.store, branch) == ["mail.sned"]
    # the charge mocked, then paused on the email, which no mock answers: it may call the others yet
    paused = await rt.fork(base, {"amount": 6.0}, mocks={"payments.charge": "rcpt-m", "mail.sned": "typo"})
    assert paused.status == RunStatus.INTERRUPTED and unused_mocks(rt.store, paused) == []
    done = await rt.resume(paused.id, {"action": "live"})
    assert done.status == RunStatus.SUCCEEDED
    assert unused_mocks(rt.store, done) == ["mail.sned"]   # the charge was served before the pause
    assert unused_mocks(rt.store, await rt.get_run(run_id)) == []
    # a branch that failed, then continued: what it served counts for its continuation
    failed = await rt.fork(base, {"amount": 7.0}, mocks={"payments.charge": "rcpt-m", "mail.sned": "typo"})
    failed = await rt.resume(failed.id, {"action": "abort"})
    assert failed.status == RunStatus.FAILED and unused_mocks(rt.store, failed) == ["mail.sned"]
    cont = await rt.resume(failed.id)
    cont = await rt.resume(cont.id, {"action": "live"})
    assert cont.kind == RunKind.CONTINUATION and cont.status == RunStatus.SUCCEEDED
    assert unused_mocks(rt.store, cont) == ["mail.sned"]


async def test_allow_live_runs_the_effect_once_with_a_branch_key(rt: Runtime):
    world = World()
    run_id = await recorded_run(rt, world)
    base = await checkpoint_after(rt, run_id, "lookup")
    branch = await rt.fork(base, {"amount": 5.0}, mocks={"mail.send": "ok"})
    branch = await rt.resume(branch.id, {"action": "live"})
    assert branch.status == RunStatus.SUCCEEDED
    assert len(world.charges) == 2 and world.charges[1] != world.charges[0]
    assert [e.status for e in rt.store.journal([branch.id])][:2] == [EffectStatus.STARTED, EffectStatus.SUCCEEDED]


async def test_live_fork_executes_effects_with_new_keys(rt: Runtime):
    world = World()
    run_id = await recorded_run(rt, world)
    base = await checkpoint_after(rt, run_id, "lookup")
    branch = await rt.fork(base, effects="live")
    assert branch.status == RunStatus.SUCCEEDED
    assert len(world.charges) == 2 and len(world.emails) == 2
    assert world.charges[0] != world.charges[1]  # branch-scoped idempotency keys


async def test_abort_answer_fails_the_branch_with_unrecorded_effect(rt: Runtime):
    world = World()
    run_id = await recorded_run(rt, world)
    branch = await rt.fork(await checkpoint_after(rt, run_id, "lookup"), {"amount": 1.0})
    branch = await rt.resume(branch.id, {"action": "abort"})
    assert branch.status == RunStatus.FAILED
    assert branch.error["class"] == ErrorClass.UNRECORDED_EFFECT
    assert len(world.charges) == 1


@pytest.mark.parametrize("patch, problem", [
    ({"colour": "red"}, "unknown state field.*'colour'"),
    ({"amount": "lots"}, "field 'amount'.*valid number"),
    ({"log": 3}, "field 'log'"),
    ([1, 2], "object of state fields"),
])
async def test_invalid_patch_is_rejected_and_nothing_is_created(rt: Runtime, patch, problem):
    world = World()
    run_id = await recorded_run(rt, world)
    base = await checkpoint_after(rt, run_id, "lookup")
    before = count_rows(rt)
    with pytest.raises(InvalidRequest, match=problem):
        await rt.fork(base, patch=patch)
    assert count_rows(rt) == before


@pytest.mark.parametrize("kwargs, problem", [
    ({"effects": "sometimes"}, "effects must be 'mock' or 'live'"),
    ({"mocks": ["x"]}, "mocks must be an object"),
    ({"mocks": {"mail.send": "ok"}, "effects": "live"}, "mocks only apply when effects are mocked"),
])
async def test_bad_fork_options_are_rejected_before_anything_is_written(rt: Runtime, kwargs, problem):
    world = World()
    run_id = await recorded_run(rt, world)
    before = count_rows(rt)
    with pytest.raises(InvalidRequest, match=problem):
        await rt.fork(await checkpoint_after(rt, run_id, "lookup"), **kwargs)
    with pytest.raises(NotFound):
        await rt.fork("cp_nope")
    assert count_rows(rt) == before


async def test_fork_of_a_fork_is_served_from_the_whole_source_lineage(rt: Runtime):
    world = World()
    run_id = await recorded_run(rt, world)
    first = await rt.fork(await checkpoint_after(rt, run_id, "lookup"), {"amount": 5.0},
                          mocks={"payments.charge": "rcpt-5", "mail.send": "ok"})
    # a fork of the branch at its patch checkpoint: the branch's MOCKED records serve it
    patched = (await rt.history(first.id))[1]
    assert patched.source == "patch"
    second = await rt.fork(patched.id)
    assert second.status == RunStatus.SUCCEEDED
    assert (await state(rt, second.id)).receipt == "rcpt-5"
    assert {e.source for e in rt.store.journal([second.id])} == {f"run:{first.id}"}
    assert len(world.charges) == 1


def ask_graph() -> ExecutableGraph:
    g = Graph("ask", state=Order)

    @g.node()
    async def confirm(s: Order, ctx: NodeContext) -> dict:
        answer = await ctx.interrupt({"q": "email?"}, response=Approval)
        return {"emailed": answer.approve}

    return g.compile()


async def test_forking_from_a_paused_run_asks_the_question_again(rt: Runtime):
    run = await rt.start(ask_graph(), {})
    run = await rt.resume(run.id, {"approve": True})
    branch = await rt.fork((await rt.history(run.id))[0].id)
    assert branch.status == RunStatus.INTERRUPTED  # a person decides again in a what-if branch


# --------------------------------------------------------------------------- replay

async def test_replay_of_unchanged_code_reports_same_everywhere_and_executes_no_effect(rt: Runtime):
    world = World()
    run_id = await recorded_run(rt, world)
    report = await rt.replay(run_id)
    assert report.same, report.to_json()
    assert [(n.node, n.verdict) for n in report.nodes] == [
        ("lookup", "same"), ("charge", "same"), ("email", "same"), ("done", "same")]
    assert report.run.kind == RunKind.REPLAY and report.run.parent_run_id == run_id
    assert report.status == "succeeded"
    assert len(world.charges) == 1 and len(world.emails) == 1
    assert all(e.status == EffectStatus.MOCKED for e in rt.store.journal([report.run_id]))


async def test_replay_against_modified_code_reports_changed_writes_and_effect_requests(rt: Runtime):
    world = World()
    run_id = await recorded_run(rt, world)
    changed = shop(world, fee=1.5, note="looked up v2")
    report = await rt.replay(run_id, graph=changed)
    assert not report.same
    lookup, charge = report.node("lookup"), report.node("charge")
    assert lookup.verdict == "different"
    assert [(c.dotted(), c.op, c.old, c.new) for c in lookup.write_changes] == [
        ("log[0]", "changed", "looked up", "looked up v2")]
    assert charge.verdict == "different"
    [eff] = charge.effects
    assert (eff.name, eff.verdict, eff.recorded_request, eff.request) == (
        "payments.charge", "changed", {"order": 7, "amount": 42.0}, {"order": 7, "amount": 43.5})
    assert [(c.dotted(), c.old, c.new) for c in eff.changes] == [("amount", 42.0, 43.5)]
    assert report.node("done").verdict == "same"
    assert len(world.charges) == 1  # still nothing executed
    assert report.to_json()["nodes"][1]["effects"][0]["diff"] == [
        {"path": ["amount"], "op": "changed", "old": 42.0, "new": 43.5}]


async def test_replaying_candidate_code_leaves_the_recorded_run_on_its_own_code(rt: Runtime):
    """Candidate code of the same structure has the same version: replaying it must not
    make it the code the recorded run resumes, forks and replays with."""
    world = World()
    run_id = await recorded_run(rt, world)
    assert not (await rt.replay(run_id, graph=shop(world, fee=1.5))).same
    assert (await rt.replay(run_id)).same                        # no graph given: the recording's code
    fork = await rt.fork((await rt.history(run_id))[0].id)        # mocked: served, nothing asked
    assert fork.status == RunStatus.SUCCEEDED and (await state(rt, fork.id)).receipt == "rcpt-7-1"
    other = Runtime(store=rt.store)                              # another process: the code stored for the version
    try:
        other.register(shop(world))
        assert (await other.replay(run_id)).same
    finally:
        other.close()
    assert len(world.charges) == 1


async def test_replay_reports_new_and_missing_effects_and_nodes(rt: Runtime):
    world = World()
    run_id = await recorded_run(rt, world)
    g = Graph("shop", state=Order)

    @g.node()
    def lookup(s: Order) -> dict:
        return {"log": ["looked up"]}

    @g.node(after=["lookup"])
    async def charge(s: Order, ctx: NodeContext) -> dict:
        r = await ctx.effect("payments.charge", lambda: "x", request={"order": s.order, "amount": s.amount})
        await ctx.effect("fraud.check", lambda: "x", request={"order": s.order})
        return {"receipt": r, "log": ["charged"]}

    @g.node(after=["charge"])
    def audit(s: Order) -> dict:
        return {}

    report = await rt.replay(run_id, graph=g, mocks={"fraud.check": "ok"})
    verdicts = {n.node: n.verdict for n in report.nodes}
    assert verdicts == {"lookup": "same", "charge": "different", "audit": "new", "email": "missing",
                        "done": "missing"}
    assert {(e.name, e.verdict) for e in report.node("charge").effects} == {
        ("payments.charge", "same"), ("fraud.check", "new")}


async def test_replay_from_a_checkpoint_inherits_earlier_nodes(rt: Runtime):
    world = World()
    run_id = await recorded_run(rt, world)
    report = await rt.replay(await checkpoint_after(rt, run_id, "charge"))
    assert report.same
    assert {n.node: n.verdict for n in report.nodes} == {
        "lookup": "inherited", "charge": "inherited", "email": "same", "done": "same"}
    assert len(world.emails) == 1


async def test_replay_reuses_recorded_answers_and_says_so(rt: Runtime):
    run = await rt.start(ask_graph(), {})
    [question] = await rt.interrupts(run.id)
    run = await rt.resume(run.id, {"approve": True})
    report = await rt.replay(run.id)
    assert report.status == "succeeded" and report.same
    assert report.node("confirm").reused_answers == (question.id,)


async def test_replay_pauses_on_an_effect_with_no_record_and_can_be_resumed(rt: Runtime):
    world = World()
    run_id = await recorded_run(rt, world)
    g = Graph("shop", state=Order)

    @g.node()
    async def lookup(s: Order, ctx: NodeContext) -> dict:
        await ctx.effect("crm.fetch", lambda: "x", request={"order": s.order})
        return {"log": ["looked up"]}

    report = await rt.replay(run_id, graph=g)
    assert report.status == "interrupted" and report.node("lookup").verdict == "paused"
    assert [(e.name, e.verdict) for e in report.node("lookup").effects] == [("crm.fetch", "new")]
    await rt.resume(report.run_id, {"action": "mock", "result": {"crm": 1}})
    again = await rt.replay_report(report.run_id)
    assert again.status == "succeeded" and again.node("lookup").verdict == "different"


async def test_a_node_a_continuation_finished_is_reported_without_its_earlier_error(rt: Runtime):
    broken = {"on": True}
    g = Graph("flaky", state=Order)

    @g.node()
    def step(s: Order) -> dict:
        if broken["on"]:
            raise ValueError("not yet")
        return {"log": ["done"]}

    failed = await rt.start(g, {})
    assert failed.status == RunStatus.FAILED
    broken["on"] = False
    finished = await rt.resume(failed.id)
    report = await rt.replay(finished.id)
    assert report.same
    # the recording's outcome of ``step`` is its success: the failure before it is not its error
    assert (report.node("step").recorded_status, report.node("step").recorded_error) == ("succeeded", None)


async def test_a_replay_with_another_graph_is_refused_before_anything_is_written(rt: Runtime):
    world = World()
    run_id = await recorded_run(rt, world)
    other = Graph("not-the-shop", state=Order)

    @other.node()
    async def anything(s: Order) -> dict:
        return {}

    before = [r.id for r in rt.store.list_runs()]
    with pytest.raises(InvalidRequest, match=r"ran graph 'shop'; a replay runs that graph .* not 'not-the-shop'"):
        await rt.replay(run_id, graph=other.compile())
    assert [r.id for r in rt.store.list_runs()] == before


async def test_replay_of_an_unknown_id_is_refused(rt: Runtime):
    with pytest.raises(NotFound, match="no run or checkpoint"):
        await rt.replay("nothing-here")


async def test_a_run_still_under_way_is_not_replayed_by_its_id_or_a_checkpoints(rt: Runtime):
    """A replay compares with the run's record, which is not complete while it runs:
    refused however the run is named, and nothing is created."""
    release = asyncio.Event()
    g = Graph("slow", state=Order)
    g.add_node("first", lambda s: {"log": ["first"]})

    async def wait(s: Order) -> dict:
        await release.wait()
        return {"log": ["waited"]}

    g.add_node("wait", wait, after=["first"])
    task = asyncio.create_task(rt.start(g, {}))
    try:
        for _ in range(500):   # until ``first``'s checkpoint is in the store
            runs = await rt.runs()
            if runs and len(await rt.history(runs[0].id)) > 1:
                break
            await asyncio.sleep(0.01)
        run = runs[0]
        for target in (run.id, (await rt.history(run.id))[-1].id):
            with pytest.raises(InvalidRequest, match=f"run {run.id} is running; replay it once it has stopped"):
                await asyncio.wait_for(rt.replay(target), 10)   # a replay let through would wait too
        assert [r.id for r in await rt.runs()] == [run.id]
    finally:
        release.set()
        assert (await task).status == RunStatus.SUCCEEDED
    assert (await rt.replay(run.id)).same


async def test_the_report_of_a_run_that_is_not_a_replay_is_refused(rt: Runtime):
    run_id = await recorded_run(rt, World())
    fork = await rt.fork((await rt.history(run_id))[1].id)
    for not_a_replay in (run_id, fork.id):   # not a report comparing the run with itself
        with pytest.raises(NotFound, match=f"run {not_a_replay} is not a replay"):
            await rt.replay_report(not_a_replay)
    report = await rt.replay(run_id)
    assert (await rt.replay_report(report.run_id)).same


# --------------------------------------------------------------------------- compensation

def ledger_graph(log: list[str]) -> ExecutableGraph:
    g = Graph("ledger", state=Order)

    def step(name: str, after: list[str], fail: bool = False):
        @g.node(name=name, after=after)
        async def run(s: Order, ctx: NodeContext) -> dict:
            await ctx.effect(f"book.{name}", lambda: log.append(f"do {name}") or name, request={"n": name},
                             compensate=lambda info: log.append(f"undo {info.result}"))
            if fail:
                raise PermissionError("ledger closed")
            return {"log": [name]}

    step("a", [])
    step("b", ["a"])
    step("c", ["b"], fail=True)
    return g.compile()


async def test_compensation_undoes_live_effects_newest_first_once(rt: Runtime):
    log: list[str] = []
    run = await rt.start(ledger_graph(log), {})
    assert run.status == RunStatus.FAILED
    report = await rt.compensate(run.id)
    assert report.complete
    assert log == ["do a", "do b", "do c", "undo c", "undo b", "undo a"]
    again = await rt.compensate(run.id)
    assert again.complete and {s.status for s in again.steps} == {"already"}
    assert log.count("undo a") == 1
    statuses = [e.status for e in rt.store.journal([run.id]) if e.name == "book.a"]
    assert statuses == [EffectStatus.STARTED, EffectStatus.SUCCEEDED, EffectStatus.COMPENSATING,
                        EffectStatus.COMPENSATED]
    with pytest.raises(InvalidRequest, match="compensated"):
        await rt.resume(run.id)  # its effects were undone: continuing it would be wrong


async def test_compensation_policy_on_failure_runs_by_itself(rt: Runtime):
    log: list[str] = []
    run = await rt.start(ledger_graph(log), {}, compensate_on=["failed"])
    assert run.status == RunStatus.FAILED
    assert log[-3:] == ["undo c", "undo b", "undo a"]
    with pytest.raises(InvalidRequest, match="compensate_on"):
        await rt.start(ledger_graph(log), {}, compensate_on=["succeeded"])


async def test_mocked_effects_are_never_compensated(rt: Runtime):
    log: list[str] = []
    run = await rt.start(ledger_graph(log), {})
    branch = await rt.fork((await rt.history(run.id))[0].id)
    assert branch.status == RunStatus.FAILED  # same failure, every effect served from the journal
    report = await rt.compensate(branch.id)
    assert report.steps == [] and log == ["do a", "do b", "do c"]


async def test_compensating_a_paused_or_running_run_is_refused(rt: Runtime):
    g = Graph("ask", state=Order)

    @g.node()
    async def confirm(s: Order, ctx: NodeContext) -> dict:
        await ctx.interrupt({"q": "?"})
        return {}

    run = await rt.start(g, {})
    with pytest.raises(InvalidRequest, match="only an ended run"):
        await rt.compensate(run.id)


# --------------------------------------------------------------------------- export / import

class Exploding(World):
    def __getattribute__(self, name: str):
        if name in ("charges", "emails"):
            raise AssertionError("the imported thread reached the outside world")
        return super().__getattribute__(name)


async def test_export_import_reproduces_history_and_replays_without_the_world(rt: Runtime, tmp_path):
    world = World()
    run_id = await recorded_run(rt, world)
    await rt.fork(await checkpoint_after(rt, run_id, "lookup"), {"amount": 3.0},
                  mocks={"payments.charge": "r3", "mail.send": "ok"})
    doc = await rt.export_thread(run_id)
    assert doc["format"] == "shadow-harness/thread" and doc["version"] == 1 and len(doc["runs"]) == 2
    import json
    doc = json.loads(json.dumps(doc))  # it is plain JSON
    other = Runtime(SqlStore(f"sqlite:///{tmp_path / 'elsewhere.db'}"), graphs=[shop(Exploding())])
    try:
        imported = await other.import_thread(doc)
        assert [r.id for r in imported] == [r["run"]["id"] for r in doc["runs"]]
        for r in imported:
            assert await other.history(r.id) == await rt.history(r.id)
            for cp in await rt.history(r.id):
                assert await other.state_at(cp.id) == await rt.state_at(cp.id)
            assert await other.events(r.id) == await rt.events(r.id)
            assert other.store.journal([r.id]) == rt.store.journal([r.id])
        report = await other.replay(run_id)
        assert report.same and report.status == "succeeded"
        with pytest.raises(InvalidRequest, match="already exists"):
            await other.import_thread(doc)
    finally:
        other.close()


@pytest.mark.parametrize("doc, problem", [
    ({"format": "other"}, "not an exported thread"),
    ({"format": "shadow-harness/thread", "version": 99, "runs": []}, "version 99"),
    ({"format": "shadow-harness/thread", "version": 1, "runs": [{"run": {"id": "x"}}]}, r"runs\[0\].run"),
])
async def test_import_rejects_bad_documents_and_writes_nothing(doc, problem):
    rt = Runtime(MemoryStore())
    with pytest.raises(InvalidRequest, match=problem):
        await rt.import_thread(doc)
    assert rt.store.list_runs() == []


def charge_then_fail(undo) -> ExecutableGraph:
    """One node: a charge that registers ``undo``, then a failure."""
    g = Graph("one", state=Order)

    @g.node()
    async def a(s: Order, ctx: NodeContext) -> dict:
        await ctx.effect("charge", lambda: "r", compensate=undo)
        raise PermissionError("closed")

    return g.compile()


async def test_a_second_caller_cannot_compensate_a_run_being_compensated(rt: Runtime):
    import asyncio

    gate, entered, undone = asyncio.Event(), asyncio.Event(), []

    async def undo(info):
        entered.set()
        await gate.wait()
        undone.append(info.key)

    run = await rt.start(charge_then_fail(undo), {})
    first = asyncio.create_task(rt.compensate(run.id))
    await entered.wait()
    others = [rt] if isinstance(rt.store, MemoryStore) else [rt, Runtime(SqlStore(rt.store.url))]
    for other in others:  # the same Runtime, and another one on the same database
        with pytest.raises(InvalidRequest, match="being compensated by another caller"):
            await other.compensate(run.id)
    gate.set()
    assert (await first).complete and len(undone) == 1
    assert [e.status for e in rt.store.journal([run.id])][-1] == EffectStatus.COMPENSATED
    for other in others[1:]:
        other.close()


async def test_a_run_whose_compensation_may_have_happened_is_not_continued(rt: Runtime):
    def fails(info):
        raise RuntimeError("ledger down")

    run = await rt.start(charge_then_fail(fails), {})
    report = await rt.compensate(run.id)
    assert not report.complete and report.steps[0].status == "failed" and "ledger down" in report.steps[0].error
    with pytest.raises(InvalidRequest, match="compensated"):
        await rt.resume(run.id)


async def test_compensating_a_run_that_was_continued_is_refused(rt: Runtime):
    log: list[str] = []
    run = await rt.start(ledger_graph(log), {})
    await rt.resume(run.id)  # a continuation relies on the effects of its parent
    with pytest.raises(InvalidRequest, match="continued by"):
        await rt.compensate(run.id)
    assert not any(line.startswith("undo") for line in log)


async def test_import_is_all_or_nothing_and_checks_every_record(rt: Runtime, other_store):
    world = World()
    run_id = await recorded_run(rt, world)
    await rt.fork(await checkpoint_after(rt, run_id, "lookup"))
    doc = await rt.export_thread(run_id)
    fresh = Runtime(other_store)
    try:
        clash = {**doc, "runs": [doc["runs"][0], {**doc["runs"][1], "checkpoints":
                                                  doc["runs"][1]["checkpoints"] + doc["runs"][1]["checkpoints"][:1]}]}
        with pytest.raises(InvalidRequest):
            await fresh.import_thread(clash)
        assert fresh.store.list_runs() == []   # the first run was not kept either
        stray = {**doc, "runs": [{**doc["runs"][0], "events": doc["runs"][1]["events"]}]}
        with pytest.raises(InvalidRequest, match=r"runs\[0\].events holds records of run"):
            await fresh.import_thread(stray)
        assert len(await fresh.import_thread(doc)) == 2
    finally:
        fresh.close()


# --------------------------------------------------------------------------- regressions from review


class P(BaseModel):
    x: int = 0
    log: Annotated[list[str], append] = []


def abc(seen: list[tuple[str, int]], fail_c: list[bool] | None = None) -> ExecutableGraph:
    g = Graph("abc", state=P)

    def step(name: str, after: list[str]):
        @g.node(name=name, after=after)
        def fn(s: P) -> dict:
            seen.append((name, s.x))
            if name == "c" and fail_c and fail_c.pop():
                raise PermissionError("c fails once")
            return {"log": [f"{name}{s.x}"]}

    step("a", [])
    step("b", ["a"])
    step("c", ["b"])
    return g.compile()


async def test_forking_a_patched_forks_first_checkpoint_starts_before_its_patch(rt: Runtime):
    seen: list[tuple[str, int]] = []
    run = await rt.start(abc(seen), {"x": 1})
    patched = await rt.fork(await checkpoint_after(rt, run.id, "a"), {"x": 100})
    first = (await rt.history(patched.id))[0]
    assert (await rt.state_at(first.id)).x == 1
    seen.clear()
    again = await rt.fork(first.id)
    assert seen == [("b", 1), ("c", 1)]  # the state before the patch, as the checkpoint shows
    assert [(await rt.state_at(c.id)).x for c in await rt.history(again.id)] == [1, 1, 1]
    seen.clear()
    report = await rt.replay(patched.id)
    assert report.same and seen == [("b", 100), ("c", 100)]  # the patched fork ran with its patch
    assert {(await rt.state_at(c.id)).x for c in await rt.history(report.run_id)} == {100}


async def test_a_continuation_of_a_patched_fork_keeps_the_forks_writes(rt: Runtime):
    seen: list[tuple[str, int]] = []
    run = await rt.start(abc(seen), {"x": 1})
    fail = [True]
    patched = await rt.fork(await checkpoint_after(rt, run.id, "a"), {"x": 100}, graph=abc(seen, fail))
    assert patched.status == RunStatus.FAILED
    cont = await rt.resume(patched.id)
    assert cont.status == RunStatus.SUCCEEDED
    assert (await state(rt, cont.id)).log == ["a1", "b100", "c100"]


async def test_a_replays_continuation_keeps_reusing_recorded_answers(rt: Runtime):
    g = Graph("ask", state=Order)
    flaky = [True]

    @g.node()
    def first(s: Order) -> dict:
        if flaky and flaky.pop():
            raise PermissionError("first fails once")
        return {}

    @g.node(after=["first"])
    async def confirm(s: Order, ctx: NodeContext) -> dict:
        return {"emailed": (await ctx.interrupt({"q": "email?"}, response=Approval)).approve}

    flaky.clear()
    run = await rt.resume((await rt.start(g, {})).id, {"approve": True})
    flaky.append(True)
    report = await rt.replay(run.id)
    assert report.status == "failed"
    cont = await rt.resume(report.run_id)
    assert cont.status == RunStatus.SUCCEEDED and await rt.interrupts(cont.id) == []


class Ledger:
    def __init__(self) -> None:
        self.undone: list[str] = []

    def undo(self, info) -> None:
        self.undone.append(info.result)


async def test_bound_methods_and_partials_are_compensated_only_where_they_live(rt: Runtime):
    import functools

    ledger = Ledger()
    g = Graph("bound", state=Order)

    @g.node()
    async def a(s: Order, ctx: NodeContext) -> dict:
        await ctx.effect("one", lambda: "r1", compensate=ledger.undo)
        await ctx.effect("two", lambda: "r2", compensate=functools.partial(Ledger.undo, ledger))
        raise PermissionError("closed")

    run = await rt.start(g, {})
    assert {e.compensate for e in rt.store.journal([run.id]) if e.status == EffectStatus.SUCCEEDED} == {"<local>"}
    if isinstance(rt.store, SqlStore):
        other = Runtime(SqlStore(rt.store.url))
        report = await other.compensate(run.id)
        assert [s.status for s in report.steps] == ["not_runnable"] and "module-level" in report.steps[0].error
        other.close()
    assert (await rt.compensate(run.id)).complete and ledger.undone == ["r2", "r1"]


async def test_an_in_doubt_effect_settled_by_a_person_can_be_compensated(rt: Runtime):
    from runtime import RetryPolicy

    undone: list[str] = []
    calls = [0]

    def charge():
        calls[0] += 1
        if calls[0] == 1:
            raise TimeoutError("gateway timed out")  # outcome unknown: the entry stays STARTED
        return "charged"

    g = Graph("doubt", state=Order)

    @g.node(retry=RetryPolicy(max_attempts=3, initial_interval=0.001))
    async def pay(s: Order, ctx: NodeContext) -> dict:
        return {"receipt": await ctx.effect("pay", charge, compensate=lambda info: undone.append(info.result))}

    @g.node(after=["pay"])
    def later(s: Order) -> dict:
        raise PermissionError("a later step fails")

    run = await rt.start(g, {})
    assert [i.kind for i in await rt.interrupts(run.id)] == [InterruptKind.IN_DOUBT]
    run = await rt.resume(run.id, {"action": "result", "result": "charged-by-hand"})
    assert run.status == RunStatus.FAILED
    assert (await rt.compensate(run.id)).complete and undone == ["charged-by-hand"]


async def test_replay_with_code_that_dropped_a_finished_node_has_consistent_checkpoints(rt: Runtime):
    seen: list[tuple[str, int]] = []
    run = await rt.start(abc(seen), {"x": 1})
    g = Graph("abc", state=P)

    @g.node()
    def a(s: P) -> dict:
        return {"log": [f"a{s.x}"]}

    @g.node(after=["a"])
    def c(s: P) -> dict:
        return {"log": [f"c{s.x}"]}

    report = await rt.replay(await checkpoint_after(rt, run.id, "b"), graph=g)
    states = [(await rt.state_at(cp.id)).log for cp in await rt.history(report.run_id)]
    assert states == [["a1"], ["a1", "c1"]]  # b is gone from this code: its write is not there either
    assert report.node("b").verdict == "missing"


async def test_rejected_fork_replay_and_resume_save_no_graph(rt: Runtime):
    seen: list[tuple[str, int]] = []
    run = await rt.start(abc(seen), {"x": 1})

    class Other(BaseModel):
        x: str   # required: the recorded input has none

    g = Graph("abc", state=Other)

    @g.node()
    def a(s: Other) -> dict:
        return {}

    other = g.compile()
    with pytest.raises(InvalidRequest, match="graph version"):
        await rt.fork((await rt.history(run.id))[1].id, graph=other)
    with pytest.raises(InvalidRequest, match="recorded input does not fit"):
        await rt.replay(run.id, graph=other)
    with pytest.raises(InvalidRequest, match=f"was made by graph version {run.graph_version}"):
        await rt.resume(run.id, graph=other)
    assert rt.store.graph_description(other.version) is None
    assert other.version not in {v.version for v in rt.graphs.versions("abc")}


async def test_a_replay_whose_graph_refuses_the_recorded_input_names_every_field(rt: Runtime):
    run = await rt.start(abc([]), {"x": 1})

    class Other(BaseModel):
        x: str
        order_id: int

    g = Graph("abc", state=Other)

    @g.node()
    def a(s: Other) -> dict:
        return {}

    before = await rt.runs()
    with pytest.raises(InvalidRequest) as refused:
        await rt.replay(run.id, graph=g)
    assert "x: Input should be a valid string" in str(refused.value)
    assert "order_id: Field required" in str(refused.value)
    assert await rt.runs() == before


async def test_a_replay_whose_graph_refuses_the_writes_it_starts_from_names_their_node(rt: Runtime):
    """New code that types a field another way than the writes the replay keeps is refused
    before anything is written (it failed at the next node, and its state could not be read)."""
    run = await rt.start(abc([]), {"x": 1})

    class Listed(BaseModel):
        x: int = 0
        log: Annotated[list[int], append] = []   # the recorded writes hold strings

    g = Graph("abc", state=Listed)
    for name, after in (("a", []), ("b", ["a"]), ("c", ["b"])):
        g.add_node(name, lambda s: {"log": [1]}, after=after)

    before = await rt.runs()
    with pytest.raises(InvalidRequest) as refused:
        await rt.replay(await checkpoint_after(rt, run.id, "b"), graph=g)
    assert "state this replay starts from does not fit Listed" in str(refused.value)
    assert "log.0: Input should be a valid integer" in str(refused.value)
    assert "written by a, b" in str(refused.value)
    assert await rt.runs() == before
    report = await rt.replay(run.id, graph=g)   # from the start nothing is kept: it runs
    assert report.run.status == RunStatus.SUCCEEDED


async def test_a_fork_asking_about_an_effect_the_source_left_in_doubt_says_so(rt: Runtime):
    from runtime import RetryPolicy
    from server.present import interrupt_question

    calls: list[str] = []

    def charge(info):
        calls.append(info.key)
        raise TimeoutError("gateway timed out")  # outcome unknown: the entry stays STARTED

    g = Graph("doubt", state=Order)

    @g.node()
    def lookup(s: Order) -> dict:
        return {"log": ["looked up"]}

    @g.node(after=["lookup"], retry=RetryPolicy(max_attempts=2, initial_interval=0.001))
    async def pay(s: Order, ctx: NodeContext) -> dict:
        return {"receipt": await ctx.effect("pay", charge, request={"order": s.order})}

    run = await rt.start(g, {})   # the retry finds the effect in doubt and asks
    assert [i.kind for i in await rt.interrupts(run.id)] == [InterruptKind.IN_DOUBT]
    [key] = calls
    branch = await rt.fork(await checkpoint_after(rt, run.id, "lookup"))
    assert branch.status == RunStatus.INTERRUPTED and calls == [key]
    [question] = await rt.interrupts(branch.id)
    value = question.payload["value"]
    assert question.kind == InterruptKind.UNRECORDED
    assert value["recorded_request"] == {"order": 1}
    assert value["in_doubt"] == {"run_id": run.id, "key": key}
    assert "may have happened" in value["question"] and "may have happened" in interrupt_question(question)
