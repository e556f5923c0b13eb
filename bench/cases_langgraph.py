"""The same benchmark cases on LangGraph: StateGraph + SqliteSaver on a SQLite file.

Two configurations are measured for the per-node cases:

* ``default``: SqliteSaver as shipped (it sets WAL; SQLite's default
  ``synchronous=FULL`` stays, so each checkpoint commit is fsynced) and
  ``invoke`` defaults (``durability="async"``: a step's checkpoint is written
  while the next step already runs).
* ``matched``: the guarantee Shadow Harness gives for ordinary steps: each
  step is committed before the next one starts (``durability="sync"``), WAL
  with ``synchronous=NORMAL`` (survives a process crash, not a power cut).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from typing import TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph

from _common import Sample, check, db_size, fresh_dir, now, settle

CALLS = {"n": 0}
RUNNING = {"now": 0, "peak": 0}
SLEEP = 0.05
MODES = ("default", "matched")


class State(TypedDict, total=False):
    x: int


def noop(state: State) -> dict:
    CALLS["n"] += 1
    return {}


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
