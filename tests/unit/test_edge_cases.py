"""Edge cases a user hits in practice: each test pins one fixed behaviour."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

import pytest
from pydantic import BaseModel

from runtime import (
    Graph,
    GraphError,
    InvalidRequest,
    MemoryStore,
    Registry,
    RetryPolicy,
    RunStatus,
    Runtime,
    SqlStore,
    add,
    append,
    compile_plan,
)
from runtime import InterruptKind, InterruptStatus
from runtime.core.records import Batch
from runtime.engine.executor import EAGER

FAST = dict(initial_interval=0.001, backoff=1.0)


class S(BaseModel):
    log: Annotated[list[str], append] = []
    total: Annotated[int, add] = 0
    value: str = ""
    doc: dict = {}


async def final(rt: Runtime, run_id: str) -> BaseModel:
    return await rt.state_at((await rt.history(run_id))[-1].id)


def charging(calls: list[str], stalls: int, attempts: int) -> Graph:
    """One node charging through an effect whose first ``stalls`` calls outlive the attempt
    (their outcome is unknown: in doubt)."""
    g = Graph("g", state=S)

    async def pay(info):
        calls.append(info.key)
        if len(calls) <= stalls:
            await asyncio.sleep(5)
        return "paid"

    # the timeout must outlast the effect's forced journal commit, or the call may never start
    # (a slow disk under a loaded machine once took longer than 0.1 s)
    @g.node(timeout=0.5, retry=RetryPolicy(max_attempts=attempts, **FAST))
    async def charge(state, ctx):
        return {"value": await ctx.effect("pay", pay)}

    return g


async def test_an_in_doubt_answer_settles_only_the_entry_it_was_given_for(rt: Runtime):
    calls: list[str] = []
    run = await rt.start(charging(calls, stalls=2, attempts=10), {})
    [first] = await rt.interrupts(run.id)
    run = await rt.resume(run.id, {"action": "retry"})  # the retried call is in doubt again
    assert run.status == RunStatus.INTERRUPTED and len(calls) == 2
    [second] = await rt.interrupts(run.id)
    assert second.id != first.id and second.kind == InterruptKind.IN_DOUBT
    run = await rt.resume(run.id, {"action": "result", "result": "settled by hand"})
    assert run.status == RunStatus.SUCCEEDED and len(calls) == 2


async def test_a_continuation_asks_again_about_an_aborted_in_doubt_effect(rt: Runtime):
    calls: list[str] = []
    g = Graph("g", state=S)

    async def pay(info):
        calls.append(info.key)
        if len(calls) == 1:
            await asyncio.sleep(5)
        return "paid"

    @g.node(timeout=0.1, retry=RetryPolicy(max_attempts=2, **FAST))
    async def charge(state, ctx):
        return {"value": await ctx.effect("pay", pay)}

    run = await rt.start(g, {})
    failed = await rt.resume(run.id, {"action": "abort"})
    assert failed.status == RunStatus.FAILED
    cont = await rt.resume(failed.id)
    assert cont.status == RunStatus.INTERRUPTED
    assert [i.kind for i in await rt.interrupts(cont.id)] == [InterruptKind.IN_DOUBT]


async def test_a_failed_run_is_continued_only_once(rt: Runtime):
    g = Graph("g", state=S)
    charges: list[str] = []
    fail = [True]

    @g.node()
    def b(state):
        if fail[0]:
            fail[0] = False
            raise ValueError("first time")
        return {"value": "b"}

    @g.node(after=["b"])
    async def c(state, ctx):
        await ctx.effect("charge", lambda info: charges.append(info.key) or "ok")
        return {"log": ["c"]}

    failed = await rt.start(g, {})
    cont = await rt.resume(failed.id)
    assert cont.status == RunStatus.SUCCEEDED
    with pytest.raises(InvalidRequest, match=f"already continued by {cont.id}"):
        await rt.resume(failed.id)
    assert len(charges) == 1 and len(rt.store.child_runs(failed.id)) == 1


async def test_a_reducer_that_cannot_fold_a_write_fails_the_node_naming_the_field(rt: Runtime):
    g = Graph("g", state=S)
    g.add_node("n", lambda s: {"total": "3"})
    run = await rt.start(g, {})
    assert run.status == RunStatus.FAILED and run.error["class"] == "invalid_input"
    assert "field 'total': reducer 'add' failed" in run.error["message"]


async def test_last_value_writes_are_stored_as_the_model_coerced_them(rt: Runtime):
    class T(BaseModel):
        n: int = 0

    g = Graph("g", state=T)
    g.add_node("n", lambda s: {"n": "3"})
    run = await rt.start(g, {})
    assert [w.value for w in await rt.pending_writes(run.id)] == [{"n": 3}]


async def test_cancelling_the_caller_of_start_ends_the_run_cancelled(rt: Runtime):
    g = Graph("g", state=S)

    @g.node()
    async def slow(state):
        await asyncio.sleep(5)

    with pytest.raises(TimeoutError):
        await asyncio.wait_for(rt.start(g, {}), 0.2)
    run = (await rt.runs())[0]
    assert run.status == RunStatus.CANCELLED and "stopped waiting" in run.error["message"]
    assert (await rt.history(run.id))[-1].node_states["slow"] == "cancelled"


async def test_a_cancel_reaches_a_node_launched_in_the_same_turn_before_it_ever_ran(rt: Runtime):
    # ``first`` cancels the run in its first step; ``second`` is ready with it and none of its
    # code runs. Without eager tasks both were launched in one turn and ``first`` runs before
    # ``second`` took its first step: ``second`` is cancelled unstarted (reported as cancelled,
    # not lost). With them (Python 3.12) ``first`` runs as it is launched, and a stopping run
    # launches nothing more: ``second`` stays pending, with no attempt. The run ends either way.
    g = Graph("g", state=S)
    ran: list[str] = []

    @g.node()
    async def first(state, ctx):
        ran.append("first")
        await rt.cancel(ctx.run_id, "stop now", wait=0)

    @g.node()
    async def second(state):
        ran.append("second")

    run = await asyncio.wait_for(rt.start(g, {}), 5)
    assert run.status == RunStatus.CANCELLED and run.error["message"] == "stop now"
    assert ran == ["first"]
    states = (await rt.history(run.id))[-1].node_states
    attempts = {a.node: a.status for a in await rt.attempts(run.id)}
    if EAGER:
        assert states == {"first": "cancelled", "second": "pending"}
        assert attempts == {"first": "cancelled"}
    else:
        assert states == {"first": "cancelled", "second": "cancelled"}
        assert attempts == {"first": "cancelled", "second": "cancelled"}


async def test_a_node_that_cancels_its_run_and_then_waits_is_cancelled_at_its_wait(rt: Runtime):
    g = Graph("g", state=S)
    ran: list[str] = []

    @g.node()
    async def first(state, ctx):
        await rt.cancel(ctx.run_id, "stop now", wait=0)
        ran.append("before the wait")
        await asyncio.sleep(0)
        ran.append("after the wait")

    run = await asyncio.wait_for(rt.start(g, {}), 5)
    assert run.status == RunStatus.CANCELLED and ran == ["before the wait"]
    assert {a.node: a.status for a in await rt.attempts(run.id)} == {"first": "cancelled"}


async def test_nodes_launched_together_start_in_canonical_order_and_eagerly_where_python_can(rt: Runtime):
    # ``b`` and ``c`` are ready at once. With eager tasks (Python 3.12) each runs up to its
    # first wait as it is launched: ``b``'s event comes before ``c`` starts. On 3.11 both
    # start first and run at the loop's next turn. Canonical order either way.
    g = Graph("g", state=S)

    @g.node()
    async def b(state, ctx):
        ctx.emit({"from": "b"})
        await asyncio.sleep(0)
        ctx.emit({"from": "b, after a wait"})

    @g.node()
    async def c(state, ctx):
        ctx.emit({"from": "c"})

    run = await rt.start(g, {})
    assert run.status == RunStatus.SUCCEEDED
    seen = [e.data["payload"]["from"] if e.type == "custom" else f"{e.node} starts"
            for e in await rt.events(run.id) if e.type in ("node.start", "custom")]
    if EAGER:
        assert seen == ["b starts", "b", "c starts", "c", "b, after a wait"]
    else:
        assert seen == ["b starts", "c starts", "b", "c", "b, after a wait"]


async def test_node_code_cannot_swallow_an_interrupt(rt: Runtime):
    g = Graph("g", state=S)

    @g.node()
    async def careless(state, ctx):
        try:
            answer = await ctx.interrupt({"q": "go?"})
        except Exception as e:  # noqa: BLE001 - the point of the test
            return {"value": f"swallowed {type(e).__name__}"}
        return {"value": answer}

    run = await rt.start(g, {})
    assert run.status == RunStatus.INTERRUPTED
    run = await rt.resume(run.id, "yes")
    assert run.status == RunStatus.SUCCEEDED and (await final(rt, run.id)).value == "yes"


async def test_budget_ends_the_run_even_if_node_code_catches_the_error(rt: Runtime):
    g = Graph("g", state=S)

    @g.node()
    async def llm(state, ctx):
        try:
            ctx.usage(tokens=500)
        except Exception:  # noqa: BLE001
            pass
        return {"value": "a"}

    g.add_node("more", lambda s: {"log": ["more"]}, after=["llm"])
    run = await rt.start(g, {}, max_tokens=100)
    assert run.status == RunStatus.FAILED and run.error["class"] == "limit_exceeded"
    assert (await rt.history(run.id))[-1].node_states["more"] == "pending"


class Cfg(BaseModel):
    n: int


PLAN_REG = Registry()


@PLAN_REG.function()
def doubled(state, cfg: Cfg, times: int = 1):
    return {"total": cfg.n * 2 * times}


async def test_plan_args_are_converted_to_the_annotated_types(rt: Runtime):
    plan = {"name": "p", "nodes": [{"id": "a", "fn": "doubled", "args": {"cfg": {"n": 21}, "times": "1"}}]}
    graph = compile_plan(plan, PLAN_REG)
    run = await rt.start(graph, {})
    assert run.status == RunStatus.SUCCEEDED and (await final(rt, run.id)).total == 42


def test_a_bad_nested_plan_arg_names_its_path():
    plan = {"name": "p", "nodes": [{"id": "a", "fn": "doubled", "args": {"cfg": {"n": "x"}}}]}
    with pytest.raises(GraphError, match=r"args\.cfg\.n: Input should be a valid integer"):
        compile_plan(plan, PLAN_REG)


async def test_async_callable_objects_run_as_async_nodes(rt: Runtime):
    class Tool:
        async def __call__(self, state):
            return {"value": "tool"}

    g = Graph("g", state=S)
    g.add_node("tool", Tool())
    run = await rt.start(g, {})
    assert run.status == RunStatus.SUCCEEDED and (await final(rt, run.id)).value == "tool"


def test_an_async_when_predicate_is_rejected():
    async def never(state):
        return False

    g = Graph("g")
    g.add_node("a", lambda s: None, when=never)
    with pytest.raises(GraphError, match="when= must be a plain function"):
        g.compile()


async def test_runs_use_the_graph_object_they_were_started_with(rt: Runtime):
    def build(model: str) -> Graph:
        g = Graph("agent", state=S)

        @g.node()
        async def ask(state, ctx):
            return {"log": [await ctx.interrupt("go?")]}

        @g.node(after=["ask"])
        async def call_llm(state):
            return {"value": model}

        return g

    small = await rt.start(build("small"), {})
    await rt.start(build("big"), {})
    small = await rt.resume(small.id, "go")
    assert (await final(rt, small.id)).value == "small"


async def test_changing_the_state_in_place_does_not_leak_into_other_nodes_or_the_store(rt: Runtime):
    g = Graph("g", state=S)
    g.add_node("a", lambda s: {"doc": {"tags": ["x"]}})

    def b(state):
        state.doc["tags"].append("changed-by-b")
        return {}

    g.add_node("b", b, after=["a"])
    g.add_node("c", lambda s: {"log": list(s.doc["tags"])}, after=["a"])
    run = await rt.start(g, {})
    assert (await final(rt, run.id)).log == ["x"]
    assert [w.value for w in await rt.pending_writes(run.id) if w.node == "a"] == [{"doc": {"tags": ["x"]}}]


async def test_returning_the_whole_state_model_is_rejected(rt: Runtime):
    g = Graph("g", state=S)
    g.add_node("a", lambda s: {"log": ["a"]})
    g.add_node("b", lambda s: s.model_copy(update={"value": "b"}), after=["a"])
    run = await rt.start(g, {})
    assert run.status == RunStatus.FAILED and "returned the whole state" in run.error["message"]


async def test_an_effect_whose_deadline_passed_is_not_left_in_doubt(rt: Runtime):
    g = Graph("g", state=S)
    calls = []
    slow = [True]

    @g.node(timeout=0.2)
    def n(state, ctx):
        if slow[0]:
            slow[0] = False
            time.sleep(0.3)
        return {"value": ctx.effect("charge", lambda: calls.append(1) or "charged")}

    run = await rt.start(g, {})
    assert run.status == RunStatus.FAILED and calls == []
    assert [e.status for e in rt.store.journal([run.id])] == []
    cont = await rt.resume(run.id)
    assert cont.status == RunStatus.SUCCEEDED and calls == [1]


async def test_a_timed_out_sync_node_does_not_starve_its_retries():
    rt = Runtime(MemoryStore(), max_concurrency=1)
    g = Graph("g", state=S)
    ran = []

    @g.node(timeout=0.2, retry=RetryPolicy(max_attempts=3, **FAST))
    def n(state, ctx):
        ran.append(ctx.attempt)
        if ctx.attempt == 1:
            time.sleep(1)
        return {"value": str(ctx.attempt)}

    run = await rt.start(g, {})
    assert run.status == RunStatus.SUCCEEDED and ran == [1, 2]


async def test_a_cancel_from_another_runtime_reaches_a_run_that_pauses_first(tmp_path):
    url = f"sqlite:///{tmp_path / 'c.db'}"
    owner, other = Runtime(SqlStore(url)), Runtime(SqlStore(url))
    g = Graph("g", state=S)
    asked = asyncio.Event()

    @g.node()
    async def ask(state, ctx):
        asked.set()
        await asyncio.sleep(0.2)
        return {"value": await ctx.interrupt("approve?")}

    other.register(g)
    task = asyncio.create_task(owner.start(g, {}))
    await asked.wait()
    run_id = (await other.runs())[0].id
    cancelled = await other.cancel(run_id, "user pressed cancel", wait=3)
    await task
    assert cancelled.status == RunStatus.CANCELLED
    assert (await other.get_run(run_id)).status == RunStatus.CANCELLED
    assert [i.status for i in await other.interrupts(run_id, pending=False)] in ([], [InterruptStatus.CANCELLED])
    owner.close()
    other.close()


class AskCounting(SqlStore):
    """A real SQLite store that counts the run loop's questions about cancel requests."""

    asked = 0

    def cancel_request(self, run_id: str) -> str | None:
        self.asked += 1
        return super().cancel_request(run_id)


async def test_a_run_asks_the_store_about_cancels_at_heartbeat_pace_and_before_it_pauses(tmp_path):
    store = AskCounting(f"sqlite:///{tmp_path / 'c.db'}")
    rt = Runtime(store, heartbeat=0.05)
    g = Graph("g", state=S)
    g.add_node("a", lambda s: {"log": ["a"]})
    # a run shorter than a heartbeat, started here: nobody can have asked before its first poll is due
    assert (await rt.start(g, {})).status == RunStatus.SUCCEEDED
    assert store.asked == 0

    slow = Graph("slow", state=S)

    @slow.node()
    async def wait(state, ctx):
        await asyncio.sleep(0.3)
        return {"log": ["waited"]}

    assert (await rt.start(slow, {})).status == RunStatus.SUCCEEDED
    assert 1 <= store.asked <= 7   # polled while it ran, at most once a heartbeat (0.3 s / 0.05 s + 1)

    store.asked = 0
    pausing = Graph("pausing", state=S)

    @pausing.node()
    async def ask(state, ctx):
        return {"value": await ctx.interrupt("approve?")}

    assert (await rt.start(pausing, {})).status == RunStatus.INTERRUPTED
    assert store.asked == 1   # a run about to pause asks once more: a cancel must not leave it paused
    rt.close()


async def test_an_unknown_status_filter_is_a_clear_error(rt: Runtime):
    with pytest.raises(InvalidRequest, match="unknown status 'bogus'"):
        await rt.runs(status="bogus")


def test_node_ids_may_use_any_script():
    g = Graph("g")
    g.add_node("café", lambda s: None)
    assert g.compile().order == ("café",)


async def test_a_store_accepts_only_one_continuation_per_run(rt: Runtime):
    g = Graph("g", state=S)
    g.add_node("a", lambda s: (_ for _ in ()).throw(ValueError("x")))
    failed = await rt.start(g, {})
    first = await rt.resume(failed.id)  # a second caller racing past the runtime's own checks:
    with pytest.raises(InvalidRequest, match=f"already continued by {first.id}"):
        rt.store.create_run(Batch(run_id="run_second", run=first.evolve(id="run_second")))


async def test_a_custom_reducer_that_changes_its_input_cannot_corrupt_state(rt: Runtime):
    from runtime import reducer

    def extend_in_place(current, update):
        current = current if current is not None else []
        current.extend(update)
        return current

    class T(BaseModel):
        items: Annotated[list[str], reducer(extend_in_place)] = []

    g = Graph("g", state=T)
    seen = {}

    def step(name):
        def fn(state):
            seen[name] = list(state.items)
            return {"items": [name]}
        return fn

    g.add_node("a", step("a"))
    g.add_node("b", step("b"), after=["a"])
    g.add_node("c", step("c"), after=["b"])
    run = await rt.start(g, {})
    assert seen == {"a": [], "b": ["a"], "c": ["a", "b"]}
    assert (await final(rt, run.id)).items == ["a", "b", "c"]
    assert (await rt.get_run(run.id)).input == {"items": []}


def test_ids_are_unique_and_sort_in_the_order_they_were_made():
    from runtime.core.clock import RandomIds
    ids = RandomIds()
    made = []
    for _ in range(3):
        made += [ids.new("cp") for _ in range(500)]
        time.sleep(0.002)   # the next millisecond
    assert len(set(made)) == len(made)
    assert all(i.startswith("cp_") for i in made)
    # ids made in later milliseconds sort after earlier ones (new index keys append)
    firsts = [made[0], made[500], made[1000]]
    assert firsts == sorted(firsts)


def test_two_runtimes_started_together_are_different_lease_owners(tmp_path):
    url = f"sqlite:///{tmp_path / 'o.db'}"
    first, second = Runtime(SqlStore(url)), Runtime(SqlStore(url))
    try:
        assert first.env.owner != second.env.owner
    finally:
        first.close()
        second.close()


def test_a_forked_process_and_a_seeded_random_do_not_repeat_ids():
    import os
    import random

    from runtime.core.clock import RandomIds
    ids = RandomIds()
    random.seed(7)   # a program seeding the random module does not make ids repeatable
    first = ids.new("run")
    random.seed(7)
    assert ids.new("run") != first
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: its ids must differ from the parent's next ones
        os.write(write, "\n".join(ids.new("run") for _ in range(50)).encode())
        os._exit(0)
    os.close(write)
    # compare the random tails: two processes may well share the millisecond
    mine = {ids.new("run")[-16:] for _ in range(50)}
    with os.fdopen(read) as f:
        theirs = {i[-16:] for i in f.read().split("\n")}
    os.waitpid(pid, 0)
    assert len(theirs) == 50 and not mine & theirs



class Flag(BaseModel):
    n: int = 0


@pytest.mark.parametrize(("when", "raised", "error_class"), [
    (lambda s: 1 / s.n > 0, "ZeroDivisionError: division by zero", "internal"),
    # the class of what the condition raised decides, as for a node's own error
    (lambda s: {}["missing"], "KeyError: 'missing'", "invalid_input")])
async def test_a_when_that_raises_fails_its_node_saying_it_was_the_condition(rt: Runtime, when, raised: str,
                                                                             error_class: str):
    g = Graph("raising_when", state=Flag)
    g.add_node("a", lambda s: {"n": 0})
    g.add_node("b", lambda s: {"n": 1}, after=["a"], when=when)
    run = await rt.start(g, {})
    assert run.status == RunStatus.FAILED
    [attempt] = [a for a in await rt.attempts(run.id) if a.node == "b"]
    assert attempt.error == f"ConditionFailed: when= of node 'b' raised {raised}"
    assert attempt.error_class == error_class


async def test_a_long_run_of_nodes_that_never_wait_leaves_the_event_loop_to_others(rt: Runtime):
    # Started eagerly, a node that never waits ends without a turn of the event loop; a run
    # of such nodes still lets the loop's other tasks (another run, a web request) run now
    # and then, rather than holding the loop until it ends.
    class Counter(BaseModel):
        n: int = 0

    g = Graph("busy", state=Counter)
    ticks = 0
    seen: list[int] = []   # the other task's ticks, as each node saw them

    @g.node(after=["step"], max_iterations=2000, when=lambda s: s.n < 1000)
    async def step(state):
        seen.append(ticks)
        return {"n": state.n + 1}

    async def other_task() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    ticker = asyncio.get_running_loop().create_task(other_task())
    try:
        run = await rt.start(g, {})
    finally:
        ticker.cancel()
    assert run.status == RunStatus.SUCCEEDED and len(seen) == 1000
    # the other task ran between the run's first and last nodes, and more than once
    assert seen[-1] - seen[0] >= 5


async def test_a_task_factory_of_the_callers_own_starts_every_attempt(rt: Runtime):
    # instrumentation may set the event loop's task factory: the runtime then starts its
    # attempts through it (not eagerly), and the run is the same
    g = Graph("g", state=S)

    @g.node()
    async def a(state):
        return {"log": ["a"]}

    @g.node(after=["a"])
    async def b(state):
        return {"log": ["b"]}

    loop = asyncio.get_running_loop()
    attempts: list[str] = []

    def factory(loop, coro, **kwargs):
        if coro.__qualname__.endswith("._attempt"):
            attempts.append(coro.cr_frame.f_locals["scope"].node)
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop.set_task_factory(factory)
    try:
        run = await rt.start(g, {})
    finally:
        loop.set_task_factory(None)
    assert run.status == RunStatus.SUCCEEDED and (await final(rt, run.id)).log == ["a", "b"]
    assert attempts == ["a", "b"]


async def test_a_run_started_inside_a_node_can_cancel_the_run_of_that_node(rt: Runtime):
    # ``host`` starts a run of its own, whose first node cancels the run ``host`` belongs to
    # while ``host`` is still in its first step: it is ``host`` that is cancelled (at its next
    # wait), not the node asking
    ran: list[str] = []
    outer_id: list[str] = []
    inner = Graph("inner", state=S)

    @inner.node()
    async def stop_outer(state, ctx):
        await rt.cancel(outer_id[0], "from inside", wait=0)
        ran.append("stop_outer went on")
        return {"value": "inner done"}

    outer = Graph("outer", state=S)

    @outer.node()
    async def host(state, ctx):
        outer_id.append(ctx.run_id)
        await rt.start(inner, {})
        ran.append("host went on")

    run = await asyncio.wait_for(rt.start(outer, {}), 10)
    assert run.status == RunStatus.CANCELLED and run.error["message"] == "from inside"
    assert ran == ["stop_outer went on"]
    assert {a.node: a.status for a in await rt.attempts(run.id)} == {"host": "cancelled"}


async def test_an_answer_about_an_effect_that_drops_or_misspells_its_result_is_refused(rt: Runtime):
    """A "result" answer with no result would be recorded as null, the effect's outcome for
    good (every continuation is served it); a misspelt key would silently be dropped."""
    calls: list[str] = []
    run = await rt.start(charging(calls, stalls=1, attempts=2), {})
    [question] = await rt.interrupts(run.id)
    assert question.kind == InterruptKind.IN_DOUBT
    journal = rt.store.journal([run.id])
    for answer, named in [({"action": "result"}, 'needs the "result" the effect returned'),
                          ({"action": "result", "reslt": "paid"}, "not 'reslt'"),
                          ({"action": "retry", "why": "x"}, "not 'why'")]:
        with pytest.raises(InvalidRequest, match=named):
            await rt.resume(run.id, answer)
        assert (await rt.get_run(run.id)).status == RunStatus.INTERRUPTED
        assert [i.status for i in await rt.interrupts(run.id)] == [InterruptStatus.PENDING]
        assert rt.store.journal([run.id]) == journal and len(calls) == 1
    done = await rt.resume(run.id, {"action": "result", "result": "paid by hand"})
    assert done.status == RunStatus.SUCCEEDED and len(calls) == 1
    assert (await final(rt, run.id)).value == "paid by hand"


@pytest.mark.parametrize("gives", ["emit", "request", "result", "interrupt"])
async def test_a_value_with_no_json_form_from_node_code_is_invalid_input_not_internal(rt: Runtime, gives: str):
    """What the node handed over is at fault, as with writes that have no JSON form: class
    ``invalid_input`` (which a ``retry_on`` of ``internal`` does not retry), naming the value."""
    g = Graph(f"no-json-{gives}")

    @g.node()
    async def a(s, ctx):
        if gives == "emit":
            ctx.emit({"at": object()})
        elif gives == "request":
            await ctx.effect("e", lambda: 1, request={"at": object()})
        elif gives == "result":
            await ctx.effect("e", lambda: object(), request={})
        else:
            await ctx.interrupt({"at": float("nan")})
        return None

    run = await rt.start(g, {})
    assert run.status == RunStatus.FAILED
    assert run.error["class"] == "invalid_input", run.error
    named = {"emit": "emitted payload is not JSON-serialisable", "request": "effect 'e' request is not",
             "result": "effect 'e' result is not", "interrupt": "interrupt payload holds nan"}[gives]
    assert named in run.error["message"]
