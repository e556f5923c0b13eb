"""How much of a run of ``agents.py`` its store commits take: the commits of its steps
(group commits, not waiting for the disk) and those forced to disk (the run's end).

Each of the loop and the map-reduce runs ``--runs`` times in one store after a warm-up,
``gc.collect()`` before each as ``agents.py`` does; ``SqlStore.commit`` is timed around
the call. Printed: medians per run of the wall time, the step commits and the forced ones.

    python bench/commits.py [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import agents as A  # noqa: E402
from _common import fresh_dir, settle  # noqa: E402

from runtime import SqlStore  # noqa: E402


@contextmanager
def commits_timed(forced: list[float], steps: list[float]) -> Iterator[None]:
    inner = SqlStore.commit

    def timed(self: SqlStore, batch: object) -> None:
        t0 = time.perf_counter()
        try:
            inner(self, batch)   # type: ignore[arg-type]
        finally:
            (forced if batch.durable else steps).append(time.perf_counter() - t0)   # type: ignore[attr-defined]

    SqlStore.commit = timed   # type: ignore[method-assign]
    try:
        yield
    finally:
        SqlStore.commit = inner   # type: ignore[method-assign]


def measure(which: str, runs: int) -> dict[str, float]:
    walls: list[float] = []
    forced_per_run: list[float] = []
    steps_per_run: list[float] = []

    async def main(path: str) -> None:
        rt = A._runtime(path)
        graph = A.react_graph() if which == "react" else A.mapreduce_graph()
        options = {} if which == "react" else {"max_concurrency": A.MAP_CONCURRENCY}
        try:
            await rt.start(graph, {}, **options)   # warm-up
            for _ in range(runs):
                forced: list[float] = []
                steps: list[float] = []
                settle()
                with commits_timed(forced, steps):
                    t0 = time.perf_counter()
                    await rt.start(graph, {}, **options)
                    walls.append(time.perf_counter() - t0)
                forced_per_run.append(sum(forced))
                steps_per_run.append(sum(steps))
        finally:
            rt.close()

    with fresh_dir(f"commits-{which}") as d:
        asyncio.run(main(os.path.join(d, "harness.db")))
    return {"wall": statistics.median(walls), "steps": statistics.median(steps_per_run),
            "forced": statistics.median(forced_per_run)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    print("| run | wall | step commits | forced commits (the end) |")
    print("|---|---|---|---|")
    for which, label in (("react", f"ReAct loop, {A.ITERATIONS} iterations"),
                         ("map", f"map-reduce over {A.ITEMS} items")):
        m = measure(which, args.runs)
        print(f"| {label} | {m['wall'] * 1e3:.2f} ms | {m['steps'] * 1e3:.2f} ms | {m['forced'] * 1e3:.2f} ms |")


if __name__ == "__main__":
    main()
