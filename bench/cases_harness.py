"""The benchmark cases on Shadow Harness (Runtime + SqlStore on a SQLite file).

Every case checks the outcome (run succeeded, every node ran once, the expected
checkpoints exist) before its timing is kept, so a broken runtime cannot report
a fast number. The time-travel cases (fork, replay, diff) also check that the
source run is unchanged, that no effect function was called, and the content of
the branch, report or diff.
"""

from __future__ import annotations

import asyncio
import os
from typing import Annotated

from _common import Sample, check, db_size, fresh_dir, now, settle
from pydantic import BaseModel

from runtime import (
    ExecutableGraph,
    Graph,
    NodeStatus,
    RunStatus,
    Runtime,
    SqlStore,
    append,
)

CALLS = {"n": 0}
RUNNING = {"now": 0, "peak": 0}
TIMES: dict[str, list[float]] = {"starts": [], "ends": []}   # when sleeper nodes start and end
SLEEP = 0.05


async def noop(state, ctx):
    CALLS["n"] += 1
    return None


async def sleeper(state, ctx):
    CALLS["n"] += 1
    RUNNING["now"] += 1
    RUNNING["peak"] = max(RUNNING["peak"], RUNNING["now"])
    TIMES["starts"].append(now())
    try:
        await asyncio.sleep(SLEEP)
    finally:
        TIMES["ends"].append(now())
        RUNNING["now"] -= 1
    return None


# ---------------------------------------------------------------- graphs

def chain_graph(n: int) -> ExecutableGraph:
    g = Graph(f"bench-chain-{n}")
    prev: list[str] = []
    for i in range(n):
        g.add_node(f"n{i:04d}", noop, after=prev)
        prev = [f"n{i:04d}"]
    return g.compile()


def fanout_graph(width: int) -> ExecutableGraph:
    g = Graph(f"bench-fanout-{width}")
    g.add_node("root", noop)
    fan = [f"f{i:04d}" for i in range(width)]
    for name in fan:
        g.add_node(name, noop, after=["root"])
    g.add_node("join", noop, after=fan)
    return g.compile()


def parallel_graph(n: int) -> ExecutableGraph:
    g = Graph(f"bench-parallel-{n}")
    for i in range(n):
        g.add_node(f"p{i:03d}", sleeper)
    return g.compile()


# ---------------------------------------------------------------- helpers

def _runtime(path: str, max_concurrency: int = 8) -> Runtime:
    return Runtime(store=SqlStore(f"sqlite:///{path}"), max_concurrency=max_concurrency)


async def _run_checked(rt: Runtime, graph: ExecutableGraph) -> tuple[float, object, list]:
    """Start a run of ``graph`` and time it; check it succeeded and every node ran once."""
    CALLS["n"] = 0
    settle()
    t0 = now()
    run = await rt.start(graph, {})
    elapsed = now() - t0
    check(run.status == RunStatus.SUCCEEDED, f"{graph.name}: run ended {run.status}, not succeeded")
    check(CALLS["n"] == len(graph.order), f"{graph.name}: {CALLS['n']} node calls, expected {len(graph.order)}")
    cps = await rt.history(run.id)
    final = cps[-1].node_states
    check(len(final) == len(graph.order) and all(s == NodeStatus.SUCCEEDED for s in final.values()),
          f"{graph.name}: the last checkpoint does not show every node succeeded")
    folded = [n for cp in cps for n in cp.nodes]
    check(sorted(folded) == sorted(graph.order),
          f"{graph.name}: checkpoints record {len(folded)} node completions, expected {len(graph.order)}")
    return elapsed, run, cps


# ---------------------------------------------------------------- cases

def each_rep(reps: int, name: str, once):
    """Run ``once(db_path)`` (a coroutine function) in a fresh directory per repetition;
    yield what each repetition returns."""
    for _ in range(reps):
        with fresh_dir(name) as d:
            yield asyncio.run(once(os.path.join(d, "harness.db")))


def chain(n: int, reps: int) -> Sample:
    """Measurement 1: wall time of a run of an n-node chain (one checkpoint per node)."""
    graph = chain_graph(n)
    sample = Sample()

    async def once(path: str) -> float:
        rt = _runtime(path)
        try:
            await _run_checked(rt, graph)            # warm-up run in the same store, not timed
            elapsed, _, cps = await _run_checked(rt, graph)
            check(len(cps) == n + 1, f"chain: {len(cps)} checkpoints, expected {n + 1}")
            check([cp.nodes for cp in cps[1:]] == [(name,) for name in graph.order],
                  "chain: checkpoints do not follow the chain order")
            return elapsed
        finally:
            rt.close()

    for elapsed in each_rep(reps, "h-chain", once):
        sample.add(elapsed)
    return sample


def fanout(width: int, reps: int, max_concurrency: int) -> Sample:
    """Measurement 2: wall time of a run of root -> width parallel nodes -> join."""
    graph = fanout_graph(width)
    sample = Sample()
    checkpoints: list[int] = []

    async def once(path: str) -> float:
        rt = _runtime(path, max_concurrency)
        try:
            await _run_checked(rt, graph)
            elapsed, _, cps = await _run_checked(rt, graph)
            check(cps[1].nodes == ("root",) and cps[-1].nodes == ("join",),
                  "fan-out: root must be checkpointed first and join last")
            checkpoints.append(len(cps))
            return elapsed
        finally:
            rt.close()

    for elapsed in each_rep(reps, "h-fanout", once):
        sample.add(elapsed)
    sample.info["checkpoints"] = sorted(set(checkpoints))
    return sample


def parallel(n: int, reps: int, max_concurrency: int) -> Sample:
    """Measurement 3: n independent nodes sleeping SLEEP seconds each, bounded concurrency."""
    graph = parallel_graph(n)
    sample = Sample()
    peaks: list[int] = []

    async def once(path: str) -> float:
        rt = _runtime(path, max_concurrency)
        try:
            await _run_checked(rt, graph)
            RUNNING["now"] = RUNNING["peak"] = 0
            elapsed, _, _ = await _run_checked(rt, graph)
            check(RUNNING["now"] == 0, "parallel: nodes still running after the run ended")
            peaks.append(RUNNING["peak"])
            return elapsed
        finally:
            rt.close()

    for elapsed in each_rep(reps, "h-parallel", once):
        sample.add(elapsed)
    sample.info["peaks"] = peaks
    return sample


def size(n: int) -> dict[str, float]:
    """Measurement 4: database bytes after one run of an n-node chain (nothing else in the file)."""
    graph = chain_graph(n)

    async def once(path: str) -> float:
        rt = _runtime(path)
        try:
            elapsed, _, cps = await _run_checked(rt, graph)
            check(len(cps) == n + 1, f"chain: {len(cps)} checkpoints, expected {n + 1}")
            return elapsed
        finally:
            rt.close()

    with fresh_dir("h-size") as d:
        path = os.path.join(d, "harness.db")
        elapsed = asyncio.run(once(path))
        return {"bytes": db_size(path), "seconds": elapsed}


def history(n: int, reps: int) -> Sample:
    """Measurement 5: list the whole history of an n-node chain from a fresh Runtime/SqlStore."""
    graph = chain_graph(n)
    sample = Sample()

    async def make(path: str) -> str:
        rt = _runtime(path)
        try:
            _, run, _ = await _run_checked(rt, graph)
            return run.id
        finally:
            rt.close()

    async def read(path: str, run_id: str) -> float:
        rt = _runtime(path)    # fresh Runtime and SqlStore: nothing cached from the run
        try:
            settle()
            t0 = now()
            cps = await rt.history(run_id)
            elapsed = now() - t0
            check(len(cps) == n + 1, f"history: {len(cps)} checkpoints, expected {n + 1}")
            check([cp.seq for cp in cps] == list(range(n + 1)), "history: checkpoints out of order")
            check(all(s == NodeStatus.SUCCEEDED for s in cps[-1].node_states.values())
                  and len(cps[-1].node_states) == n, "history: last checkpoint is not all succeeded")
            check(cps[n // 2].node_states[graph.order[n // 2 - 1]] == NodeStatus.SUCCEEDED
                  and cps[n // 2].node_states[graph.order[n // 2]] == NodeStatus.PENDING,
                  "history: a middle checkpoint has the wrong node states")
            return elapsed
        finally:
            rt.close()

    for _ in range(reps):
        with fresh_dir("h-history") as d:
            path = os.path.join(d, "harness.db")
            run_id = asyncio.run(make(path))
            sample.add(asyncio.run(read(path, run_id)))
    return sample


# ---------------------------------------------------------------- time travel

EFFECTS = {"n": 0}           # calls of the external effect function (must not move in a fork/replay)
FIRST = {"at": 0.0}          # when the first node call after CALLS was reset started
FORK_EFFECT_AT = 150         # the fork chain's node (1-based) that performs an effect
DIFF_ITEMS = 10_000          # list items in the diffed state


class Counter(BaseModel):
    x: int = 0


async def tool() -> dict:
    """The external side effect: counted, so a mocked run can prove it never ran."""
    EFFECTS["n"] += 1
    return {"ok": True}


def _number(ctx) -> int:
    return int(ctx.node[1:]) + 1     # n0000 is node 1


async def inc(state: Counter, ctx) -> dict:
    CALLS["n"] += 1
    if CALLS["n"] == 1:
        FIRST["at"] = now()
    return {"x": state.x + 1}


async def inc_with_effect(state: Counter, ctx) -> dict:
    CALLS["n"] += 1
    if CALLS["n"] == 1:
        FIRST["at"] = now()
    await ctx.effect("tool", tool, request={"i": _number(ctx)})
    return {"x": state.x + 1}


def counter_chain_graph(n: int, effect_at: frozenset[int] | None = frozenset()) -> ExecutableGraph:
    """An n-node chain, each node adding 1 to ``x`` (a run ends with x == n).

    Nodes whose 1-based number is in ``effect_at`` (every node when it is None) also
    perform one effect ``tool`` with request ``{"i": number}``.
    """
    tag = "all" if effect_at is None else ("-".join(map(str, sorted(effect_at))) or "none")
    g = Graph(f"bench-counter-{n}-fx-{tag}", Counter)
    prev: list[str] = []
    for i in range(n):
        fx = effect_at is None or (i + 1) in effect_at
        g.add_node(f"n{i:04d}", inc_with_effect if fx else inc, after=prev)
        prev = [f"n{i:04d}"]
    return g.compile()


async def _source_run(rt: Runtime, graph: ExecutableGraph, effects: int) -> tuple[object, list]:
    """A full run of the counter chain (not timed), checked; its run and checkpoints."""
    CALLS["n"] = 0
    before = EFFECTS["n"]
    run = await rt.start(graph, {})
    n = len(graph.order)
    check(run.status == RunStatus.SUCCEEDED, f"{graph.name}: source run ended {run.status}")
    check(CALLS["n"] == n, f"{graph.name}: {CALLS['n']} node calls, expected {n}")
    check(EFFECTS["n"] - before == effects, f"{graph.name}: {EFFECTS['n'] - before} effects, expected {effects}")
    cps = await rt.history(run.id)
    check(len(cps) == n + 1, f"{graph.name}: {len(cps)} checkpoints, expected {n + 1}")
    check((await rt.state_at(cps[-1].id)).x == n, f"{graph.name}: final x is not {n}")
    return run, cps


async def _at_node(rt: Runtime, cps: list, k: int):
    """The checkpoint where node k (1-based) was folded, checked to hold x == k."""
    found = [cp for cp in cps if cp.nodes == (f"n{k - 1:04d}",)]
    check(len(found) == 1, f"no single checkpoint folds node {k}")
    check((await rt.state_at(found[0].id)).x == k, f"the checkpoint of node {k} does not hold x == {k}")
    return found[0]


async def _fingerprint(rt: Runtime, run_id: str) -> tuple:
    """What must not change in a source run when it is forked or replayed."""
    run = await rt.get_run(run_id)
    cps = await rt.history(run_id)
    journal = rt.store.journal([run_id])
    return (run.status, run.head_seq, run.event_seq, run.updated_at, [(c.id, c.seq) for c in cps],
            dict((await rt.state_at(cps[-1].id)).model_dump()), len(await rt.events(run_id)),
            [(e.node, e.status, e.result) for e in journal])


def fork_chain(n: int, reps: int, with_effect: bool = True) -> tuple[Sample, Sample]:
    """Patched fork at the middle of a finished n-node chain, run to the end.

    After a full run, the checkpoint where node n//2 was folded (x == n//2) is found
    outside the timed region. Timed: ``await rt.fork(cp.id, patch={"x": 1000})``, which
    runs the remaining n//2 nodes. With ``with_effect`` node FORK_EFFECT_AT performs an
    effect in the source run; the fork must serve it MOCKED from the source's journal
    (the effect function is not called). Returns (total, fork call to the first node
    starting).
    """
    k = n // 2
    effect_at = frozenset({FORK_EFFECT_AT}) if with_effect else frozenset()
    graph = counter_chain_graph(n, effect_at)
    total, first = Sample(), Sample()

    async def once(path: str) -> tuple[float, float]:
        rt = _runtime(path)
        try:
            for _ in ("warm-up", "timed"):
                src, cps = await _source_run(rt, graph, len(effect_at))
                cp = await _at_node(rt, cps, k)
                before = await _fingerprint(rt, src.id)
                CALLS["n"], FIRST["at"] = 0, 0.0
                effects = EFFECTS["n"]
                settle()
                t0 = now()
                branch = await rt.fork(cp.id, patch={"x": 1000})
                elapsed = now() - t0
                to_first = FIRST["at"] - t0
                check(branch.status == RunStatus.SUCCEEDED, f"fork: branch ended {branch.status}")
                check(CALLS["n"] == n - k, f"fork: {CALLS['n']} node calls, expected {n - k}")
                check(EFFECTS["n"] == effects, f"fork: {EFFECTS['n'] - effects} effects executed, expected 0")
                bcps = await rt.history(branch.id)
                check((await rt.state_at(bcps[-1].id)).x == 1000 + n - k,
                      f"fork: final x is not {1000 + n - k}")
                check(branch.parent_run_id == src.id and branch.base_checkpoint_id == cp.id,
                      "fork: the branch does not point at its source checkpoint")
                check(sorted(x for c in bcps for x in c.nodes) == list(graph.order[k:]),
                      f"fork: the branch's checkpoints do not fold exactly nodes {k + 1}..{n}")
                served = rt.store.journal([branch.id])
                want = [(f"n{i - 1:04d}", "tool", "mocked", {"i": i}) for i in sorted(effect_at) if i > k]
                check([(e.node, e.name, e.status.value, e.request) for e in served] == want,
                      f"fork: effect journal {[(e.node, e.status.value) for e in served]}, expected {want}")
                check(await _fingerprint(rt, src.id) == before, "fork: the source run changed")
            return elapsed, to_first
        finally:
            rt.close()

    for elapsed, to_first in each_rep(reps, "h-fork", once):
        total.add(elapsed)
        first.add(to_first)
    return total, first


def replay_chain(n: int, reps: int) -> tuple[Sample, Sample]:
    """Replay of a finished n-node chain whose every node performs one effect.

    Timed: ``await rt.replay(cp.id)`` from the checkpoint of node n//2 (n - n//2 nodes
    re-executed) and ``await rt.replay(run.id)`` (from the start: all n nodes), each
    returning its ReplayReport. Every effect must be served MOCKED (the effect function
    is not called) and the report must say ``same``. Returns (from the middle, from
    the origin).
    """
    k = n // 2
    graph = counter_chain_graph(n, None)
    middle, whole = Sample(), Sample()

    async def timed(rt: Runtime, src, target: str, nodes: int) -> float:
        before = await _fingerprint(rt, src.id)
        CALLS["n"] = 0
        effects = EFFECTS["n"]
        settle()
        t0 = now()
        report = await rt.replay(target)
        elapsed = now() - t0
        check(report.status == RunStatus.SUCCEEDED.value, f"replay: ended {report.status}")
        check(report.same, f"replay: report differs at {[d.node for d in report.differences()][:5]}")
        check(CALLS["n"] == nodes, f"replay: {CALLS['n']} node calls, expected {nodes}")
        check(EFFECTS["n"] == effects, f"replay: {EFFECTS['n'] - effects} effects executed, expected 0")
        verdicts = [nr.verdict for nr in report.nodes]
        check(verdicts == ["inherited"] * (n - nodes) + ["same"] * nodes,
              f"replay: node verdicts are not {n - nodes} inherited then {nodes} same")
        served = rt.store.journal([report.run_id])
        check(len(served) == nodes and all(e.status.value == "mocked" for e in served),
              f"replay: {len(served)} journal entries, expected {nodes} mocked")
        rcps = await rt.history(report.run_id)
        check((await rt.state_at(rcps[-1].id)).x == n, f"replay: final x is not {n}")
        check(await _fingerprint(rt, src.id) == before, "replay: the source run changed")
        return elapsed

    async def once(path: str) -> tuple[float, float]:
        rt = _runtime(path)
        try:
            for _ in ("warm-up", "timed"):
                src, cps = await _source_run(rt, graph, n)
                cp = await _at_node(rt, cps, k)
                from_middle = await timed(rt, src, cp.id, n - k)
                from_origin = await timed(rt, src, src.id, n)
            return from_middle, from_origin
        finally:
            rt.close()

    for m, w in each_rep(reps, "h-replay", once):
        middle.add(m)
        whole.add(w)
    return middle, whole


class Listing(BaseModel):
    items: Annotated[list[dict], append] = []
    title: str = ""


async def write_items(state: Listing, ctx) -> dict:
    return {"items": [{"id": i, "text": f"item {i}"} for i in range(DIFF_ITEMS)], "title": "draft"}


async def append_one(state: Listing, ctx) -> dict:
    return {"items": [{"id": DIFF_ITEMS, "text": "one more"}], "title": "final"}



def diff_graph() -> ExecutableGraph:
    g = Graph("bench-diff", Listing)
    g.add_node("write", write_items)
    g.add_node("add", append_one, after=["write"])
    return g.compile()


def diff_states(reps: int) -> Sample:
    """``rt.diff`` of the checkpoints before and after a node that appends 1 item to a
    list of DIFF_ITEMS and changes one field, from a fresh Runtime/SqlStore (both
    states are loaded from the store inside the timed region)."""
    graph = diff_graph()
    sample = Sample()

    async def make(path: str) -> list[tuple[str, str]]:
        rt = _runtime(path)
        try:
            pairs = []
            for _ in ("warm-up", "timed"):
                run = await rt.start(graph, {})
                check(run.status == RunStatus.SUCCEEDED, f"diff: run ended {run.status}")
                cps = await rt.history(run.id)
                check([cp.nodes for cp in cps] == [(), ("write",), ("add",)], "diff: unexpected checkpoints")
                pairs.append((cps[1].id, cps[2].id))
            return pairs
        finally:
            rt.close()

    async def read(path: str, pairs: list[tuple[str, str]]) -> float:
        rt = Runtime(store=SqlStore(f"sqlite:///{path}"), graphs=[graph])   # nothing cached from the runs
        try:
            for a, b in pairs:
                settle()
                t0 = now()
                changes = await rt.diff(a, b)
                elapsed = now() - t0
                got = [(c.path, c.op, c.old, c.new) for c in changes]
                want = [(("items", DIFF_ITEMS), "added", None, {"id": DIFF_ITEMS, "text": "one more"}),
                        (("title",), "changed", "draft", "final")]
                check(got == want, f"diff: {len(got)} changes {got[:3]}, expected {want}")
            return elapsed
        finally:
            rt.close()

    for _ in range(reps):
        with fresh_dir("h-diff") as d:
            path = os.path.join(d, "harness.db")
            pairs = asyncio.run(make(path))
            sample.add(asyncio.run(read(path, pairs)))
    return sample


# ---------------------------------------------------------------- state growth

MESSAGE_BYTES = 500


def message(i: int) -> str:
    """Node i's message: about MESSAGE_BYTES bytes, distinct per node."""
    head = f"message {i:04d} "
    return head + "x" * (MESSAGE_BYTES - len(head))


class Transcript(BaseModel):
    messages: Annotated[list[str], append] = []


async def say(state: Transcript, ctx) -> dict:
    CALLS["n"] += 1
    return {"messages": [message(int(ctx.node[1:]))]}


def growth_graph(n: int) -> ExecutableGraph:
    """An n-node chain, each node appending one ~500-byte message: the state a node
    reads grows with its position, what it writes does not."""
    g = Graph(f"bench-growth-{n}", Transcript)
    prev: list[str] = []
    for i in range(n):
        g.add_node(f"n{i:04d}", say, after=prev)
        prev = [f"n{i:04d}"]
    return g.compile()


def growth(n: int, reps: int, nodes: int = 800) -> Sample:
    """Wall time of runs of the growing-transcript chain of n nodes (one checkpoint per
    node). Each repetition times ``nodes // n`` runs in its store (after one warm-up run),
    so every chain length gets the same number of node executions and short chains are
    not at the mercy of one scheduling hiccup."""
    graph = growth_graph(n)
    expected = [message(i) for i in range(n)]
    sample = Sample()

    async def once(path: str) -> list[float]:
        rt = _runtime(path)
        try:
            await _run_checked(rt, graph)            # warm-up run in the same store, not timed
            times = []
            for _ in range(max(1, nodes // n)):
                elapsed, _, cps = await _run_checked(rt, graph)
                check(len(cps) == n + 1, f"growth: {len(cps)} checkpoints, expected {n + 1}")
                final = await rt.state_at(cps[-1].id)
                check(final.messages == expected, f"growth: final state holds {len(final.messages)} messages, "
                                                  f"expected {n} in node order")
                times.append(elapsed)
            return times
        finally:
            rt.close()

    for times in each_rep(reps, "h-growth", once):
        sample.values.extend(times)
    return sample
