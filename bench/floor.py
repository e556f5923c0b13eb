"""How fast the ReAct loop of ``agents.py`` could run with the records and store it has now.

``floor_run`` does, for each node of the loop, only what its records require: a task for
the node's coroutine (started eagerly on Python 3.12, as the runtime does; on 3.11 with a
turn of the event loop), its writes turned to JSON and back,
the appended message validated alone and folded, the four records of an attempt (two
trace events, the attempt, its writes) and a checkpoint with every instance's status,
a commit every 5 ms (the default group commit), and the run's end forced to disk with a
full snapshot. No scheduler, no instance bookkeeping, no limits, retries, interrupts,
streaming: it knows the loop's shape in advance. The runtime's own runs, on the same
kind of store, alternate with it in one process (the machine's slow spells hit both):
the ratio says how much of a run the engine's bookkeeping takes, and so how far a
leaner engine could go without changing what is stored.

    python bench/floor.py [--reps N]
"""

from __future__ import annotations

import argparse
import asyncio
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=8, help="fresh stores per side, each timing 3 runs")
    args = parser.parse_args()
    graph = A.react_graph()
    times: dict[str, list[float]] = {"floor": [], "runtime": []}

    async def side(kind: str, path: str) -> None:
        if kind == "runtime":
            rt = A._runtime(path)
            try:
                await rt.start(graph, {})   # warm-up, as in agents.py
                for _ in range(3):
                    gc.collect()
                    t = time.perf_counter()
                    await rt.start(graph, {})
                    times[kind].append(time.perf_counter() - t)
            finally:
                rt.close()
            return
        store = SqlStore(f"sqlite:///{path}")
        try:
            if await floor_run(store) != A.expected_messages():
                raise SystemExit("floor: the messages are not the loop's")
            for _ in range(3):
                gc.collect()
                t = time.perf_counter()
                await floor_run(store)
                times[kind].append(time.perf_counter() - t)
        finally:
            store.close()

    for rep in range(args.reps):
        for kind in ("floor", "runtime") if rep % 2 == 0 else ("runtime", "floor"):
            with fresh_dir(f"floor-{kind}") as d:
                asyncio.run(side(kind, os.path.join(d, "harness.db")))
    per = {k: [v / A.ITERATIONS for v in vs] for k, vs in times.items()}
    print(f"ReAct loop, {A.ITERATIONS} iterations, SqlStore; per iteration, {len(per['floor'])} runs each")
    for k, vs in per.items():
        print(f"  {k:8s} median {statistics.median(vs) * 1e6:6.0f} µs   min {min(vs) * 1e6:6.0f} µs")
    print(f"  floor / runtime: {statistics.median(per['floor']) / statistics.median(per['runtime']):.2f} "
          f"(medians), {min(per['floor']) / min(per['runtime']):.2f} (minima)")


if __name__ == "__main__":
    main()
