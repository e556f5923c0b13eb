"""A 200-turn conversation on one thread, side by side with LangGraph.

Each turn appends a ~500-byte user message; the graph's one node reads the whole
history and appends a ~500-byte reply. Measured per turn: wall time of the turn call
(``Runtime.start(..., thread_id=T)`` / ``graph.invoke(input, config)`` with the same
thread), and the database size after every 50 turns. Target: turn 200 costs within
1.3x of turn 10 (cost follows what a turn writes, not the conversation's length), and
storage grows linearly.

    .venv/bin/python bench/threads.py [--turns 200] [--reps 3]
"""

from __future__ import annotations

import argparse
import asyncio
import operator
import os
import statistics
import sys
from typing import Annotated, TypedDict

from pydantic import BaseModel

sys.path.insert(0, os.path.dirname(__file__))
from _common import check, db_size, fresh_dir, now  # noqa: E402

from runtime import Graph, Runtime, SqlStore, append  # noqa: E402

MESSAGE = "m" * 490


class Chat(BaseModel):
    messages: Annotated[list[str], append] = []


def harness_graph() -> Graph:
    g = Graph("chat_bench", state=Chat)

    @g.node()
    async def reply(state: Chat) -> dict:
        return {"messages": [f"reply {len(state.messages):05d} {MESSAGE}"]}

    return g


class LGChat(TypedDict):
    messages: Annotated[list[str], operator.add]


def lg_reply(state: LGChat) -> dict:
    return {"messages": [f"reply {len(state['messages']):05d} {MESSAGE}"]}


def harness_turns(turns: int) -> tuple[list[float], list[int]]:
    async def go(path: str) -> tuple[list[float], list[int]]:
        rt = Runtime(store=SqlStore(f"sqlite:///{path}"))
        graph = harness_graph().compile()
        times, sizes = [], []
        try:
            for turn in range(1, turns + 1):
                t0 = now()
                run = await rt.start(graph, {"messages": [f"user {turn:05d} {MESSAGE}"]}, thread_id="bench")
                times.append(now() - t0)
                check(run.status == "succeeded", f"turn {turn} {run.status}")
                if turn % 50 == 0:
                    sizes.append(db_size(path))
            state = await rt.thread_state("bench")
            check(len(state.messages) == 2 * turns, "every turn's messages are in the thread")  # type: ignore[attr-defined]
        finally:
            rt.close()
        return times, sizes

    with fresh_dir("threads-h") as d:
        return asyncio.run(go(os.path.join(d, "h.db")))


def langgraph_turns(turns: int) -> tuple[list[float], list[int]]:
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    builder = StateGraph(LGChat)
    builder.add_node("reply", lg_reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    with fresh_dir("threads-lg") as d:
        path = os.path.join(d, "lg.db")
        times, sizes = [], []
        with SqliteSaver.from_conn_string(path) as saver:
            graph = builder.compile(checkpointer=saver)
            config = {"configurable": {"thread_id": "bench"}}
            for turn in range(1, turns + 1):
                t0 = now()
                out = graph.invoke({"messages": [f"user {turn:05d} {MESSAGE}"]}, config)
                times.append(now() - t0)
                check(len(out["messages"]) == 2 * turn, "every turn's messages are in the thread")
                if turn % 50 == 0:
                    sizes.append(db_size(path))
        return times, sizes


def window(times: list[list[float]], at: int, width: int = 5) -> float:
    """Median over repetitions of the mean time of the turns around turn ``at`` (1-based)."""
    lo = max(0, at - 1 - width // 2)
    return statistics.median(sum(t[lo:lo + width]) / width for t in times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    rows = {}
    for name, fn in (("Shadow Harness", harness_turns), ("LangGraph + SqliteSaver", langgraph_turns)):
        runs = [fn(args.turns) for _ in range(args.reps)]
        times = [r[0] for r in runs]
        sizes = runs[-1][1]
        rows[name] = (window(times, 10), window(times, args.turns - 2), sizes)
    print(f"{'system':26} {'turn 10':>10} {'turn ' + str(args.turns):>10} {'ratio':>7}   "
          f"DB size every 50 turns (KiB)")
    for name, (early, late, sizes) in rows.items():
        print(f"{name:26} {early * 1e3:8.2f}ms {late * 1e3:8.2f}ms {late / early:6.2f}x   "
              + " ".join(f"{s / 1024:.0f}" for s in sizes))
    h_early, h_late, _ = rows["Shadow Harness"]
    print(f"target: turn {args.turns} within 1.3x of turn 10: "
          f"{'PASS' if h_late / h_early <= 1.3 else 'MISS'} ({h_late / h_early:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
