"""The same benchmark cases on LangGraph: StateGraph + SqliteSaver on a SQLite file.

Two configurations are measured for the per-node cases:

* ``default``: SqliteSaver as shipped (it sets WAL; SQLite's default
  ``synchronous=FULL`` stays, so each checkpoint commit is fsynced) and
  ``invoke`` defaults (``durability="async"``: a step's checkpoint is written
  while the next step already runs).
* ``matched``: each step is committed before the next one starts
  (``durability="sync"``), WAL with ``synchronous=NORMAL`` (survives a process
  crash, not a power cut): the SQLite settings Shadow Harness uses. Shadow
  Harness's ordinary steps are lighter still: pure outcomes share a commit for
  up to ``group_commit`` (a crash re-runs them, as with ``durability="async"``);
  only effects, pauses and the run's end are forced to disk first.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import operator
from functools import partial
from typing import Annotated, TypedDict

from _common import Sample, check, db_size, fresh_dir, now, settle
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph

CALLS = {"n": 0}
RUNNING = {"now": 0, "peak": 0}
FIRST = {"at": 0.0}   # when the first node call after CALLS was reset started
SLEEP = 0.05
MODES = ("default", "matched")


class State(TypedDict, total=False):
    x: int


def noop(state: State) -> dict:
    CALLS["n"] += 1
    return {}


def inc(state: State) -> dict:
    CALLS["n"] += 1
    if CALLS["n"] == 1:
        FIRST["at"] = now()
    return {"x": state.get("x", 0) + 1}


async def sleeper(state: State) -> dict:
    CALLS["n"] += 1
    RUNNING["now"] += 1
    RUNNING["peak"] = max(RUNNING["peak"], RUNNING["now"])
    try:
        await asyncio.sleep(SLEEP)
    finally:
        RUNNING["now"] -= 1
    return {}


# ---------------------------------------------------------------- graphs

def chain_builder(n: int) -> StateGraph:
    b = StateGraph(State)
    for i in range(n):
        b.add_node(f"n{i:04d}", noop)
    b.add_edge(START, "n0000")
    for i in range(1, n):
        b.add_edge(f"n{i - 1:04d}", f"n{i:04d}")
    b.add_edge(f"n{n - 1:04d}", END)
    return b


def counter_chain_builder(n: int) -> StateGraph:
    """The chain, each node adding 1 to ``x``: a run ends with x == n."""
    b = StateGraph(State)
    for i in range(n):
        b.add_node(f"n{i:04d}", inc)
    b.add_edge(START, "n0000")
    for i in range(1, n):
        b.add_edge(f"n{i - 1:04d}", f"n{i:04d}")
    b.add_edge(f"n{n - 1:04d}", END)
    return b


def fanout_builder(width: int) -> StateGraph:
    """root -> width nodes (one superstep) -> join (waits for all of them)."""
    b = StateGraph(State)
    b.add_node("root", noop)
    fan = [f"f{i:04d}" for i in range(width)]
    for name in fan:
        b.add_node(name, noop)
        b.add_edge("root", name)
    b.add_node("join", noop)
    b.add_edge(START, "root")
    b.add_edge(fan, "join")
    b.add_edge("join", END)
    return b


def parallel_builder(n: int) -> StateGraph:
    b = StateGraph(State)
    for i in range(n):
        b.add_node(f"p{i:03d}", sleeper)
        b.add_edge(START, f"p{i:03d}")
    return b


# ---------------------------------------------------------------- helpers

def _config(thread: str, **extra: object) -> dict:
    return {"configurable": {"thread_id": thread}, "recursion_limit": 100_000, **extra}


def _saver(path: str, mode: str) -> tuple[sqlite3.Connection, SqliteSaver]:
    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    if mode == "matched":
        conn.execute("PRAGMA synchronous=NORMAL")
    return conn, saver


def _invoke_checked(graph, thread: str, mode: str, nodes: int, checkpoints: int) -> float:
    CALLS["n"] = 0
    config = _config(thread)
    kwargs = {"durability": "sync"} if mode == "matched" else {}
    settle()
    t0 = now()
    graph.invoke({"x": 0}, config, **kwargs)
    elapsed = now() - t0
    check(CALLS["n"] == nodes, f"langgraph: {CALLS['n']} node calls, expected {nodes}")
    states = list(graph.get_state_history(config))
    check(len(states) == checkpoints, f"langgraph: {len(states)} checkpoints, expected {checkpoints}")
    check(states[0].next == (), "langgraph: the run did not finish")
    return elapsed


def _per_node(builder: StateGraph, nodes: int, checkpoints: int, reps: int, mode: str, label: str) -> Sample:
    sample = Sample()
    for _ in range(reps):
        with fresh_dir(f"lg-{label}") as d:
            conn, saver = _saver(os.path.join(d, "langgraph.db"), mode)
            try:
                graph = builder.compile(checkpointer=saver)
                _invoke_checked(graph, "warm-up", mode, nodes, checkpoints)   # not timed
                sample.add(_invoke_checked(graph, "timed", mode, nodes, checkpoints))
            finally:
                conn.close()
    sample.info["checkpoints"] = [checkpoints]
    return sample


# ---------------------------------------------------------------- cases

def chain(n: int, reps: int, mode: str) -> Sample:
    # input checkpoint, START step, then one per node
    return _per_node(chain_builder(n), n, n + 2, reps, mode, "chain")


def fanout(width: int, reps: int, mode: str) -> Sample:
    # input, START, root, the fan-out superstep, join
    return _per_node(fanout_builder(width), width + 2, 5, reps, mode, "fanout")


def parallel(n: int, reps: int, max_concurrency: int) -> Sample:
    """n async nodes in one superstep, ``max_concurrency`` bound, AsyncSqliteSaver."""
    builder = parallel_builder(n)
    sample = Sample()
    peaks: list[int] = []

    async def once(path: str) -> float:
        async with AsyncSqliteSaver.from_conn_string(path) as saver:
            graph = builder.compile(checkpointer=saver)
            for thread in ("warm-up", "timed"):
                CALLS["n"] = 0
                RUNNING["now"] = RUNNING["peak"] = 0
                config = _config(thread, max_concurrency=max_concurrency)
                settle()
                t0 = now()
                await graph.ainvoke({"x": 0}, config)
                elapsed = now() - t0
                check(CALLS["n"] == n, f"langgraph parallel: {CALLS['n']} node calls, expected {n}")
                states = [s async for s in graph.aget_state_history(config)]
                check(len(states) == 3 and states[0].next == (), "langgraph parallel: run did not finish")
            peaks.append(RUNNING["peak"])
            return elapsed

    for _ in range(reps):
        with fresh_dir("lg-parallel") as d:
            sample.add(asyncio.run(once(os.path.join(d, "langgraph.db"))))
    sample.info["peaks"] = peaks
    return sample


def size(n: int) -> dict[str, float]:
    builder = chain_builder(n)
    with fresh_dir("lg-size") as d:
        path = os.path.join(d, "langgraph.db")
        conn, saver = _saver(path, "default")
        try:
            elapsed = _invoke_checked(builder.compile(checkpointer=saver), "t", "default", n, n + 2)
        finally:
            conn.close()
        return {"bytes": db_size(path), "seconds": elapsed}


def history(n: int, reps: int) -> Sample:
    builder = chain_builder(n)
    sample = Sample()
    for _ in range(reps):
        with fresh_dir("lg-history") as d:
            path = os.path.join(d, "langgraph.db")
            conn, saver = _saver(path, "default")
            try:
                _invoke_checked(builder.compile(checkpointer=saver), "t", "default", n, n + 2)
            finally:
                conn.close()
            conn, saver = _saver(path, "default")     # fresh connection and saver
            try:
                graph = builder.compile(checkpointer=saver)
                config = _config("t")
                settle()
                t0 = now()
                states = list(graph.get_state_history(config))
                elapsed = now() - t0
                check(len(states) == n + 2, f"langgraph history: {len(states)} states, expected {n + 2}")
                sample.add(elapsed)
            finally:
                conn.close()
    return sample


# ---------------------------------------------------------------- time travel

def _counted_run(graph, thread: str, mode: str, n: int) -> list:
    """Run the counter chain to the end (not timed); its checkpoints, newest first."""
    _invoke_checked(graph, thread, mode, n, n + 2)
    states = list(graph.get_state_history(_config(thread)))
    check(states[0].values.get("x") == n, f"langgraph: x == {states[0].values.get('x')}, expected {n}")
    return states


def _count_checkpoints(graph, thread: str) -> int:
    return sum(1 for _ in graph.checkpointer.list(_config(thread)))


def _timed_resume(graph, thread: str, start, nodes: int, x: int, added: int) -> tuple[float, float]:
    """Time ``start()`` (returns the final state); check node calls, final and stored state, checkpoints.

    Returns (seconds, seconds until the first node call started).
    """
    before = _count_checkpoints(graph, thread)
    CALLS["n"] = 0
    FIRST["at"] = 0.0
    settle()
    t0 = now()
    out = start()
    elapsed = now() - t0
    check(CALLS["n"] == nodes, f"langgraph: {CALLS['n']} node calls, expected {nodes}")
    check(out.get("x") == x, f"langgraph: final x == {out.get('x')}, expected {x}")
    latest = graph.get_state(_config(thread))
    check(latest.values.get("x") == x and latest.next == (), "langgraph: stored state is not the run's end")
    after = _count_checkpoints(graph, thread)
    check(after - before == added, f"langgraph: {after - before} new checkpoints, expected {added}")
    return elapsed, FIRST["at"] - t0


def fork_chain(n: int, reps: int, mode: str) -> tuple[Sample, Sample]:
    """Patched fork at the middle of a finished chain: ``update_state`` + ``invoke`` of the rest.

    After a full run, the checkpoint with x == n // 2 (next node ``n{n//2}``) is
    found outside the timed region. Timed: ``update_state(it, {"x": 1000},
    as_node=<the node before>)`` and ``invoke(None, <the new config>)``, which
    runs the remaining nodes. Returns (total, update_state call to the first
    forked node starting).
    """
    k = n // 2
    builder = counter_chain_builder(n)
    kwargs = {"durability": "sync"} if mode == "matched" else {}
    total, first = Sample(), Sample()
    for _ in range(reps):
        with fresh_dir("lg-fork") as d:
            conn, saver = _saver(os.path.join(d, "langgraph.db"), mode)
            try:
                graph = builder.compile(checkpointer=saver)
                for thread in ("warm-up", "timed"):
                    at = [s for s in _counted_run(graph, thread, mode, n) if s.values.get("x") == k]
                    check(len(at) == 1 and at[0].next == (f"n{k:04d}",), f"langgraph fork: no x == {k}")

                    def start(config=at[0].config) -> dict:
                        fork = graph.update_state(config, {"x": 1000}, as_node=f"n{k - 1:04d}")
                        return graph.invoke(None, {**fork, "recursion_limit": 100_000}, **kwargs)

                    # update_state writes one checkpoint, then one per node
                    elapsed, to_first = _timed_resume(graph, thread, start, n - k, 1000 + n - k, n - k + 1)
                total.add(elapsed)
                first.add(to_first)
            finally:
                conn.close()
    return total, first


def replay_chain(n: int, reps: int, mode: str) -> tuple[Sample, Sample]:
    """LangGraph replay: ``invoke(None, <config of an earlier checkpoint>)`` on a finished chain.

    Returns (replay from the checkpoint at step n // 2, replay from the first
    checkpoint of the thread: all n nodes). What the replay does, as checked
    here or observed on LangGraph 1.2.24:

    * it executes again every node after the checkpoint (node calls are counted),
      so side effects inside nodes happen again; no recorded results are reused;
    * it writes a new branch in the same thread: a checkpoint with source "fork"
      whose parent is the chosen one, then one per node; the original
      checkpoints stay, and the thread's latest state becomes the replay's end;
    * nodes that return something else than in the original run raise nothing,
      and ``invoke`` returns only the final state: no report of what diverged.
    """
    k = n // 2
    builder = counter_chain_builder(n)
    kwargs = {"durability": "sync"} if mode == "matched" else {}
    middle, whole = Sample(), Sample()
    for _ in range(reps):
        with fresh_dir("lg-replay") as d:
            conn, saver = _saver(os.path.join(d, "langgraph.db"), mode)
            try:
                graph = builder.compile(checkpointer=saver)
                for thread in ("warm-up", "timed"):
                    states = _counted_run(graph, thread, mode, n)
                    at = [s for s in states if s.metadata.get("step") == k]
                    check(len(at) == 1 and at[0].values.get("x") == k, f"langgraph replay: no step {k}")
                    origin = states[-1]
                    check(origin.metadata.get("source") == "input", "langgraph replay: no input checkpoint")
                    replay = [partial(graph.invoke, None, {**s.config, "recursion_limit": 100_000}, **kwargs)
                              for s in (at[0], origin)]
                    # a fork checkpoint, then one per step (from the input: the START step too)
                    from_middle, _ = _timed_resume(graph, thread, replay[0], n - k, n, n - k + 1)
                    from_origin, _ = _timed_resume(graph, thread, replay[1], n, n, n + 2)
                middle.add(from_middle)
                whole.add(from_origin)
            finally:
                conn.close()
    return middle, whole


# ---------------------------------------------------------------- state growth

MESSAGE_BYTES = 500


def message(i: int) -> str:
    """Node i's message (the same text as the Shadow Harness case)."""
    head = f"message {i:04d} "
    return head + "x" * (MESSAGE_BYTES - len(head))


class Transcript(TypedDict, total=False):
    messages: Annotated[list, operator.add]


def say(i: int, state: Transcript) -> dict:
    CALLS["n"] += 1
    return {"messages": [message(i)]}


def growth_builder(n: int) -> StateGraph:
    """The chain, each node appending one ~500-byte message to ``messages``."""
    b = StateGraph(Transcript)
    for i in range(n):
        b.add_node(f"n{i:04d}", partial(say, i))
    b.add_edge(START, "n0000")
    for i in range(1, n):
        b.add_edge(f"n{i - 1:04d}", f"n{i:04d}")
    b.add_edge(f"n{n - 1:04d}", END)
    return b


def _growth_invoke(graph, conn: sqlite3.Connection, thread: str, mode: str, n: int) -> float:
    CALLS["n"] = 0
    config = _config(thread)
    kwargs = {"durability": "sync"} if mode == "matched" else {}
    settle()
    t0 = now()
    graph.invoke({"messages": []}, config, **kwargs)
    elapsed = now() - t0
    check(CALLS["n"] == n, f"langgraph growth: {CALLS['n']} node calls, expected {n}")
    # counted in SQL: reading every checkpoint back would load the whole list n times
    [(count,)] = conn.execute("SELECT COUNT(*) FROM checkpoints WHERE thread_id = ?", (thread,)).fetchall()
    check(count == n + 2, f"langgraph growth: {count} checkpoints, expected {n + 2}")
    got = graph.get_state(config).values.get("messages", [])
    check(got == [message(i) for i in range(n)], f"langgraph growth: {len(got)} messages, expected {n} in order")
    return elapsed


def growth(n: int, reps: int, mode: str, nodes: int = 800) -> Sample:
    """As the Shadow Harness case: ``nodes // n`` timed runs per repetition, after a warm-up."""
    builder = growth_builder(n)
    sample = Sample()
    for _ in range(reps):
        with fresh_dir("lg-growth") as d:
            conn, saver = _saver(os.path.join(d, "langgraph.db"), mode)
            try:
                graph = builder.compile(checkpointer=saver)
                _growth_invoke(graph, conn, "warm-up", mode, n)   # not timed
                for i in range(max(1, nodes // n)):
                    sample.add(_growth_invoke(graph, conn, f"timed-{i}", mode, n))
            finally:
                conn.close()
    return sample
