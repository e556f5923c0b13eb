"""The benchmark cases on Shadow Harness (Runtime + SqlStore on a SQLite file).

Every case checks the outcome (run succeeded, every node ran once, the expected
checkpoints exist) before its timing is kept, so a broken runtime cannot report
a fast number.
"""

from __future__ import annotations

import asyncio
import os

from runtime import ExecutableGraph, Graph, NodeStatus, Runtime, RunStatus, SqlStore

from _common import Sample, check, db_size, fresh_dir, now, settle

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

    for _ in range(reps):
        with fresh_dir("h-chain") as d:
            sample.add(asyncio.run(once(os.path.join(d, "harness.db"))))
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

    for _ in range(reps):
        with fresh_dir("h-fanout") as d:
            sample.add(asyncio.run(once(os.path.join(d, "harness.db"))))
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

    for _ in range(reps):
        with fresh_dir("h-parallel") as d:
            sample.add(asyncio.run(once(os.path.join(d, "harness.db"))))
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
