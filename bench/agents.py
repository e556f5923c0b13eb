"""Agent-shaped graphs, side by side with LangGraph (StateGraph + SqliteSaver): a ReAct loop and a map-reduce.

    .venv/bin/python bench/agents.py              # medians of 5 repetitions
    .venv/bin/python bench/agents.py --reps 3     # fewer repetitions
    .venv/bin/python bench/agents.py --profile    # also: where Shadow Harness spends the time
    .venv/bin/python bench/agents.py --scaling    # also: Shadow Harness on longer loops and wider maps
    .venv/bin/python bench/agents.py --breakdown  # also: what bounds the speed-up (engine alone, commits, ...)
    .venv/bin/python bench/agents.py --collector 600  # also: Python's cyclic collector over 600 runs in one process
    .venv/bin/python bench/agents.py --json out.json

1. ReAct loop of ITERATIONS iterations. Shadow Harness: ``model`` is the loop's
   entry and appends a ~500-byte message; ``tool`` runs after it while the
   conversation is short of 2 * ITERATIONS - 1 messages (``when=``), appends
   another and leads back to ``model``; ``finish`` runs after the loop. LangGraph:
   ``model`` with a conditional edge to ``tool`` or ``finish``, ``tool -> model``,
   ``messages: Annotated[list, operator.add]``. Both end with ITERATIONS model calls,
   ITERATIONS - 1 tool calls and 2 * ITERATIONS - 1 messages (about 100 KB of state).
   Per-iteration overhead = run wall time / ITERATIONS. Whether that cost grows with
   the state is read from timestamps taken when each ``model`` call starts. Shadow
   Harness commits a group of steps every 5 ms, each commit about 1.5 ms: a window of
   fixed iterations holds none, one or two of them depending on how fast the loop ran,
   and would measure where commits land rather than whether the state costs. So its
   windows are whole group-commit periods (from the iteration after one ordinary commit
   to the iteration after the next: exactly one commit each), the first one of the run
   against the last one, read on a loop of GROWTH_ITERATIONS iterations run as often as
   the timed one, after it, in each repetition (a 100-iteration run holds two whole
   periods at most, often one). A period can also hold one of SQLite's WAL checkpoints
   (about 9 ms, once every few MB written): medians over all runs. LangGraph (no group
   commit) is read on the timed runs, iterations 11-40 against 70-99.
2. Map-reduce over ITEMS items. Shadow Harness: ``plan`` writes ``items``, ``work``
   maps over it (max_concurrency MAP_CONCURRENCY) appending one result per item,
   ``reduce`` sums them. LangGraph: a conditional edge from ``plan`` returns one
   ``Send("work", {"item": i})`` per item, ``results: Annotated[list, operator.add]``,
   then ``reduce`` (``max_concurrency`` MAP_CONCURRENCY in the config as well).
   Per-item overhead = run wall time / ITEMS.

Method as in ``run.py``: every repetition uses a fresh SQLite file in a temp
directory per system; graph building, store creation and one warm-up run in the
same store are outside the timed region; each repetition then times RUNS_PER_REP
runs (the run call alone: ``Runtime.start`` / ``graph.invoke``); the systems take
turns repetition by repetition. Every run is checked (node calls, final state in
order, checkpoints, node states) before its time is kept.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import cProfile
import io
import json
import operator
import os
import platform
import pstats
import sqlite3
import statistics
import sys
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from typing import Annotated, TypedDict

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for p in (HERE, ROOT):
    if p not in sys.path:
        sys.path.insert(0, p)

warnings.filterwarnings("ignore", category=DeprecationWarning)

from _common import LANGGRAPH_CONFIGS, Sample, check, fmt_ms, fmt_us, fresh_dir, now, render_table, settle  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.types import Send  # noqa: E402
from pydantic import BaseModel  # noqa: E402

import cases_langgraph as L  # noqa: E402
from run import _git_revision, spread, verdict  # noqa: E402
from runtime import ExecutableGraph, Graph, MemoryStore, NodeStatus, RunStatus, Runtime, SqlStore, append  # noqa: E402

ITERATIONS = 100
ITEMS = 200
MAP_CONCURRENCY = 8
MESSAGE_BYTES = 500
RUNS_PER_REP = 3
WINDOW = 30                  # iterations per window of the growth check
SKIP = 10                    # iterations before LangGraph's early window
GROWTH_ITERATIONS = 400      # the loop Shadow Harness's growth check reads (about 400 KB of state at the end)

TARGET_SPEEDUP = 10
TARGET_FLAT = 1.3            # the late window costs at most this many times the early one per iteration

CALLS: Counter[str] = Counter()
STAMPS: list[float] = []     # perf_counter when each model call starts, in call order
COMMITS: list[float] = []    # perf_counter when each ordinary (group) commit of a SqlStore starts
HISTORY_READS: list[float] = []   # seconds each map-reduce run's ``rt.history`` took (its check reads it)


def message(kind: str, i: int) -> str:
    """The i-th message of the conversation (0-based): about MESSAGE_BYTES bytes, distinct."""
    head = f"{kind} {i:04d} "
    return head + "x" * (MESSAGE_BYTES - len(head))


def expected_messages(iterations: int = ITERATIONS) -> list[str]:
    return [message("model" if i % 2 == 0 else "tool", i) for i in range(2 * iterations - 1)]


def result_of(item: int) -> int:
    return item * 3 + 1


def expected_results(items: int = ITEMS) -> list[int]:
    return [result_of(i) for i in range(items)]


def window(iterations: int) -> int:
    """Iterations per window: WINDOW, or less in a loop too short for two of them after SKIP."""
    return min(WINDOW, (iterations - SKIP - 1) // 2)


def windows(stamps: list[float], iterations: int = ITERATIONS) -> tuple[float, float]:
    """Seconds per iteration over the ``window`` iterations after the first SKIP and over the
    last ``window`` before the final one."""
    check(len(stamps) == iterations, f"{len(stamps)} model calls timestamped, expected {iterations}")
    w = window(iterations)
    early = (stamps[SKIP + w] - stamps[SKIP]) / w
    late = (stamps[-1] - stamps[-1 - w]) / w
    return early, late


def commit_windows(stamps: list[float], commits: list[float]) -> tuple[float, float, int, int] | None:
    """Seconds per iteration over the run's first whole group-commit period and over its
    last, and the iterations each spans: a period runs from the first ``model`` call after
    an ordinary commit to the first after the next, so it holds exactly one commit. None
    when the run held fewer than two whole periods (a short loop, a fast machine)."""
    # where each commit falls among the model calls: only those with a call before and after
    at = sorted({i for i in (bisect.bisect_left(stamps, c) for c in commits) if 0 < i < len(stamps)})
    if len(at) < 3:
        return None

    def per_iteration(i: int, j: int) -> float:
        return (stamps[j] - stamps[i]) / (j - i)

    return per_iteration(at[0], at[1]), per_iteration(at[-2], at[-1]), at[1] - at[0], at[-1] - at[-2]


def window_label(iterations: int = ITERATIONS) -> str:
    w = window(iterations)
    return f"iterations {SKIP + 1}–{SKIP + w} → {iterations - w}–{iterations - 1}"


# ================================================================ Shadow Harness

class Conversation(BaseModel):
    messages: Annotated[list[str], append] = []


async def h_model(state: Conversation, ctx) -> dict:
    STAMPS.append(now())
    CALLS["model"] += 1
    return {"messages": [message("model", len(state.messages))]}


async def h_tool(state: Conversation, ctx) -> dict:
    CALLS["tool"] += 1
    return {"messages": [message("tool", len(state.messages))]}


async def h_finish(state: Conversation, ctx) -> None:
    CALLS["finish"] += 1
    return None


def react_graph(iterations: int = ITERATIONS) -> ExecutableGraph:
    def tool_needed(state: Conversation) -> bool:
        return len(state.messages) < 2 * iterations - 1

    g = Graph(f"bench-react-{iterations}", Conversation)
    # the bound is far from the iterations the run needs: it must not be what ends the loop
    g.add_node("model", h_model, after=["tool"], max_iterations=10 * iterations)
    g.add_node("tool", h_tool, after=["model"], when=tool_needed)
    g.add_node("finish", h_finish, after=["model"])
    return g.compile()


def react_node_states(iterations: int = ITERATIONS) -> dict[str, NodeStatus]:
    """The last checkpoint's node states of a correct run: every iteration's instances,
    the last ``tool`` skipped (that is what ends the loop), ``finish`` done."""
    def name(node: str, it: int) -> str:
        return node if it == 0 else f"{node}#{it}"
    want = {name("model", i): NodeStatus.SUCCEEDED for i in range(iterations)}
    want.update({name("tool", i): NodeStatus.SUCCEEDED for i in range(iterations - 1)})
    want[name("tool", iterations - 1)] = NodeStatus.SKIPPED
    want["finish"] = NodeStatus.SUCCEEDED
    return want


class Work(BaseModel):
    items: list[int] = []
    results: Annotated[list[int], append] = []
    total: int = 0




async def h_work(state: Work, ctx, item: int) -> dict:
    CALLS["work"] += 1
    return {"results": [result_of(item)]}


async def h_reduce(state: Work, ctx) -> dict:
    CALLS["reduce"] += 1
    return {"total": sum(state.results)}


def mapreduce_graph(items: int = ITEMS) -> ExecutableGraph:
    async def plan(state: Work, ctx) -> dict:
        CALLS["plan"] += 1
        return {"items": list(range(items))}

    g = Graph(f"bench-mapreduce-{items}", Work)
    g.add_node("plan", plan)
    g.add_node("work", h_work, after=["plan"], map_over="items")
    g.add_node("reduce", h_reduce, after=["work"])
    return g.compile()


@contextlib.contextmanager
def commits_stamped() -> Iterator[None]:
    """While inside, ``SqlStore.commit`` (whatever it is now) notes in COMMITS when each
    ordinary commit starts (``commit_windows``)."""
    inner = SqlStore.commit

    def stamped(self: SqlStore, batch) -> None:
        if not batch.durable:
            COMMITS.append(now())
        inner(self, batch)

    SqlStore.commit = stamped  # type: ignore[method-assign]
    try:
        yield
    finally:
        SqlStore.commit = inner  # type: ignore[method-assign]


def _runtime(path: str, max_concurrency: int = 8, *, memory: bool = False,
             group_commit: float | None = None) -> Runtime:
    """The measured Runtime: a SqlStore on ``path`` (or a MemoryStore: the engine alone);
    ``group_commit``: the Runtime's default unless given (0: every step commits on its own)."""
    store = MemoryStore() if memory else SqlStore(f"sqlite:///{path}")
    extra = {} if group_commit is None else {"group_commit": group_commit}
    return Runtime(store=store, max_concurrency=max_concurrency, **extra)


async def _h_react_run(rt: Runtime, graph: ExecutableGraph,
                       iterations: int = ITERATIONS) -> tuple[float, tuple[float, float, int, int] | None]:
    """One checked run of the loop; (wall seconds, ``commit_windows`` or None)."""
    CALLS.clear()
    STAMPS.clear()
    COMMITS.clear()
    settle()
    with commits_stamped():
        t0 = now()
        run = await rt.start(graph, {})
        elapsed = now() - t0
    check(run.status == RunStatus.SUCCEEDED, f"react: run ended {run.status}, not succeeded")
    check(CALLS == Counter(model=iterations, tool=iterations - 1, finish=1), f"react: node calls {dict(CALLS)}")
    cps = await rt.history(run.id)
    check(dict(cps[-1].node_states) == react_node_states(iterations),
          f"react: the last checkpoint's node states are not the loop's {iterations} iterations and finish")
    final = await rt.state_at(cps[-1].id)
    check(final.messages == expected_messages(iterations),
          f"react: {len(final.messages)} messages, expected {2 * iterations - 1} in order")
    check(len(STAMPS) == iterations, f"react: {len(STAMPS)} model calls timestamped, expected {iterations}")
    return elapsed, commit_windows(STAMPS, COMMITS)


async def _h_map_run(rt: Runtime, graph: ExecutableGraph, items: int = ITEMS) -> float:
    CALLS.clear()
    settle()
    t0 = now()
    run = await rt.start(graph, {}, max_concurrency=MAP_CONCURRENCY)
    elapsed = now() - t0
    check(run.status == RunStatus.SUCCEEDED, f"map-reduce: run ended {run.status}, not succeeded")
    check(CALLS == Counter(plan=1, work=items, reduce=1), f"map-reduce: node calls {dict(CALLS)}")
    t1 = now()
    cps = await rt.history(run.id)
    HISTORY_READS.append(now() - t1)
    states = cps[-1].node_states
    want = {"plan", "work", "reduce", *(f"work[{i}]" for i in range(items))}
    check(set(states) == want and all(s == NodeStatus.SUCCEEDED for s in states.values()),
          f"map-reduce: the last checkpoint does not show plan, the map, its {items} items and reduce succeeded")
    final = await rt.state_at(cps[-1].id)
    expected = expected_results(items)
    check(final.results == expected, "map-reduce: results are not one per item in item order")
    check(final.total == sum(expected), f"map-reduce: total {final.total}, expected {sum(expected)}")
    return elapsed


def h_react(runs: int, **setup: object) -> Sample:
    """``setup``: what ``_runtime`` takes besides the path (the breakdown's variants)."""
    graph = react_graph()
    sample = Sample(info={"early": [], "late": [], "spans": [], "short": []})

    async def once(path: str) -> None:
        rt = _runtime(path, **setup)  # type: ignore[arg-type]
        try:
            await _h_react_run(rt, graph)              # warm-up, not kept
            for _ in range(runs):
                sample.add((await _h_react_run(rt, graph))[0])
            if setup:
                return   # the breakdown's variants: no growth check
            # the growth check's longer loop, as many runs (see ``commit_windows``)
            growth = react_graph(GROWTH_ITERATIONS)
            for _ in range(runs):
                _, periods = await _h_react_run(rt, growth, GROWTH_ITERATIONS)
                if periods is None:
                    sample.info["short"].append(1)
                    continue
                early, late, *spans = periods
                sample.info["early"].append(early)
                sample.info["late"].append(late)
                sample.info["spans"].append(spans)
        finally:
            rt.close()

    with fresh_dir("h-react") as d:
        asyncio.run(once(os.path.join(d, "harness.db")))
    return sample


def h_mapreduce(runs: int, **setup: object) -> Sample:
    graph = mapreduce_graph()
    sample = Sample()

    async def once(path: str) -> None:
        rt = _runtime(path, MAP_CONCURRENCY, **setup)  # type: ignore[arg-type]
        try:
            await _h_map_run(rt, graph)                # warm-up, not kept
            for _ in range(runs):
                sample.add(await _h_map_run(rt, graph))
        finally:
            rt.close()

    with fresh_dir("h-mapreduce") as d:
        asyncio.run(once(os.path.join(d, "harness.db")))
    return sample


# ================================================================ LangGraph

class LGConversation(TypedDict, total=False):
    messages: Annotated[list, operator.add]


def lg_model(state: LGConversation) -> dict:
    STAMPS.append(now())
    CALLS["model"] += 1
    return {"messages": [message("model", len(state["messages"]))]}


def lg_tool(state: LGConversation) -> dict:
    CALLS["tool"] += 1
    return {"messages": [message("tool", len(state["messages"]))]}


def lg_finish(state: LGConversation) -> dict:
    CALLS["finish"] += 1
    return {}


def lg_route(state: LGConversation) -> str:
    return "tool" if len(state["messages"]) < 2 * ITERATIONS - 1 else "finish"


def react_builder() -> StateGraph:
    # ``finish`` rather than END after the last model call, so both systems run the same nodes
    b = StateGraph(LGConversation)
    b.add_node("model", lg_model)
    b.add_node("tool", lg_tool)
    b.add_node("finish", lg_finish)
    b.add_edge(START, "model")
    b.add_conditional_edges("model", lg_route, ["tool", "finish"])
    b.add_edge("tool", "model")
    b.add_edge("finish", END)
    return b


class LGWork(TypedDict, total=False):
    items: list
    results: Annotated[list, operator.add]
    total: int


class LGItem(TypedDict):
    item: int


def lg_plan(state: LGWork) -> dict:
    CALLS["plan"] += 1
    return {"items": list(range(ITEMS))}


def lg_fan(state: LGWork) -> list[Send]:
    return [Send("work", {"item": i}) for i in state["items"]]


def lg_work(state: LGItem) -> dict:
    CALLS["work"] += 1
    return {"results": [result_of(state["item"])]}


def lg_reduce(state: LGWork) -> dict:
    CALLS["reduce"] += 1
    return {"total": sum(state["results"])}


def mapreduce_builder() -> StateGraph:
    b = StateGraph(LGWork)
    b.add_node("plan", lg_plan)
    b.add_node("work", lg_work)
    b.add_node("reduce", lg_reduce)
    b.add_edge(START, "plan")
    b.add_conditional_edges("plan", lg_fan, ["work"])
    b.add_edge("work", "reduce")
    b.add_edge("reduce", END)
    return b


def _checkpoints(conn: sqlite3.Connection, thread: str) -> int:
    # counted in SQL: reading the states back would decode the whole list per checkpoint
    [(count,)] = conn.execute("SELECT COUNT(*) FROM checkpoints WHERE thread_id = ?", (thread,)).fetchall()
    return int(count)


#: the breakdown's LangGraph configuration nearest Shadow Harness's group commit: steps are
#: written in the background while the next runs (a crash may lose the last), synchronous=NORMAL
CLOSEST = "closest"


def _lg_kwargs(mode: str) -> dict[str, str]:
    return {"durability": "sync"} if mode == "matched" else {}


def _lg_saver(path: str, mode: str):
    return L._saver(path, "matched" if mode == CLOSEST else mode)


def _lg_react_run(graph, conn: sqlite3.Connection, thread: str, mode: str) -> tuple[float, float, float]:
    CALLS.clear()
    STAMPS.clear()
    kwargs = _lg_kwargs(mode)
    config = L._config(thread)
    settle()
    t0 = now()
    out = graph.invoke({"messages": []}, config, **kwargs)
    elapsed = now() - t0
    check(CALLS == Counter(model=ITERATIONS, tool=ITERATIONS - 1, finish=1),
          f"langgraph react: node calls {dict(CALLS)}")
    check(out["messages"] == expected_messages(),
          f"langgraph react: {len(out['messages'])} messages, expected {2 * ITERATIONS - 1} in order")
    # input, START step, one per model/tool step, finish
    want = 2 * ITERATIONS - 1 + 3
    got = _checkpoints(conn, thread)
    check(got == want, f"langgraph react: {got} checkpoints, expected {want}")
    check(graph.get_state(config).next == (), "langgraph react: the run did not finish")
    early, late = windows(STAMPS)
    return elapsed, early, late


def _lg_map_run(graph, conn: sqlite3.Connection, thread: str, mode: str) -> float:
    CALLS.clear()
    kwargs = _lg_kwargs(mode)
    config = L._config(thread, max_concurrency=MAP_CONCURRENCY)
    settle()
    t0 = now()
    out = graph.invoke({}, config, **kwargs)
    elapsed = now() - t0
    check(CALLS == Counter(plan=1, work=ITEMS, reduce=1), f"langgraph map-reduce: node calls {dict(CALLS)}")
    check(out["results"] == expected_results(), "langgraph map-reduce: results are not one per item in item order")
    check(out["total"] == sum(expected_results()), f"langgraph map-reduce: total {out['total']}")
    # input, START, plan, the work superstep, reduce
    got = _checkpoints(conn, thread)
    check(got == 5, f"langgraph map-reduce: {got} checkpoints, expected 5")
    return elapsed


def lg_react(runs: int, mode: str) -> Sample:
    builder = react_builder()
    sample = Sample(info={"early": [], "late": []})
    with fresh_dir("lg-react") as d:
        conn, saver = _lg_saver(os.path.join(d, "langgraph.db"), mode)
        try:
            graph = builder.compile(checkpointer=saver)
            _lg_react_run(graph, conn, "warm-up", mode)
            for i in range(runs):
                elapsed, early, late = _lg_react_run(graph, conn, f"timed-{i}", mode)
                sample.add(elapsed)
                sample.info["early"].append(early)
                sample.info["late"].append(late)
        finally:
            conn.close()
    return sample


def lg_mapreduce(runs: int, mode: str) -> Sample:
    builder = mapreduce_builder()
    sample = Sample()
    with fresh_dir("lg-mapreduce") as d:
        conn, saver = _lg_saver(os.path.join(d, "langgraph.db"), mode)
        try:
            graph = builder.compile(checkpointer=saver)
            _lg_map_run(graph, conn, "warm-up", mode)
            for i in range(runs):
                sample.add(_lg_map_run(graph, conn, f"timed-{i}", mode))
        finally:
            conn.close()
    return sample


# ================================================================ scaling (Shadow Harness alone)

LOOP_SIZES = (25, 100, 400)
MAP_SIZES = (50, 200, 800, 8000)


def scaling(runs: int = RUNS_PER_REP) -> tuple[dict[int, tuple[float, float | None, float | None]],
                                                dict[int, tuple[float, float]]]:
    """How the per-iteration and per-item costs move with the loop's length and the map's
    width: {iterations: (median s/iteration, median s/iteration over the first whole
    group-commit period, over the last one; None in a loop too short for two)} (see
    ``commit_windows``), {items: (median s/item, median s to read the run's history back)}.
    One fresh store per size, a warm-up, then ``runs`` checked runs."""
    loops: dict[int, tuple[float, float | None, float | None]] = {}
    maps: dict[int, tuple[float, float]] = {}

    async def loop_once(path: str, n: int) -> None:
        rt = _runtime(path)
        graph = react_graph(n)
        try:
            await _h_react_run(rt, graph, n)
            got = [await _h_react_run(rt, graph, n) for _ in range(runs)]
            periods = [p for _, p in got if p is not None]
            early, late = ((statistics.median(p[0] for p in periods), statistics.median(p[1] for p in periods))
                           if periods else (None, None))
            loops[n] = (statistics.median(w for w, _ in got) / n, early, late)
        finally:
            rt.close()

    async def map_once(path: str, n: int) -> None:
        rt = _runtime(path, MAP_CONCURRENCY)
        graph = mapreduce_graph(n)
        try:
            await _h_map_run(rt, graph, n)
            HISTORY_READS.clear()
            walls = [await _h_map_run(rt, graph, n) for _ in range(runs)]
            maps[n] = (statistics.median(walls) / n, statistics.median(HISTORY_READS))
        finally:
            rt.close()

    for n in LOOP_SIZES:
        with fresh_dir("h-scale-loop") as d:
            asyncio.run(loop_once(os.path.join(d, "harness.db"), n))
    for n in MAP_SIZES:
        with fresh_dir("h-scale-map") as d:
            asyncio.run(map_once(os.path.join(d, "harness.db"), n))
    return loops, maps


# ================================================================ running and reporting

def interleave(reps: int, cases: dict) -> dict[object, Sample]:
    """Each case once per repetition, in turn, so background load hits every system alike."""
    out: dict[object, Sample] = {}
    for _ in range(reps):
        for key, case in cases.items():
            s = case()
            if key not in out:
                out[key] = s
                continue
            out[key].values.extend(s.values)
            for k, v in s.info.items():
                out[key].info[k].extend(v)
    return out


def flatness(sample: Sample) -> tuple[float, float, float] | None:
    """(median s/iteration over the early window, over the late one, their ratio); None
    when no run held two windows."""
    if not sample.info["early"]:
        return None
    early = statistics.median(sample.info["early"])
    late = statistics.median(sample.info["late"])
    return early, late, late / early


def _short(filename: str, line: int, name: str) -> str:
    if os.sep + "runtime" + os.sep in filename and ".venv" not in filename:
        return f"runtime/{filename.split(os.sep + 'runtime' + os.sep, 1)[-1]}:{line}({name})"
    if filename.startswith("~") or filename.startswith("<"):
        return name
    parts = filename.split(os.sep)
    tail = "/".join(parts[parts.index("site-packages") + 1:]) if "site-packages" in parts else os.path.basename(filename)
    return f"{tail}:{line}({name})"


def profile(graph: ExecutableGraph, max_concurrency: int, units: int, what: str, top: int = 14) -> str:
    """cProfile of one run (after two warm-ups in a fresh store): runtime/ functions by cumulative time,
    then every function by own time; per-``what`` figures divide by ``units``."""
    prof = cProfile.Profile()

    async def go(path: str) -> None:
        rt = _runtime(path, max_concurrency)
        try:
            for _ in range(2):
                await rt.start(graph, {}, max_concurrency=max_concurrency)
            prof.enable()
            run = await rt.start(graph, {}, max_concurrency=max_concurrency)
            prof.disable()
            check(run.status == RunStatus.SUCCEEDED, f"profile: run ended {run.status}")
        finally:
            rt.close()

    with fresh_dir("h-profile") as d:
        asyncio.run(go(os.path.join(d, "harness.db")))
    stats = pstats.Stats(prof, stream=io.StringIO())
    total = stats.total_tt  # type: ignore[attr-defined]
    rows = [(_short(f, ln, n), nc, ct, tt) for (f, ln, n), (_cc, nc, tt, ct, _) in stats.stats.items()]  # type: ignore[attr-defined]
    ours = sorted((r for r in rows if r[0].startswith("runtime/")), key=lambda r: -r[2])[:top]
    own = sorted(rows, key=lambda r: -r[3])[:top]

    def table(rs):
        return render_table(["function", "calls", "cumulative ms", "own ms", f"cumulative µs/{what}"],
                            [[f, str(c), f"{ct * 1e3:.1f}", f"{tt * 1e3:.1f}", f"{ct / units * 1e6:.1f}"]
                             for f, c, ct, tt in rs])

    return (f"{total * 1e3:.0f} ms under the profiler ({total / units * 1e6:.0f} µs/{what}); "
            "calls of a coroutine count each resumption\n"
            f"runtime/ functions by cumulative time:\n{table(ours)}\n"
            f"all functions by own time:\n{table(own)}")


SPLIT = [  # (module, class or None for a module function, name); they nest: _schedule holds frontier, ...
    ("runtime.engine.loop", "RunLoop", "_schedule"),
    ("runtime.engine.scheduler", None, "frontier"),
    ("runtime.engine.instances", "Instances", "loop_ended"),
    ("runtime.engine.loop", "RunLoop", "_launch"),
    ("runtime.engine.loop", "RunLoop", "_collect"),
    ("runtime.engine.instance_growth", "InstanceGrowth", "_insert"),
    ("runtime.engine.recorder", "Recorder", "flush"),
]


def split(graph: ExecutableGraph, max_concurrency: int, runs: int = RUNS_PER_REP) -> tuple[float, dict[str, float]]:
    """Wall seconds inside the SPLIT functions during a run, without the profiler (they are
    wrapped in this process only); medians of ``runs`` runs after a warm-up, with the run's total."""
    import importlib

    spent: Counter[str] = Counter()
    saved: list[tuple[object, str, object]] = []

    def wrap(fn, label: str):
        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[label] += time.perf_counter() - t0
        return timed

    totals: list[float] = []
    per: dict[str, list[float]] = {}

    async def go(path: str) -> None:
        rt = _runtime(path, max_concurrency)
        try:
            await rt.start(graph, {}, max_concurrency=max_concurrency)
            for module, cls_name, name in SPLIT:
                mod = importlib.import_module(module)
                owner = getattr(mod, cls_name) if cls_name else mod
                fn = owner.__dict__[name]
                saved.append((owner, name, fn))
                setattr(owner, name, wrap(fn, f"{cls_name or module.rsplit('.', 1)[-1]}.{name}"))
            for _ in range(runs):
                spent.clear()
                settle()
                t0 = now()
                run = await rt.start(graph, {}, max_concurrency=max_concurrency)
                totals.append(now() - t0)
                check(run.status == RunStatus.SUCCEEDED, f"split: run ended {run.status}")
                for k, v in spent.items():
                    per.setdefault(k, []).append(v)
        finally:
            for owner, name, fn in saved:
                setattr(owner, name, fn)
            rt.close()

    with fresh_dir("h-split") as d:
        asyncio.run(go(os.path.join(d, "harness.db")))
    return statistics.median(totals), {k: statistics.median(v) for k, v in per.items()}


def split_table(graph: ExecutableGraph, max_concurrency: int, units: int, what: str) -> str:
    total, per = split(graph, max_concurrency)
    return (f"run {total * 1e3:.1f} ms = {total / units * 1e6:.0f} µs/{what}; time inside (they nest: _schedule "
            "holds frontier, frontier holds loop_ended):\n"
            + render_table(["function", "ms per run", f"µs per {what}", "share of run"],
                           [[k, f"{v * 1e3:.1f}", f"{v / units * 1e6:.0f}", f"{v / total:.0%}"]
                            for k, v in sorted(per.items(), key=lambda kv: -kv[1])]))


def store_commits(case: str, runs: int = RUNS_PER_REP) -> tuple[float, float, float]:
    """Per run, the seconds a SqlStore spends committing: (ordinary batches, the batches forced
    to disk, the number of batches); medians of ``runs`` runs after a warm-up."""
    graph, mc, run_once = ((react_graph(), 8, _h_react_run) if case == "react"
                           else (mapreduce_graph(), MAP_CONCURRENCY, _h_map_run))
    spent: Counter[str] = Counter()
    per: list[tuple[float, float, float]] = []
    original = SqlStore.commit

    def timed(self: SqlStore, batch) -> None:
        t0 = time.perf_counter()
        try:
            original(self, batch)
        finally:
            spent["forced" if batch.durable else "ordinary"] += time.perf_counter() - t0
            spent["batches"] += 1

    async def go(path: str) -> None:
        rt = _runtime(path, mc)
        try:
            await run_once(rt, graph)
            SqlStore.commit = timed  # type: ignore[method-assign]
            for _ in range(runs):
                spent.clear()
                await run_once(rt, graph)
                per.append((spent["ordinary"], spent["forced"], spent["batches"]))
        finally:
            SqlStore.commit = original  # type: ignore[method-assign]
            rt.close()

    with fresh_dir("h-commits") as d:
        asyncio.run(go(os.path.join(d, "harness.db")))
    return tuple(statistics.median(x) for x in zip(*per))  # type: ignore[return-value]


def collector(runs: int) -> str:
    """What Python's cyclic garbage collector takes per run in a long-lived process: each
    case ``runs`` times in one SqlStore, after a warm-up, with the collections of every
    generation timed through ``gc.callbacks``. A full collection walks every object in the
    process (this one holds LangGraph too, as an application holds its own libraries), so
    what matters is how often a run's objects push the collector into one: objects that
    outlive a collection (a run's cycles, its live records) count towards the next."""
    import gc

    rows = []
    for title, graph, mc in ((f"ReAct loop, {ITERATIONS} iterations", react_graph(), 8),
                             (f"map-reduce over {ITEMS} items", mapreduce_graph(), MAP_CONCURRENCY)):
        took = {g: [0, 0.0] for g in range(3)}
        started = [0.0]

        def timed(phase: str, info: dict, took=took) -> None:
            if phase == "start":
                started[0] = time.perf_counter()
            else:
                took[info["generation"]][0] += 1
                took[info["generation"]][1] += time.perf_counter() - started[0]

        async def go(path: str, graph=graph, mc=mc) -> float:
            rt = _runtime(path, mc)
            try:
                await rt.start(graph, {}, max_concurrency=mc)
                gc.collect()
                gc.callbacks.append(timed)
                t0 = now()
                try:
                    # the runs alone, back to back: the timed cases' checks and their
                    # ``settle`` (a full collection before each run) would hide the collector
                    for _ in range(runs):
                        run = await rt.start(graph, {}, max_concurrency=mc)
                        check(run.status == RunStatus.SUCCEEDED, f"collector: run ended {run.status}")
                finally:
                    gc.callbacks.remove(timed)
                return now() - t0
            finally:
                rt.close()

        with fresh_dir("h-collector") as d:
            wall = asyncio.run(go(os.path.join(d, "harness.db")))
        spent = sum(t for _, t in took.values())
        rows.append([title, *(f"{took[g][0]} / {fmt_ms(took[g][1] / runs)}" for g in range(3)),
                     fmt_ms(spent / runs), f"{spent / wall:.1%}"])
    return (f"{len(gc.get_objects()):,} objects tracked in this process at the end\n"
            + render_table(["case", "generation 0: collections / per run", "generation 1", "generation 2 (full)",
                            "collector per run", "share of the runs' wall time"], rows))


def breakdown(reps: int) -> str:
    """What bounds the speed-up: each case with the engine alone (MemoryStore), as measured
    (SqlStore), with every step committed on its own (group_commit=0, as LangGraph matched
    commits), and LangGraph's configuration nearest group commit; then the store's commits."""
    variants = {"memory": {"memory": True}, "sql": {}, "every step": {"group_commit": 0.0}}
    out = []
    for case, units, what, h_case, lg_case in (
            ("react", ITERATIONS, "iteration", h_react, lg_react),
            ("map", ITEMS, "item", h_mapreduce, lg_mapreduce)):
        got = interleave(reps, {**{k: (lambda v=v, h_case=h_case: h_case(RUNS_PER_REP, **v))
                                   for k, v in variants.items()},
                                **{m: (lambda m=m, lg_case=lg_case: lg_case(RUNS_PER_REP, m))
                                   for m in (*L.MODES, CLOSEST)}})
        per = {k: v.median / units for k, v in got.items()}
        ordinary, forced, batches = store_commits(case)
        title = "ReAct loop" if case == "react" else "map-reduce"
        out.append(f"\n{title}: per {what} (medians of {reps} × {RUNS_PER_REP} runs, interleaved)")
        rows = [
            ["Shadow Harness, MemoryStore (the engine alone)", fmt_us(per["memory"]), "—"],
            ["Shadow Harness, SqlStore (as measured above)", fmt_us(per["sql"]), "—"],
            ["Shadow Harness, SqlStore, group_commit=0 (every step committed)", fmt_us(per["every step"]), "—"],
            ["  the store's commits, ordinary batches", fmt_us(ordinary / units), f"{batches:.0f} batches per run"],
            ["  the store's commits, the one forced to disk (the run's end)", fmt_us(forced / units), "—"],
            ["LangGraph default (async, synchronous=FULL)", fmt_us(per["default"]),
             f"{per['default'] / per['sql']:.2f}× ours"],
            ["LangGraph matched (sync, synchronous=NORMAL)", fmt_us(per["matched"]),
             f"{per['matched'] / per['sql']:.2f}× ours; {per['matched'] / per['every step']:.2f}× ours with "
             f"every step committed"],
            ["LangGraph async, synchronous=NORMAL (nearest group commit)", fmt_us(per[CLOSEST]),
             f"{per[CLOSEST] / per['sql']:.2f}× ours"],
            [f"10× LangGraph matched leaves per {what}", fmt_us(per["matched"] / TARGET_SPEEDUP),
             f"the store alone takes {fmt_us(per['sql'] - per['memory'])}"],
        ]
        out.append(render_table(["configuration", f"per {what}", "note"], rows))
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5, help="repetitions (fresh stores), each timing "
                                                        f"{RUNS_PER_REP} runs after a warm-up")
    ap.add_argument("--profile", action="store_true", help="also profile Shadow Harness on both cases")
    ap.add_argument("--scaling", action="store_true",
                    help=f"also: Shadow Harness alone on loops of {', '.join(map(str, LOOP_SIZES))} iterations "
                         f"and maps of {', '.join(map(str, MAP_SIZES))} items")
    ap.add_argument("--breakdown", action="store_true",
                    help="also: what bounds the speed-up (the engine alone, every step committed, the store's "
                         "commits, LangGraph async with synchronous=NORMAL)")
    ap.add_argument("--collector", type=int, metavar="RUNS",
                    help="also: what Python's cyclic garbage collector takes per run over RUNS runs of each case "
                         "in one process")
    ap.add_argument("--json", metavar="PATH", help="write the raw figures to PATH")
    args = ap.parse_args()
    reps = args.reps

    from importlib.metadata import version
    started = time.perf_counter()
    print("Shadow Harness vs LangGraph "
          f"{version('langgraph')} (langgraph-checkpoint-sqlite {version('langgraph-checkpoint-sqlite')}): "
          "agent-shaped graphs")
    print(f"python {platform.python_version()}, {os.cpu_count()} CPUs ({platform.machine()}), "
          f"SQLite {sqlite3.sqlite_version}, {reps} repetitions × {RUNS_PER_REP} timed runs, median [min–max]")
    print(f"runtime at {_git_revision()}")
    load_before = os.getloadavg()

    def step(label: str) -> None:
        print(f"  running {label} ...", file=sys.stderr, flush=True)

    step(f"1. ReAct loop, {ITERATIONS} iterations")
    react = interleave(reps, {"h": lambda: h_react(RUNS_PER_REP),
                              **{m: (lambda m=m: lg_react(RUNS_PER_REP, m)) for m in L.MODES}})
    step(f"2. map-reduce over {ITEMS} items")
    mapred = interleave(reps, {"h": lambda: h_mapreduce(RUNS_PER_REP),
                               **{m: (lambda m=m: lg_mapreduce(RUNS_PER_REP, m)) for m in L.MODES}})
    load_after = os.getloadavg()

    rows: list[list[str]] = []

    def overhead_rows(no: str, title: str, r: dict[object, Sample], units: int, what: str) -> dict[str, float]:
        ours = r["h"]
        rows.append([no, f"{title}: per-{what} overhead", spread(ours, lambda s: fmt_us(s / units)),
                     fmt_us(r["default"].median / units), fmt_us(r["matched"].median / units), "—", "(figure)"])
        ups = {m: r[m].median / ours.median for m in L.MODES}
        worst = min(ups.values())
        rows.append([no, f"{title}: speed-up vs LangGraph", "—", f"{ups['default']:.2f}×", f"{ups['matched']:.2f}×",
                     f"≥ {TARGET_SPEEDUP}×",
                     verdict(worst >= TARGET_SPEEDUP, f"default {ups['default']:.2f}×, matched {ups['matched']:.2f}×"
                             + ("" if worst >= TARGET_SPEEDUP else f"; {TARGET_SPEEDUP / worst:.2f}× short"))])
        return ups

    react_ups = overhead_rows("1", f"ReAct loop, {ITERATIONS} iterations (2 nodes each)", react, ITERATIONS,
                              "iteration")
    h_flat = flatness(react["h"])
    lg_flat = {m: flatness(react[m]) for m in L.MODES}
    short = len(react["h"].info["short"])
    if h_flat is None:
        ours, result = "—", "n/a (no run held two whole commit periods)"
    else:
        h_early, h_late, h_ratio = h_flat
        spans = react["h"].info["spans"]
        ours = (f"{fmt_us(h_early)} → {fmt_us(h_late)} ({h_ratio:.2f}×), "
                f"{statistics.median(a for a, _ in spans):.0f} → {statistics.median(b for _, b in spans):.0f} "
                "iterations" + (f"; {short} run(s) too short, left out" if short else ""))
        result = verdict(h_ratio <= TARGET_FLAT, f"{h_ratio:.2f}×")
    rows.append(["1", "  per iteration, early window → late window (see below)", ours,
                 *(f"{fmt_us(e)} → {fmt_us(la)} ({x:.2f}×)" for e, la, x in (lg_flat[m] for m in L.MODES)),
                 f"≤ {TARGET_FLAT}×", result])
    map_ups = overhead_rows("2", f"map-reduce over {ITEMS} items, max_concurrency {MAP_CONCURRENCY}", mapred,
                            ITEMS, "item")
    rows.append(["", "  run wall time: ReAct loop", spread(react["h"], fmt_ms), fmt_ms(react["default"].median),
                 fmt_ms(react["matched"].median), "—", "(context)"])
    rows.append(["", "  run wall time: map-reduce", spread(mapred["h"], fmt_ms), fmt_ms(mapred["default"].median),
                 fmt_ms(mapred["matched"].median), "—", "(context)"])

    print()
    print(render_table(["#", "measurement", "Shadow Harness", "LangGraph default", "LangGraph matched", "target",
                        "result"], rows))
    print("\n" + LANGGRAPH_CONFIGS + "\n"
          f"Per-iteration overhead = run wall time / {ITERATIONS} (one model and one tool call per iteration, "
          f"no tool in the last);\nper-item overhead = run wall time / {ITEMS} (plan and reduce included). "
          "Early and late windows: from timestamps taken as each model call starts, medians;\n"
          f"Shadow Harness: {RUNS_PER_REP} runs of a {GROWTH_ITERATIONS}-iteration loop per repetition, their first and last whole "
          "group-commit periods (each holds exactly one commit; median iterations each shown);\n"
          f"LangGraph: the timed runs, {window_label()};\nLangGraph default writes its checkpoints in the background "
          "and invoke waits for them after the last node, so its windows leave most of its cost out.")
    print(f"\nload average (1 min) before {load_before[0]:.2f}, after {load_after[0]:.2f}; "
          f"total benchmark time {time.perf_counter() - started:.1f} s")

    scale = None
    if args.scaling:
        step("3. scaling: loop length and map width (Shadow Harness alone)")
        scale = scaling()
        loops, maps = scale
        print(f"\n3. Scaling, Shadow Harness alone (one store per size, median of {RUNS_PER_REP} runs after a warm-up)")
        print(render_table(["loop iterations", "per iteration (wall / N)", "first whole commit period",
                            "last whole commit period", "late / early"],
                           [[str(n), fmt_us(w), *((fmt_us(e), fmt_us(la), f"{la / e:.2f}×") if e and la
                                                  else ("—", "—", "fewer than two whole periods"))]
                            for n, (w, e, la) in loops.items()]))
        print(render_table([f"map items (max_concurrency {MAP_CONCURRENCY})", "per item (wall / N)",
                            "reading the run's history back (rt.history)"],
                           [[str(n), fmt_us(v), fmt_ms(h)] for n, (v, h) in maps.items()]))

    if args.json:
        def dump(s: Sample) -> dict:
            return {"median": s.median, "values": s.values, **s.info}
        names = {"h": "harness", **{m: f"langgraph_{m}" for m in L.MODES}}
        raw = {"reps": reps, "runs_per_rep": RUNS_PER_REP,
               "react": {names[k]: dump(s) for k, s in react.items()},
               "mapreduce": {names[k]: dump(s) for k, s in mapred.items()},
               "speedup": {"react": react_ups, "mapreduce": map_ups}}
        if scale is not None:
            raw["scaling"] = {"loop": {str(n): dict(zip(("per_iteration", "early", "late"), v))
                                       for n, v in scale[0].items()},
                              "map": {str(n): dict(zip(("per_item", "history"), v)) for n, v in scale[1].items()}}
        with open(args.json, "w") as f:
            json.dump(raw, f, indent=2)

    if args.breakdown:
        step("4. breakdown: the engine alone, every step committed, LangGraph nearest group commit")
        print("\n4. Breakdown: what bounds the speed-up" + breakdown(reps))

    if args.collector:
        step(f"5. the cyclic collector over {args.collector} runs of each case")
        print(f"\n5. Python's cyclic garbage collector over {args.collector} runs of each case in one process "
              "(SqlStore; each collection timed)\n" + collector(args.collector))

    if args.profile:
        print("\n== Where Shadow Harness spends the time ==")
        cases = [(f"1. ReAct loop, {ITERATIONS} iterations", react_graph(), 8, ITERATIONS, "iteration"),
                 (f"2. map-reduce over {ITEMS} items, max_concurrency {MAP_CONCURRENCY}", mapreduce_graph(),
                  MAP_CONCURRENCY, ITEMS, "item")]
        for title, graph, mc, units, what in cases:
            print(f"\n{title}, instrumented (no profiler, median of {RUNS_PER_REP} runs): "
                  + split_table(graph, mc, units, what))
            print(f"\n{title}, cProfile: " + profile(graph, mc, units, what))
    return 0


if __name__ == "__main__":
    sys.exit(main())
