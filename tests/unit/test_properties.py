"""Property tests of the kernel semantics in DESIGN.md, "Semantics that must hold".

Random DAGs (edges only from a lower to a higher generation index, so always acyclic)
with random node names (so the canonical order differs from the declaration order)
run under random completion timings and concurrency bounds. Hypothesis does not run
async tests, so every run goes through ``asyncio.run`` (``run_bounded``).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from runtime import (
    Graph,
    InvalidInputError,
    MemoryStore,
    RetryPolicy,
    Runtime,
    TransientError,
    add,
    append,
    merge,
)
from runtime.core.errors import WriteConflict
from runtime.engine import scheduler
from runtime import ExecutableGraph
from runtime.graph.reducers import fold
from runtime.core.states import FINISHED_NODE, NodeStatus, RunStatus
from runtime.core.trace import gaps, node_states_from_events, states_after

N = NodeStatus
SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class S(BaseModel):
    log: Annotated[list[str], append] = []
    total: Annotated[int, add] = 0
    seen: Annotated[dict[str, int], merge] = {}
    answer: str = ""   # last-value


# ---------------------------------------------------------------------------- strategies


@dataclass(frozen=True)
class Dag:
    names: tuple[str, ...]                 # generation order (NOT the canonical order)
    deps: Mapping[str, tuple[str, ...]]

    def ancestors(self) -> dict[str, set[str]]:
        anc: dict[str, set[str]] = {}
        for n in self.names:  # generation order is a topological order
            anc[n] = set()
            for d in self.deps[n]:
                anc[n] |= anc[d] | {d}
        return anc


NAME = st.text(alphabet="abcdefghijklmnop", min_size=1, max_size=3)


@st.composite
def dags(draw: st.DrawFn, min_nodes: int = 1, max_nodes: int = 12) -> Dag:
    n = draw(st.integers(min_nodes, max_nodes))
    names = draw(st.lists(NAME, min_size=n, max_size=n, unique=True))
    deps: dict[str, tuple[str, ...]] = {}
    for i, name in enumerate(names):
        chosen = draw(st.lists(st.integers(0, i - 1), unique=True, max_size=min(i, 3))) if i else []
        deps[name] = tuple(names[j] for j in chosen)
    return Dag(tuple(names), deps)


DELAY = st.sampled_from([0.0, 0.0005, 0.001, 0.002, 0.003])


def delays_for(dag: Dag) -> st.SearchStrategy[dict[str, float]]:
    return st.fixed_dictionaries({n: DELAY for n in dag.names})


def totals_for(dag: Dag) -> st.SearchStrategy[dict[str, int]]:
    return st.fixed_dictionaries({n: st.integers(-5, 5) for n in dag.names})


RUN_INPUT = st.builds(lambda log, total: {"log": log, "total": total},
                      st.lists(st.sampled_from(["x", "y"]), max_size=2), st.integers(-3, 3))


# ---------------------------------------------------------------------------- instrumented nodes


@dataclass
class Gauge:
    """Counts node code in flight (incremented on entry, decremented on exit)."""

    now: int = 0
    peak: int = 0

    def enter(self) -> None:
        self.now += 1
        self.peak = max(self.peak, self.now)

    def exit(self) -> None:
        self.now -= 1


@dataclass
class Recorder:
    gauges: list[Gauge] = field(default_factory=list)
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    writes: dict[str, dict[str, Any]] = field(default_factory=dict)
    succeeded: set[str] = field(default_factory=set)      # node code returned
    #: for every attempt start: (node, nodes whose code had returned by then)
    starts: list[tuple[str, frozenset[str]]] = field(default_factory=list)
    attempts: dict[str, int] = field(default_factory=dict)

    def enter(self, name: str) -> None:
        self.starts.append((name, frozenset(self.succeeded)))
        self.attempts[name] = self.attempts.get(name, 0) + 1
        for g in self.gauges:
            g.enter()

    def exit(self) -> None:
        for g in self.gauges:
            g.exit()


def node_writes(name: str, k: int, state: S) -> dict[str, Any]:
    return {"log": [name], "total": k, "seen": {name: len(state.log)}}


def make_node(name: str, k: int, rec: Recorder, delay: float, behaviour: str = "ok"):
    async def node(state: S, ctx):
        rec.enter(name)
        try:
            await asyncio.sleep(delay)
            if behaviour == "fail":
                raise InvalidInputError(f"{name} fails on purpose")
            if behaviour == "flaky" and ctx.attempt == 1:
                raise TransientError(f"{name} fails its first attempt")
            writes = node_writes(name, k, state)
            rec.inputs[name] = state.model_dump()
            rec.writes[name] = writes
            rec.succeeded.add(name)
            return writes
        finally:
            rec.exit()

    return node


def never(state: S) -> bool:
    return False


def even_log(state: S) -> bool:
    return len(state.log) % 2 == 0


WHEN = {"ok": None, "flaky": None, "fail": None, "skip": never, "even": even_log}
FLAKY_RETRY = RetryPolicy(max_attempts=2, initial_interval=0.001)


def build(dag: Dag, rec: Recorder, *, delays: Mapping[str, float] | None = None,
          totals: Mapping[str, int] | None = None, behaviours: Mapping[str, str] | None = None,
          name: str = "prop", declare_order: Sequence[str] | None = None) -> ExecutableGraph:
    g = Graph(name, S)
    for n in declare_order or dag.names:
        b = (behaviours or {}).get(n, "ok")
        g.add_node(n, make_node(n, (totals or {}).get(n, 1), rec, (delays or {}).get(n, 0.0), b),
                   after=dag.deps[n], when=WHEN[b], retry=FLAKY_RETRY if b == "flaky" else None)
    return g.compile()


RUN_TIMEOUT = 30.0


def run_bounded(coro: Any) -> Any:
    """``asyncio.run`` with a time bound, so a run loop that never ends fails the test
    instead of hanging the suite."""
    async def bounded() -> Any:
        return await asyncio.wait_for(coro, RUN_TIMEOUT)

    return asyncio.run(bounded())

async def start_and_last_checkpoint(g):
    """Run ``g`` on a fresh MemoryStore (bound 2); return the run and its last checkpoint."""
    rt = Runtime(MemoryStore(), max_concurrency=2)
    try:
        run = await rt.start(g, {})
        return run, (await rt.history(run.id))[-1]
    finally:
        rt.close()


def base_state(run_input: Mapping[str, Any]) -> dict[str, Any]:
    return S.model_validate(dict(run_input)).model_dump(mode="json")


@dataclass
class Reference:
    """What the semantics say should happen, computed with the pure fold in canonical order."""

    status: dict[str, str]                 # succeeded | skipped | failed | blocked
    inputs: dict[str, dict[str, Any]]
    writes: dict[str, dict[str, Any]]
    final: dict[str, Any]


def reference(dag: Dag, graph: ExecutableGraph, run_input: Mapping[str, Any],
              totals: Mapping[str, int] | None = None,
              behaviours: Mapping[str, str] | None = None) -> Reference:
    anc = dag.ancestors()
    base = base_state(run_input)
    status: dict[str, str] = {}
    inputs: dict[str, dict[str, Any]] = {}
    writes: dict[str, dict[str, Any]] = {}
    for n in graph.order:
        ds = [status[d] for d in dag.deps[n]]
        if any(s in ("failed", "blocked") for s in ds):
            status[n] = "blocked"
            continue
        if ds and all(s == "skipped" for s in ds):
            status[n] = "skipped"
            continue
        done = [(a, writes[a]) for a in graph.order if a in anc[n] and status[a] == "succeeded"]
        model = S.model_validate(fold(base, done, graph.reducers))
        b = (behaviours or {}).get(n, "ok")
        when = WHEN[b]
        if when is not None and not when(model):
            status[n] = "skipped"
        elif b == "fail":
            status[n] = "failed"
        else:
            status[n] = "succeeded"
            inputs[n] = model.model_dump()
            writes[n] = node_writes(n, (totals or {}).get(n, 1), model)
    final = fold(base, [(n, writes[n]) for n in graph.order if n in writes], graph.reducers)
    return Reference(status, inputs, writes, S.model_validate(final).model_dump())


@dataclass
class Outcome:
    run: Any
    graph: ExecutableGraph
    history: list[Any]
    events: list[Any]
    final_state: dict[str, Any]
    states_at: list[dict[str, Any]]


async def execute(graph: ExecutableGraph, run_input: Mapping[str, Any], *, max_concurrency: int = 8,
                  run_limit: int | None = None) -> Outcome:
    rt = Runtime(MemoryStore(), max_concurrency=max_concurrency)
    try:
        run = await rt.start(graph, dict(run_input), max_concurrency=run_limit)
        history = await rt.history(run.id)
        events = await rt.events(run.id)
        states_at = [(await rt.state_at(cp.id)).model_dump() for cp in history]
        return Outcome(run, graph, history, events, states_at[-1], states_at)
    finally:
        rt.close()


def fold_succeeded(graph: ExecutableGraph, run_input: Mapping[str, Any], writes: Mapping[str, Any],
                   statuses: Mapping[str, NodeStatus]) -> dict[str, Any]:
    done = [(n, writes[n]) for n in graph.order if statuses[n] == N.SUCCEEDED]
    return S.model_validate(fold(base_state(run_input), done, graph.reducers)).model_dump()


def check_dependency_invariant(dag: Dag, rec: Recorder, final: Mapping[str, NodeStatus]) -> None:
    """Every attempt started after all its deps finished: succeeded (code returned) or skipped;
    at least one succeeded (or no deps); never after a failed or cancelled dep."""
    for node, returned in rec.starts:
        deps = dag.deps[node]
        for d in deps:
            assert d in returned or final[d] == N.SKIPPED, (
                f"{node!r} started before its dependency {d!r} finished")
            assert final[d] not in (N.FAILED, N.CANCELLED), f"{node!r} started after {d!r} failed"
        if deps:
            assert any(d in returned for d in deps), f"{node!r} started with every dependency skipped"


# ---------------------------------------------------------------------------- 2. deterministic state


@SETTINGS
@given(dag=dags(), data=st.data())
def test_node_inputs_and_final_state_do_not_depend_on_completion_order(dag, data):
    totals = data.draw(totals_for(dag), label="totals")
    run_input = data.draw(RUN_INPUT, label="input")
    runs = []
    for label in ("first", "second"):
        delays = data.draw(delays_for(dag), label=f"{label} delays")
        k = data.draw(st.integers(1, 4), label=f"{label} max_concurrency")
        rec = Recorder()
        graph = build(dag, rec, delays=delays, totals=totals)
        out = run_bounded(execute(graph, run_input, max_concurrency=k))
        assert out.run.status == RunStatus.SUCCEEDED, out.run.error
        runs.append((rec, out))
    (rec_a, out_a), (rec_b, out_b) = runs
    ref = reference(dag, out_a.graph, run_input, totals)
    assert rec_a.inputs == rec_b.inputs == ref.inputs
    assert out_a.final_state == out_b.final_state == ref.final
    # the final checkpoint knows every node succeeded
    assert dict(out_a.history[-1].node_states) == {n: N.SUCCEEDED for n in dag.names}


@SETTINGS
@given(dag=dags(), data=st.data())
def test_canonical_order_is_topological_name_ordered_and_independent_of_declaration(dag, data):
    shuffled = data.draw(st.permutations(dag.names), label="declaration order")
    g1 = build(dag, Recorder())
    g2 = build(dag, Recorder(), declare_order=shuffled)
    assert g1.order == g2.order and g1.version == g2.version
    pos = {n: i for i, n in enumerate(g1.order)}
    for n in dag.names:
        assert all(pos[d] < pos[n] for d in dag.deps[n])
    # ties are broken by name: each node is the smallest name ready at its turn
    placed: set[str] = set()
    for n in g1.order:
        ready = [m for m in dag.names if m not in placed and set(dag.deps[m]) <= placed]
        assert n == min(ready)
        placed.add(n)
    anc = dag.ancestors()
    for a in dag.names:
        for b in dag.names:
            assert g1.is_ancestor(a, b) == (a in anc[b])
        assert g1.ancestors(a) == [m for m in g1.order if m in anc[a]]


# ---------------------------------------------------------------------------- 3. bounded concurrency


@SETTINGS
@given(dag=dags(), data=st.data())
def test_in_flight_node_attempts_never_exceed_max_concurrency(dag, data):
    delays = data.draw(delays_for(dag), label="delays")
    k = data.draw(st.integers(1, 4), label="runtime max_concurrency")
    run_limit = data.draw(st.none() | st.integers(1, 4), label="run max_concurrency")
    gauge = Gauge()
    rec = Recorder(gauges=[gauge])
    graph = build(dag, rec, delays=delays)
    out = run_bounded(execute(graph, {}, max_concurrency=k, run_limit=run_limit))
    assert out.run.status == RunStatus.SUCCEEDED, out.run.error
    assert set(rec.succeeded) == set(dag.names)
    assert 1 <= gauge.peak <= min(k, run_limit or k)


@SETTINGS
@given(dag1=dags(), dag2=dags(), data=st.data())
def test_runtime_shared_by_two_concurrent_runs_never_exceeds_its_max_concurrency(dag1, dag2, data):
    k = data.draw(st.integers(1, 4), label="runtime max_concurrency")
    limits = [data.draw(st.none() | st.integers(1, 4), label=f"run {i} max_concurrency") for i in (1, 2)]
    overall = Gauge()
    own = [Gauge(), Gauge()]
    graphs, recs = [], []
    for i, dag in enumerate((dag1, dag2)):
        delays = data.draw(delays_for(dag), label=f"run {i + 1} delays")
        recs.append(Recorder(gauges=[overall, own[i]]))
        graphs.append(build(dag, recs[-1], delays=delays, name=f"g{i + 1}"))

    async def both():
        rt = Runtime(MemoryStore(), max_concurrency=k)
        try:
            return await asyncio.gather(*(rt.start(g, {}, max_concurrency=lim)
                                          for g, lim in zip(graphs, limits)))
        finally:
            rt.close()

    runs = run_bounded(both())
    assert overall.peak <= k
    for gauge, lim in zip(own, limits):
        assert gauge.peak <= min(k, lim or k)
    # ready nodes waited for a slot: both runs completed every node
    for run, rec, dag in zip(runs, recs, (dag1, dag2)):
        assert run.status == RunStatus.SUCCEEDED, run.error
        assert rec.succeeded == set(dag.names)


def test_second_run_on_a_busy_shared_runtime_waits_for_a_slot_instead_of_failing():
    """Bounded concurrency: "Ready nodes wait in the queue". Two runs share a Runtime whose
    single slot the first run holds: the second must wait, not fail as 'can never run'."""
    async def slow(state):
        await asyncio.sleep(0.005)

    def graph(name: str) -> Graph:
        g = Graph(name)
        g.add_node("a", slow)
        return g

    async def both():
        rt = Runtime(MemoryStore(), max_concurrency=1)
        try:
            return await asyncio.gather(rt.start(graph("g1")), rt.start(graph("g2")))
        finally:
            rt.close()

    r1, r2 = run_bounded(both())
    assert r1.status == RunStatus.SUCCEEDED, r1.error
    assert r2.status == RunStatus.SUCCEEDED, r2.error


# ---------------------------------------------------------------------------- 4. dependency invariant


@SETTINGS
@given(dag=dags(), data=st.data())
def test_nodes_start_only_after_dependencies_and_skips_propagate(dag, data):
    behaviours = data.draw(st.fixed_dictionaries(
        {n: st.sampled_from(["ok", "ok", "skip", "even"]) for n in dag.names}), label="behaviours")
    delays = data.draw(delays_for(dag), label="delays")
    totals = data.draw(totals_for(dag), label="totals")
    k = data.draw(st.integers(1, 4), label="max_concurrency")
    rec = Recorder()
    graph = build(dag, rec, delays=delays, totals=totals, behaviours=behaviours)
    out = run_bounded(execute(graph, {}, max_concurrency=k))
    final = out.history[-1].node_states
    check_dependency_invariant(dag, rec, final)

    ref = reference(dag, graph, {}, totals, behaviours)
    assert out.run.status == RunStatus.SUCCEEDED, out.run.error
    assert {n: str(s) for n, s in final.items()} == ref.status
    assert rec.inputs == ref.inputs            # skipped nodes never ran; the others saw the fold
    assert out.final_state == ref.final
    for n in dag.names:
        if dag.deps[n] and all(final[d] == N.SKIPPED for d in dag.deps[n]):
            assert final[n] == N.SKIPPED


@SETTINGS
@given(dag=dags(min_nodes=2), data=st.data())
def test_no_node_starts_after_a_failed_dependency(dag, data):
    behaviours = data.draw(st.fixed_dictionaries(
        {n: st.sampled_from(["ok", "ok", "fail", "skip", "flaky"]) for n in dag.names}),
        label="behaviours")
    delays = data.draw(delays_for(dag), label="delays")
    rec = Recorder()
    graph = build(dag, rec, delays=delays, behaviours=behaviours)
    out = run_bounded(execute(graph, {}, max_concurrency=data.draw(st.integers(1, 4))))
    final = out.history[-1].node_states
    check_dependency_invariant(dag, rec, final)
    ref = reference(dag, graph, {}, None, behaviours)
    expect_failed = "failed" in ref.status.values()
    assert out.run.status == (RunStatus.FAILED if expect_failed else RunStatus.SUCCEEDED), out.run.error
    for n, s in final.items():
        if ref.status[n] == "blocked":
            assert s == N.PENDING and n not in rec.attempts
        if s == N.SUCCEEDED:
            assert rec.inputs[n] == ref.inputs[n]


@pytest.mark.parametrize("flag", [True, False])
def test_join_after_if_else_runs_when_one_branch_succeeded(flag):
    ran: list[str] = []

    def step(name):
        def fn(state):
            ran.append(name)
            return {"log": [name]}
        return fn

    g = Graph("ifelse", S)
    g.add_node("start", step("start"))
    g.add_node("yes", step("yes"), after=["start"], when=lambda s: flag)
    g.add_node("no", step("no"), after=["start"], when=lambda s: not flag)
    g.add_node("join", step("join"), after=["yes", "no"])
    g.add_node("after_yes", step("after_yes"), after=["yes"])

    async def go():
        rt = Runtime(MemoryStore(), max_concurrency=2)
        try:
            run = await rt.start(g, {})
            cp = (await rt.history(run.id))[-1]
            return run, cp, (await rt.state_at(cp.id)).log
        finally:
            rt.close()

    run, cp, log = run_bounded(go())
    taken, other = ("yes", "no") if flag else ("no", "yes")
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert cp.node_states[taken] == N.SUCCEEDED
    assert cp.node_states[other] == N.SKIPPED
    assert cp.node_states["join"] == N.SUCCEEDED
    # a node whose only dependency was skipped is skipped, not failed
    assert cp.node_states["after_yes"] == (N.SUCCEEDED if flag else N.SKIPPED)
    assert ran.index("join") > ran.index(taken)
    # the state folds succeeded nodes in canonical order: start, no, yes, after_yes, join
    assert log == (["start", "yes", "after_yes", "join"] if flag else ["start", "no", "join"])


def test_join_after_failed_branch_never_runs_and_run_fails():
    ran: list[str] = []

    def ok(state):
        ran.append("ok")

    def bad(state):
        raise InvalidInputError("no")

    def join(state):
        ran.append("join")

    g = Graph("failjoin", S)
    g.add_node("ok", ok)
    g.add_node("bad", bad)
    g.add_node("join", join, after=["ok", "bad"])

    run, cp = run_bounded(start_and_last_checkpoint(g))
    assert run.status == RunStatus.FAILED
    assert run.error["class"] == "invalid_input"
    assert cp.node_states["bad"] == N.FAILED
    assert cp.node_states["join"] == N.PENDING
    assert "join" not in ran


# ---------------------------------------------------------------------------- 5. scheduler


STATUS = st.sampled_from(list(NodeStatus))


@settings(max_examples=60, deadline=None)
@given(dag=dags(), data=st.data())
def test_frontier_returns_exactly_the_nodes_the_dependency_rule_allows(dag, data):
    graph = build(dag, Recorder())
    statuses = data.draw(st.fixed_dictionaries({n: STATUS for n in dag.names}), label="statuses")
    front = scheduler.frontier(graph, statuses)

    def verdict(n: str) -> str:
        ds = [statuses[d] for d in dag.deps[n]]
        if not ds:
            return "ready"
        if any(s not in FINISHED_NODE for s in ds):
            return "wait"
        if any(s in (N.FAILED, N.CANCELLED) for s in ds):
            return "blocked"
        return "ready" if N.SUCCEEDED in ds else "skip"

    for n in front.ready:
        assert statuses[n] in (N.PENDING, N.RETRYING)
        assert all(statuses[d] in FINISHED_NODE for d in dag.deps[n])
        assert not any(statuses[d] in (N.FAILED, N.CANCELLED) for d in dag.deps[n])
        assert not dag.deps[n] or any(statuses[d] == N.SUCCEEDED for d in dag.deps[n])
    for n in front.skip:
        assert statuses[n] == N.PENDING and dag.deps[n]
        assert all(statuses[d] == N.SKIPPED for d in dag.deps[n])
    # complete, disjoint, canonical order
    assert list(front.ready) == [n for n in graph.order
                                 if statuses[n] in (N.PENDING, N.RETRYING) and verdict(n) == "ready"]
    assert list(front.skip) == [n for n in graph.order if statuses[n] == N.PENDING and verdict(n) == "skip"]
    # incremental recomputation over some candidates agrees with the full frontier
    candidates = data.draw(st.sets(st.sampled_from(dag.names)), label="candidates")
    part = scheduler.frontier(graph, statuses, candidates)
    assert part.ready == tuple(n for n in front.ready if n in candidates)
    assert part.skip == tuple(n for n in front.skip if n in candidates)


@settings(max_examples=80, deadline=None)
@given(steps=st.lists(st.tuples(st.lists(st.integers(0, 40), max_size=8), st.integers(-2, 6)), max_size=12))
def test_the_ready_queue_starts_what_room_allows_in_canonical_order_and_drops_nothing(steps):
    """Each step queues what became due (in canonical order) and takes what a step's room
    allows: never more, nothing held back needlessly, the earliest in canonical order first,
    nothing lost or started twice."""
    queue = scheduler.ReadyQueue()
    waiting: set[int] = set()
    started: list[int] = []
    for due, room in steps:
        fresh = sorted(set(due) - waiting - set(started))
        waiting |= set(fresh)
        taken = [int(n[1:]) for n in queue.admit([f"n{i:02d}" for i in fresh], lambda name: int(name[1:]), room)]
        assert len(taken) == min(max(room, 0), len(waiting))
        assert taken == sorted(waiting)[:len(taken)]
        waiting -= set(taken)
        started += taken
        assert len(queue) == len(waiting)
    assert len(started) == len(set(started))


# ---------------------------------------------------------------------------- 6. trace ⇔ checkpoints


BEHAVIOURS = st.sampled_from(["ok", "ok", "ok", "skip", "even", "fail", "flaky"])


def random_run(dag: Dag, data: st.DataObject) -> tuple[Recorder, Outcome, Mapping[str, str], dict]:
    behaviours = data.draw(st.fixed_dictionaries({n: BEHAVIOURS for n in dag.names}), label="behaviours")
    delays = data.draw(delays_for(dag), label="delays")
    totals = data.draw(totals_for(dag), label="totals")
    run_input = data.draw(RUN_INPUT, label="input")
    rec = Recorder()
    graph = build(dag, rec, delays=delays, totals=totals, behaviours=behaviours)
    out = run_bounded(execute(graph, run_input, max_concurrency=data.draw(st.integers(1, 4))))
    return rec, out, behaviours, run_input


@SETTINGS
@given(dag=dags(), data=st.data())
def test_trace_is_gapless_and_rebuilds_every_checkpoints_node_states(dag, data):
    _, out, _, _ = random_run(dag, data)
    events, history = out.events, out.history
    assert gaps(events) == []
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert out.run.event_seq == len(events)
    assert events[0].type == "run.created"
    assert events[-1].type in ("run.succeed", "run.fail")
    assert [cp.seq for cp in history] == list(range(len(history)))
    assert [cp.event_seq for cp in history] == sorted(cp.event_seq for cp in history)
    for cp in history:
        rebuilt = node_states_from_events(out.graph.order, events, upto_seq=cp.event_seq)
        assert rebuilt == dict(cp.node_states), f"checkpoint {cp.seq} (event_seq {cp.event_seq})"
    assert node_states_from_events(out.graph.order, events) == dict(history[-1].node_states)
    assert history[-1].event_seq == len(events)
    # any checkpoint moved on by the events after it: the statuses now (the live debugger's view)
    for cp in history:
        assert states_after(cp.node_states, events, cp.event_seq) == dict(history[-1].node_states), cp.seq


@SETTINGS
@given(dag=dags(), data=st.data())
def test_state_at_every_checkpoint_is_the_fold_of_succeeded_nodes_in_canonical_order(dag, data):
    rec, out, _, run_input = random_run(dag, data)
    for cp, state in zip(out.history, out.states_at):
        assert state == fold_succeeded(out.graph, run_input, rec.writes, cp.node_states), (
            f"checkpoint {cp.seq}")


@SETTINGS
@given(dag=dags(), data=st.data())
def test_continuation_after_failure_reaches_reference_state_without_rerunning_succeeded_nodes(dag, data):
    """Terminal + no double execution + deterministic state, across a failure and a resume."""
    fail_once = data.draw(st.sets(st.sampled_from(dag.names), min_size=1), label="fail once")
    behaviours = data.draw(st.fixed_dictionaries(
        {n: st.sampled_from(["ok", "ok", "skip", "even"]) for n in dag.names}), label="behaviours")
    delays = data.draw(delays_for(dag), label="delays")
    totals = data.draw(totals_for(dag), label="totals")
    k = data.draw(st.integers(1, 4), label="max_concurrency")
    rec = Recorder()
    returned: dict[str, int] = {}
    failed: set[str] = set()
    g = Graph("again", S)
    for n in dag.names:
        inner = make_node(n, totals[n], rec, delays[n])

        async def fn(state, ctx, _inner=inner, _n=n):
            if _n in fail_once and _n not in failed:
                failed.add(_n)
                raise InvalidInputError(f"{_n} fails in the first run")
            out = await _inner(state, ctx)
            returned[_n] = returned.get(_n, 0) + 1
            return out

        g.add_node(n, fn, after=dag.deps[n], when=WHEN[behaviours[n]])
    graph = g.compile()

    async def go():
        rt = Runtime(MemoryStore(), max_concurrency=k)
        try:
            first = await rt.start(graph, {})
            runs = [first]
            while runs[-1].status == RunStatus.FAILED and len(runs) <= len(dag.names) + 1:
                runs.append(await rt.resume(runs[-1].id))
            again = [await rt.get_run(r.id) for r in runs]   # earlier runs as stored now
            last = runs[-1]
            history = await rt.history(last.id)
            events = await rt.events(last.id)
            state = (await rt.state_at(history[-1].id)).model_dump()
            return again, history, events, state
        finally:
            rt.close()

    runs, history, events, state = run_bounded(go())
    ref = reference(dag, graph, {}, totals, behaviours)
    if any(ref.status[n] == "succeeded" for n in fail_once):
        assert runs[0].status == RunStatus.FAILED
    # a failed run stays failed; its continuation links to it
    assert all(r.status == RunStatus.FAILED for r in runs[:-1])
    assert all(b.parent_run_id == a.id for a, b in itertools.pairwise(runs))
    assert runs[-1].status == RunStatus.SUCCEEDED, runs[-1].error
    assert all(count == 1 for count in returned.values()), returned
    assert set(returned) == {n for n, s in ref.status.items() if s == "succeeded"}
    assert rec.inputs == ref.inputs
    assert state == ref.final
    assert {n: str(s) for n, s in history[-1].node_states.items()} == ref.status
    assert gaps(events) == []
    for cp in history:
        assert node_states_from_events(graph.order, events, upto_seq=cp.event_seq) == dict(cp.node_states)


# ---------------------------------------------------------------------------- 7. write conflicts


def test_unordered_writers_of_a_last_value_field_fail_the_run_naming_both_and_the_field():
    def left(state):
        return {"answer": "L"}

    def right(state):
        return {"answer": "R"}

    g = Graph("conflict", S)
    g.add_node("root", lambda state: None)
    g.add_node("left", left, after=["root"])
    g.add_node("right", right, after=["root"])

    run, cp = run_bounded(start_and_last_checkpoint(g))
    assert run.status == RunStatus.FAILED
    message = run.error["message"]
    assert "'left'" in message and "'right'" in message and "'answer'" in message
    assert sorted(str(cp.node_states[n]) for n in ("left", "right")) == ["failed", "succeeded"]


def test_pure_fold_raises_write_conflict_for_unordered_last_value_writers():
    g = build(Dag(("p", "q"), {"p": (), "q": ()}), Recorder())
    with pytest.raises(WriteConflict) as exc:
        fold({}, [("p", {"answer": "1"}), ("q", {"answer": "2"})], g.reducers, g.is_ancestor)
    assert exc.value.field == "answer" and exc.value.nodes == ("p", "q")
    # appends, adds and merges never conflict
    fold({}, [("p", {"log": ["p"], "total": 1}), ("q", {"log": ["q"], "total": 2})], g.reducers,
         g.is_ancestor)


@SETTINGS
@given(dag=dags(min_nodes=2), data=st.data())
def test_two_writers_of_a_last_value_field_conflict_iff_unordered(dag, data):
    a, b = data.draw(st.lists(st.sampled_from(dag.names), min_size=2, max_size=2, unique=True),
                     label="writers")
    delays = data.draw(delays_for(dag), label="delays")
    rec = Recorder()
    g = Graph("lastvalue", S)
    for n in dag.names:
        inner = make_node(n, 1, rec, delays[n])
        if n in (a, b):
            async def fn(state, ctx, _inner=inner, _n=n):
                out = await _inner(state, ctx)
                return {**out, "answer": _n}
        else:
            fn = inner
        g.add_node(n, fn, after=dag.deps[n])
    graph = g.compile()
    out = run_bounded(execute(graph, {}, max_concurrency=data.draw(st.integers(1, 4))))
    if graph.is_ancestor(a, b) or graph.is_ancestor(b, a):
        last = b if graph.is_ancestor(a, b) else a
        assert out.run.status == RunStatus.SUCCEEDED, out.run.error
        assert out.final_state["answer"] == last
    else:
        assert out.run.status == RunStatus.FAILED
        message = out.run.error["message"]
        assert repr(a) in message and repr(b) in message and "'answer'" in message
