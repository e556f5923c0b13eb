"""How fast the ReAct loop and the map-reduce of ``agents.py`` could run with the records
and store they have now.

``floor_run`` does, for each node of the loop, only what its records require: a task for
the node's coroutine (started eagerly on Python 3.12, as the runtime does; on 3.11 with a
turn of the event loop), its writes turned to JSON and back, the appended message
validated alone and folded, the four records of an attempt (two trace events, the
attempt, its writes) and a checkpoint with every instance's status, a commit every 5 ms
(the default group commit), and the run's end forced to disk with a full snapshot.
``map_floor_run`` does the same for ``plan``, the map's items ``max_concurrency`` at a
time (each item with its own copy of the state, one checkpoint per step of finished
items, their results folded in item order) and ``reduce``; and, as ``2 rows``, the same
with two rows per item instead of four (no ``node.start`` event for an item, its writes on
its attempt row): what a leaner record of map items would save. No scheduler, no instance
bookkeeping, no limits, retries, interrupts, streaming: each knows its graph's shape in
advance. The runtime's own runs, on the same kind of store, alternate with it in one
process (the machine's slow spells hit both): the ratio says how much of a run the
engine's bookkeeping takes, and so how far a leaner engine could go without changing
what is stored.

    python bench/floor.py [--reps N]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import itertools
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pydantic_core import from_json, to_json  # noqa: E402

import agents as A  # noqa: E402
from _common import fresh_dir  # noqa: E402
from runtime.core.records import (  # noqa: E402
    Batch, Checkpoint, CheckpointSource, EventType, NodeAttempt, PendingWrite, Run, RunKind, TraceEvent, WriteKind,
)
from runtime.core.states import NodeStatus, RunStatus  # noqa: E402
from runtime.store.base import CheckpointStore  # noqa: E402
from runtime.store.sql import SqlStore  # noqa: E402

GROUP_COMMIT = 0.005
EAGER = sys.version_info >= (3, 12)
_ids = itertools.count()


async def floor_run(store: CheckpointStore, iterations: int = A.ITERATIONS) -> list[str]:
    """One ReAct loop, recorded as the runtime records it; returns the final messages."""
    now = time.time
    rid = f"floor-{os.getpid()}-{next(_ids)}"
    run = Run(rid, rid, "floor", "v", RunStatus.RUNNING, RunKind.MAIN, {}, now(), now(), fence=1, lease_owner="floor")
    store.create_run(Batch(run_id=rid, run=run, checkpoints=[
        Checkpoint(f"cp-{rid}-0", rid, 0, None, (), {}, 0, now(), CheckpointSource.INPUT)]))
    batch, seq, cp_seq, parent, last = Batch(run_id=rid, fence=1), 0, 0, f"cp-{rid}-0", now()
    statuses: dict[str, NodeStatus] = {}
    messages: list[str] = []
    scratch = A.Conversation()
    validator = A.Conversation.__pydantic_validator__
    loop = asyncio.get_running_loop()
    for i in range(2 * iterations - 1):   # model, tool, model, ... model (the last tool is not needed)
        node = ("model" if i % 2 == 0 else "tool") + (f"#{i // 2}" if i >= 2 else "")
        started = now()
        statuses[node] = NodeStatus.RUNNING
        seq += 1
        batch.events.append(TraceEvent(rid, seq, started, EventType.NODE_START, node, 1, {}))
        state = A.Conversation.model_construct(messages=list(messages))
        coro = (A.h_model if i % 2 == 0 else A.h_tool)(state, None)
        if EAGER:   # as the runtime starts attempts there (``executor.EAGER``)
            task = asyncio.Task(coro, loop=loop, eager_start=True)
        else:
            task = loop.create_task(coro)
            await asyncio.sleep(0)
        writes = from_json(to_json(task.result()))
        validator.validate_assignment(scratch, "messages", writes["messages"])
        messages = [*messages, *scratch.__dict__["messages"]]
        batch.writes.append(PendingWrite(rid, cp_seq, node, 1, WriteKind.WRITES, writes, now()))
        batch.attempts.append(NodeAttempt(rid, node, 1, NodeStatus.SUCCEEDED, started, now(), None, None, None))
        statuses[node] = NodeStatus.SUCCEEDED
        seq += 1
        batch.events.append(TraceEvent(rid, seq, now(), EventType.NODE_SUCCEED, node, 1, {}))
        cp_seq += 1
        cp = Checkpoint(f"cp-{rid}-{cp_seq}", rid, cp_seq, parent, (node,), dict(statuses), seq, now(),
                        CheckpointSource.STEP, changed=(node,))
        parent = cp.id
        batch.checkpoints.append(cp)
        if now() - last >= GROUP_COMMIT:
            batch.run = run = run.evolve(event_seq=seq, head_seq=cp_seq)
            store.commit(batch)
            batch, last = Batch(run_id=rid, fence=1), now()
    cp_seq += 1
    batch.checkpoints.append(Checkpoint(f"cp-{rid}-{cp_seq}", rid, cp_seq, parent, (), dict(statuses), seq, now(),
                                        CheckpointSource.STEP, snapshot={"messages": messages}, changed=()))
    batch.run = run.evolve(status=RunStatus.SUCCEEDED, event_seq=seq, head_seq=cp_seq, lease_owner=None)
    batch.durable = True
    store.commit(batch)
    return messages



async def _plan(state: A.Work, ctx: object) -> dict:
    return {"items": list(range(A.ITEMS))}


async def map_floor_run(store: CheckpointStore, items: int = A.ITEMS, width: int = A.MAP_CONCURRENCY,
                        two_rows: bool = False) -> list[int]:
    """The map-reduce of ``agents.py`` recorded as the runtime records it: ``plan``, then
    ``width`` items at a time (each with its own copy of the state, records and task, a
    checkpoint per step of finished items, in item order), then ``reduce``; returns the results.
    ``two_rows``: what a store keeping two rows per item would cost (not what is stored today):
    no ``node.start`` event for an item, and its writes on its attempt row, not a row of their own."""
    now = time.time
    rid = f"floor-{os.getpid()}-{next(_ids)}"
    run = Run(rid, rid, "floor", "v", RunStatus.RUNNING, RunKind.MAIN, {}, now(), now(), fence=1, lease_owner="floor")
    store.create_run(Batch(run_id=rid, run=run, checkpoints=[
        Checkpoint(f"cp-{rid}-0", rid, 0, None, (), {}, 0, now(), CheckpointSource.INPUT)]))
    batch, last = Batch(run_id=rid, fence=1), now()
    seq = cp_seq = 0
    parent = f"cp-{rid}-0"
    statuses: dict[str, NodeStatus] = {"plan": NodeStatus.PENDING, "work": NodeStatus.PENDING,
                                       "reduce": NodeStatus.PENDING}
    scratch = A.Work()
    validator = A.Work.__pydantic_validator__
    loop = asyncio.get_running_loop()
    state: dict[str, list[int] | int] = {"items": [], "results": [], "total": 0}

    def event(type_: EventType, node: str) -> None:
        nonlocal seq
        seq += 1
        batch.events.append(TraceEvent(rid, seq, now(), type_, node, 1, {}))

    async def run_all(calls: list[tuple[str, object]]) -> list[tuple[str, float, dict]]:
        """Start each node (its event, its task), then take their writes in order."""
        started = []
        for node, coro in calls:
            statuses[node] = NodeStatus.RUNNING
            if not (two_rows and node[-1] == "]"):
                event(EventType.NODE_START, node)
            if EAGER:
                task = asyncio.Task(coro, loop=loop, eager_start=True)  # type: ignore[arg-type]
            else:
                task = loop.create_task(coro)  # type: ignore[arg-type]
            started.append((node, now(), task))
        if not EAGER:
            await asyncio.sleep(0)
        return [(node, at, task.result()) for node, at, task in started]

    def record(node: str, at: float, value: dict) -> dict:
        raw = to_json(value)
        writes = from_json(raw)
        if two_rows and node[-1] == "]":   # the writes' JSON in a text column of the attempt
            batch.attempts.append(NodeAttempt(rid, node, 1, NodeStatus.SUCCEEDED, at, now(), None, None, raw.decode()))
        else:
            batch.writes.append(PendingWrite(rid, cp_seq, node, 1, WriteKind.WRITES, writes, now()))
            batch.attempts.append(NodeAttempt(rid, node, 1, NodeStatus.SUCCEEDED, at, now(), None, None, None))
        statuses[node] = NodeStatus.SUCCEEDED
        event(EventType.NODE_SUCCEED, node)
        return writes

    def checkpoint(nodes: tuple[str, ...], snapshot: dict | None = None) -> None:
        nonlocal cp_seq, parent, batch, last
        cp_seq += 1
        cp = Checkpoint(f"cp-{rid}-{cp_seq}", rid, cp_seq, parent, nodes, dict(statuses), seq, now(),
                        CheckpointSource.STEP, snapshot=snapshot, changed=nodes)
        parent = cp.id
        batch.checkpoints.append(cp)
        if snapshot is None and now() - last >= GROUP_COMMIT:
            batch.run = run.evolve(event_seq=seq, head_seq=cp_seq)
            store.commit(batch)
            batch, last = Batch(run_id=rid, fence=1), now()

    [(node, at, value)] = await run_all([("plan", _plan(A.Work.model_construct(**state), None))])
    state["items"] = record(node, at, value)["items"]
    names = [f"work[{i}]" for i in range(items)]
    statuses.update(dict.fromkeys(names, NodeStatus.PENDING))
    statuses["work"] = NodeStatus.RUNNING
    checkpoint(("plan",))
    for first in range(0, items, width):
        step = names[first:first + width]
        done = await run_all([(name, A.h_work(A.Work.model_construct(items=list(state["items"]), results=[]),
                                              None, item=first + k)) for k, name in enumerate(step)])
        for node, at, value in done:
            validator.validate_assignment(scratch, "results", record(node, at, value)["results"])
            state["results"] = [*state["results"], *scratch.__dict__["results"]]
        if first + width >= items:
            statuses["work"] = NodeStatus.SUCCEEDED
        checkpoint(tuple(step))
    [(node, at, value)] = await run_all([("reduce", A.h_reduce(A.Work.model_construct(**state), None))])
    state["total"] = record(node, at, value)["total"]
    checkpoint(("reduce",), snapshot=dict(state))
    batch.run = run.evolve(status=RunStatus.SUCCEEDED, event_seq=seq, head_seq=cp_seq, lease_owner=None)
    batch.durable = True
    store.commit(batch)
    return state["results"]  # type: ignore[return-value]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=8, help="fresh stores per side, each timing 3 runs")
    args = parser.parse_args()
    two_rows = functools.partial(map_floor_run, two_rows=True)
    cases = {   # name: (floors by label, their expected result, the runtime's graph and start options, units per run)
        f"ReAct loop, {A.ITERATIONS} iterations; per iteration":
            ({"floor": floor_run}, A.expected_messages(), A.react_graph(), {}, A.ITERATIONS),
        f"map-reduce over {A.ITEMS} items, max_concurrency {A.MAP_CONCURRENCY}; per item":
            ({"floor": map_floor_run, "2 rows": two_rows}, A.expected_results(), A.mapreduce_graph(),
             {"max_concurrency": A.MAP_CONCURRENCY}, A.ITEMS),
    }
    for name, (floors, expected, graph, options, units) in cases.items():
        times: dict[str, list[float]] = {**{k: [] for k in floors}, "runtime": []}

        async def side(kind: str, path: str) -> None:
            if kind == "runtime":
                rt = A._runtime(path, A.MAP_CONCURRENCY)
                try:
                    await rt.start(graph, {}, **options)   # warm-up, as in agents.py
                    for _ in range(3):
                        gc.collect()
                        t = time.perf_counter()
                        await rt.start(graph, {}, **options)
                        times[kind].append(time.perf_counter() - t)
                finally:
                    rt.close()
                return
            floor = floors[kind]
            store = SqlStore(f"sqlite:///{path}")
            try:
                if await floor(store) != expected:
                    raise SystemExit(f"floor: {name}: not the graph's result")
                for _ in range(3):
                    gc.collect()
                    t = time.perf_counter()
                    await floor(store)
                    times[kind].append(time.perf_counter() - t)
            finally:
                store.close()

        for rep in range(args.reps):
            kinds = [*floors, "runtime"]
            for kind in kinds if rep % 2 == 0 else reversed(kinds):
                with fresh_dir(f"floor-{kind}") as d:
                    asyncio.run(side(kind, os.path.join(d, "harness.db")))
        per = {k: [v / units for v in vs] for k, vs in times.items()}
        print(f"{name}, SqlStore, {len(per['floor'])} runs each (python {sys.version.split()[0]})")
        for k, vs in per.items():
            print(f"  {k:8s} median {statistics.median(vs) * 1e6:6.0f} µs   min {min(vs) * 1e6:6.0f} µs")
        for k in floors:
            print(f"  {k} / runtime: {statistics.median(per[k]) / statistics.median(per['runtime']):.2f} "
                  f"(medians), {min(per[k]) / min(per['runtime']):.2f} (minima)")


if __name__ == "__main__":
    main()
