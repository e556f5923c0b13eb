"""Where Shadow Harness spends its time and bytes (``run.py --profile``).

* cProfile of one run (after a warm-up run in the same store), reduced to the
  functions defined under ``runtime/``, by cumulative time;
* an instrumented split: wall time inside selected runtime methods during one
  run, measured without the profiler (the methods are wrapped in this process
  only; no runtime file is touched);
* bytes per table of the database after one chain run (SQLite ``dbstat``).
"""

from __future__ import annotations

import asyncio
import cProfile
import io
import os
import pstats
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import cases_harness as H
from _common import db_size, fresh_dir, render_table, table_sizes

RUNTIME_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "runtime") + os.sep


def _short(filename: str, line: int, name: str) -> str:
    rel = filename.split(os.sep + "runtime" + os.sep, 1)[-1]
    return f"runtime/{rel}:{line}({name})"


def runtime_rows(stats: pstats.Stats, top: int) -> list[tuple[str, int, float, float]]:
    """(function, calls, cumulative s, own s) for functions under runtime/, by cumulative time."""
    rows = []
    for (filename, line, name), (_cc, nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if filename.startswith(RUNTIME_DIR):
            rows.append((_short(filename, line, name), nc, ct, tt))
    rows.sort(key=lambda r: -r[2])
    return rows[:top]


def profile_run(graph, max_concurrency: int = 8, top: int = 18) -> tuple[float, list, str]:
    """cProfile the second run of ``graph`` in a fresh store; (profiled seconds, runtime rows, raw text)."""
    prof = cProfile.Profile()

    async def go(path: str) -> None:
        rt = H._runtime(path, max_concurrency)
        try:
            await rt.start(graph, {})
            prof.enable()
            run = await rt.start(graph, {})
            prof.disable()
            assert run.status == H.RunStatus.SUCCEEDED
        finally:
            rt.close()

    with fresh_dir("h-profile") as d:
        asyncio.run(go(os.path.join(d, "harness.db")))
    stats = pstats.Stats(prof)
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(12)
    return stats.total_tt, runtime_rows(stats, top), buf.getvalue()  # type: ignore[attr-defined]


def profile_history(n: int, top: int = 10) -> tuple[float, list]:
    prof = cProfile.Profile()
    graph = H.chain_graph(n)

    async def make(path: str) -> str:
        rt = H._runtime(path)
        try:
            return (await rt.start(graph, {})).id
        finally:
            rt.close()

    async def read(path: str, run_id: str) -> None:
        rt = H._runtime(path)
        try:
            prof.enable()
            await rt.history(run_id)
            prof.disable()
        finally:
            rt.close()

    with fresh_dir("h-profile") as d:
        path = os.path.join(d, "harness.db")
        run_id = asyncio.run(make(path))
        asyncio.run(read(path, run_id))
    stats = pstats.Stats(prof)
    return stats.total_tt, runtime_rows(stats, top)  # type: ignore[attr-defined]


SPLIT = [
    ("runtime.engine.loop", "RunLoop", ["_schedule", "_poll_limits", "_launch", "_collect", "_wait"]),
    ("runtime.engine.recorder", "Recorder", ["flush", "checkpoint_if_dirty"]),
    ("runtime.store.sql.write", "Writer", ["commit", "_write_children", "_checkpoint_row"]),
    ("runtime.store.sql.read", "Reader", ["cancel_request"]),
    ("runtime.runtime", "Runtime", ["_create"]),
]


@contextmanager
def instrumented() -> Iterator[Counter]:
    """Accumulate wall seconds spent inside the SPLIT methods while the block runs."""
    import importlib

    spent: Counter = Counter()
    saved: list[tuple[type, str, Callable]] = []

    def wrap(cls: type, name: str, fn: Callable) -> Callable:
        label = f"{cls.__name__}.{name}"
        if asyncio.iscoroutinefunction(fn):
            async def timed_async(*a, **k):
                t0 = time.perf_counter()
                try:
                    return await fn(*a, **k)
                finally:
                    spent[label] += time.perf_counter() - t0
            return timed_async

        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[label] += time.perf_counter() - t0
        return timed

    for module, cls_name, names in SPLIT:
        cls = getattr(importlib.import_module(module), cls_name)
        for name in names:
            fn = cls.__dict__[name]
            saved.append((cls, name, fn))
            setattr(cls, name, wrap(cls, name, fn))
    try:
        yield spent
    finally:
        for cls, name, fn in saved:
            setattr(cls, name, fn)


def split_run(graph, max_concurrency: int = 8, reps: int = 3) -> tuple[float, dict[str, float]]:
    """Median total and per-method wall seconds over ``reps`` runs (each after a warm-up)."""
    totals: list[float] = []
    per: dict[str, list[float]] = {}

    async def go(path: str) -> None:
        rt = H._runtime(path, max_concurrency)
        try:
            await rt.start(graph, {})
            with instrumented() as spent:
                t0 = time.perf_counter()
                await rt.start(graph, {})
                totals.append(time.perf_counter() - t0)
            for k, v in spent.items():
                per.setdefault(k, []).append(v)
        finally:
            rt.close()

    for _ in range(reps):
        with fresh_dir("h-split") as d:
            asyncio.run(go(os.path.join(d, "harness.db")))
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return med(totals), {k: med(v) for k, v in sorted(per.items(), key=lambda kv: -med(kv[1]))}


def parallel_timeline(n: int, max_concurrency: int, reps: int = 3) -> dict[str, float]:
    """Where the wall time of the bounded-parallelism case goes, from timestamps taken in the nodes.

    * start -> first node: ``Runtime.start`` until the first node body runs;
    * refill gap: a node's end until the node that takes its slot starts
      (k-th end to (k+max_concurrency)-th start, both sorted);
    * last node -> return: the last node's end until ``Runtime.start`` returns.
    Medians over ``reps`` runs (each after a warm-up run in the same store).
    """
    import statistics

    graph = H.parallel_graph(n)
    out: dict[str, list[float]] = {}

    async def go(path: str) -> None:
        rt = H._runtime(path, max_concurrency)
        try:
            await rt.start(graph, {})
            for _ in range(reps):
                H.TIMES["starts"].clear()
                H.TIMES["ends"].clear()
                t0 = time.perf_counter()
                await rt.start(graph, {})
                t1 = time.perf_counter()
                s, e = sorted(H.TIMES["starts"]), sorted(H.TIMES["ends"])
                gaps = [s[k + max_concurrency] - e[k] for k in range(n - max_concurrency)]
                sleeps = [b - a for a, b in zip(H.TIMES["starts"], H.TIMES["ends"])]
                for key, value in (("wall", t1 - t0), ("start -> first node", s[0] - t0),
                                   ("refill gap (median)", statistics.median(gaps)),
                                   ("refill gap (max)", max(gaps)),
                                   ("asyncio.sleep(0.05) as observed", statistics.median(sleeps)),
                                   ("last node -> return", t1 - e[-1])):
                    out.setdefault(key, []).append(value)
        finally:
            rt.close()

    with fresh_dir("h-timeline") as d:
        asyncio.run(go(os.path.join(d, "harness.db")))
    return {k: statistics.median(v) for k, v in out.items()}


def commit_split(n: int, reps: int = 3) -> tuple[float, dict[str, float]]:
    """Inside ``SqlStore.commit`` during one n-node chain run: where a step's commit goes."""

    from runtime.store.sql import store as sql
    from runtime.store.sql.write import Writer

    graph = H.chain_graph(n)
    parts = [(sql.SqlStore, "commit", "SqlStore.commit (whole)"),
             (Writer, "_write_children", "  Writer._write_children (INSERTs of one batch)"),
             (Writer, "_checkpoint_row", "  Writer._checkpoint_row (node-state delta)")]
    totals: list[float] = []
    per: dict[str, list[float]] = {}

    async def go(path: str) -> None:
        rt = H._runtime(path)
        spent: Counter = Counter()
        saved = []
        try:
            await rt.start(graph, {})
            for cls, name, label in parts:
                fn = cls.__dict__[name]
                saved.append((cls, name, fn))

                def timed(*a, _fn=fn, _label=label, **k):
                    t0 = time.perf_counter()
                    try:
                        return _fn(*a, **k)
                    finally:
                        spent[_label] += time.perf_counter() - t0
                setattr(cls, name, timed)
            t0 = time.perf_counter()
            await rt.start(graph, {})
            totals.append(time.perf_counter() - t0)
        finally:
            for cls, name, fn in saved:
                setattr(cls, name, fn)
            rt.close()
        for k, v in spent.items():
            per.setdefault(k, []).append(v)

    for _ in range(reps):
        with fresh_dir("h-commit") as d:
            asyncio.run(go(os.path.join(d, "harness.db")))
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return med(totals), {label: med(per[label]) for _, _, label in parts if label in per}


def sqlite_floor(n: int = 200, reps: int = 3) -> float:
    """Seconds per step for the same rows a chain step writes (UPDATE runs; INSERT checkpoint,
    pending write, attempt, 2 trace events; COMMIT), in the runtime's own schema, with the
    plain ``sqlite3`` driver and the same pragmas (WAL, synchronous=NORMAL)."""
    import json
    import sqlite3

    graph = H.chain_graph(1)

    async def make(path: str) -> None:
        rt = H._runtime(path)
        try:
            await rt.start(graph, {})
        finally:
            rt.close()

    best: list[float] = []
    for _ in range(reps):
        with fresh_dir("h-floor") as d:
            path = os.path.join(d, "harness.db")
            asyncio.run(make(path))
            conn = sqlite3.connect(path, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            t0 = time.perf_counter()
            for i in range(1, n + 1):
                t = time.time()
                node = f"n{i:04d}"
                conn.execute("BEGIN")
                conn.execute("UPDATE runs SET status=?, usage=?, head_seq=?, event_seq=?, updated_at=? "
                             "WHERE pk=1 AND fence=fence", ("running", json.dumps({"steps": i}), i, 2 * i, t))
                conn.execute("INSERT INTO checkpoints (id, run_pk, seq, parent_id, nodes, states, \"full\", "
                             "snapshot, event_seq, created_at, source) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                             (f"cp_floor{i:010d}", 1, 1000 + i, f"cp_floor{i - 1:010d}", json.dumps([node]),
                              json.dumps({node: "succeeded"}), 0, None, 2 * i, t, "step"))
                conn.execute("INSERT INTO pending_writes (run_pk, checkpoint_seq, node, attempt, kind, value, "
                             "created_at) VALUES (?,?,?,?,?,?,?)", (1, 1000 + i, node, 1, "writes", "{}", t))
                conn.execute("INSERT INTO node_attempts (run_pk, node, attempt, status, started_at, ended_at) "
                             "VALUES (?,?,?,?,?,?)", (1, node, 1, "succeeded", t, t))
                conn.executemany("INSERT INTO trace_events (run_pk, seq, at, type, node, attempt, data) "
                                 "VALUES (?,?,?,?,?,?,?)",
                                 [(1, 10_000 + 2 * i, t, "node.succeed", node, 1, '{"status":"succeeded"}'),
                                  (1, 10_001 + 2 * i, t, "node.start", node, 1, '{"status":"running"}')])
                conn.execute("COMMIT")
            best.append((time.perf_counter() - t0) / n)
            conn.close()
    return sorted(best)[len(best) // 2]


def _chain_db(path: str, n: int, page_size: int | None = None) -> None:
    """One run of an n-node chain into a new database file (optionally pre-created with a page size)."""
    import sqlite3

    if page_size is not None:
        conn = sqlite3.connect(path)
        conn.execute(f"PRAGMA page_size={page_size}")
        conn.execute("VACUUM")   # writes the header: the page size is fixed from here on
        conn.close()
    graph = H.chain_graph(n)

    async def go() -> None:
        rt = H._runtime(path)
        try:
            await rt.start(graph, {})
        finally:
            rt.close()

    asyncio.run(go())


def size_breakdown(n: int) -> tuple[int, dict[str, int]]:
    with fresh_dir("h-size") as d:
        path = os.path.join(d, "harness.db")
        _chain_db(path, n)
        total = db_size(path)
        return total, table_sizes(path)


def size_contents(n: int) -> dict[str, float]:
    """Payload bytes (not pages) of the parts that grow with the graph, after one n-node chain."""
    import sqlite3

    with fresh_dir("h-size") as d:
        path = os.path.join(d, "harness.db")
        _chain_db(path, n)
        conn = sqlite3.connect(path)
        try:
            q = lambda sql: conn.execute(sql).fetchone()  # noqa: E731
            full_rows, full_bytes = q("SELECT COUNT(*), SUM(LENGTH(states)) FROM checkpoints WHERE \"full\"")
            delta_rows, delta_bytes = q("SELECT COUNT(*), SUM(LENGTH(states)) FROM checkpoints WHERE NOT \"full\"")
            (graph_bytes,) = q("SELECT SUM(LENGTH(description)) FROM graphs")
            events, event_bytes = q("SELECT COUNT(*), SUM(LENGTH(type) + LENGTH(node) + LENGTH(data)) "
                                    "FROM trace_events")
        finally:
            conn.close()
        return {"db": db_size(path), "full_rows": full_rows, "full_state_bytes": full_bytes or 0,
                "delta_rows": delta_rows, "delta_state_bytes": delta_bytes or 0,
                "graph_description_bytes": graph_bytes or 0, "events": events, "event_text_bytes": event_bytes or 0}


def size_by_page_size(n: int, sizes: tuple[int, ...] = (4096, 2048, 1024)) -> dict[int, int]:
    """Database bytes after one n-node chain when the file is created with each SQLite page size."""
    out = {}
    for ps in sizes:
        with fresh_dir("h-pages") as d:
            path = os.path.join(d, "harness.db")
            _chain_db(path, n, ps)
            out[ps] = db_size(path)
    return out


def report(n: int = 200, width: int = 200) -> str:
    out: list[str] = []
    cases = [(f"chain of {n}", H.chain_graph(n), 8, n),
             (f"fan-out 1->{width}->1, max_concurrency=8", H.fanout_graph(width), 8, width + 2),
             (f"fan-out 1->{width}->1, max_concurrency={width}", H.fanout_graph(width), width, width + 2)]
    for title, graph, mc, nodes in cases:
        total, per = split_run(graph, mc)
        out.append(f"\nInstrumented split, {title} (no profiler; median of 3; methods nest, "
                   f"e.g. _flush contains commit): run {total * 1e3:.1f} ms = {total / nodes * 1e6:.0f} µs/node")
        out.append(render_table(["method", "ms per run", "µs per node", "share of run"],
                                [[k, f"{v * 1e3:.1f}", f"{v / nodes * 1e6:.0f}", f"{v / total:.0%}"]
                                 for k, v in per.items()]))
        profiled, rows, _raw = profile_run(graph, mc)
        out.append(f"\ncProfile, {title}: {profiled * 1e3:.0f} ms under the profiler; "
                   f"runtime/ functions by cumulative time")
        out.append(render_table(["function", "calls", "cumulative ms", "own ms"],
                                [[f, str(c), f"{ct * 1e3:.1f}", f"{tt * 1e3:.1f}"] for f, c, ct, tt in rows]))
    total, per = commit_split(n)
    floor = sqlite_floor(n)
    out.append(f"\nInside SqlStore.commit, chain of {n} (no profiler; median of 3): run {total * 1e3:.1f} ms; "
               f"the same rows with the plain sqlite3 driver: {floor * 1e6:.0f} µs per step")
    out.append(render_table(["part", "ms per run", "µs per step"],
                            [[k, f"{v * 1e3:.1f}", f"{v / n * 1e6:.0f}"] for k, v in per.items()]))
    total, per = split_run(H.parallel_graph(50), 8)
    out.append(f"\nInstrumented split, 50 x sleep(0.05), max_concurrency=8 (median of 3): run {total * 1e3:.1f} ms")
    out.append(render_table(["method", "ms per run", "share of run"],
                            [[k, f"{v * 1e3:.1f}", f"{v / total:.0%}"] for k, v in per.items()]))
    timeline = parallel_timeline(50, 8)
    out.append("\nTimeline of the same case, from timestamps taken inside the nodes (median of 3 runs)")
    out.append(render_table(["interval", "ms"], [[k, f"{v * 1e3:.2f}"] for k, v in timeline.items()]))
    profiled, rows = profile_history(n)
    out.append(f"\ncProfile, history() of a {n}-node chain from a fresh store: {profiled * 1e3:.1f} ms "
               f"under the profiler")
    out.append(render_table(["function", "calls", "cumulative ms", "own ms"],
                            [[f, str(c), f"{ct * 1e3:.2f}", f"{tt * 1e3:.2f}"] for f, c, ct, tt in rows]))
    total, tables = size_breakdown(n)
    out.append(f"\nDatabase bytes after one {n}-node chain: {total:,} ({total / 2**20:.3f} MiB)")
    if tables:
        out.append(render_table(["table / index", "bytes", "share"],
                                [[k, f"{v:,}", f"{v / total:.0%}"] for k, v in tables.items()]))
    else:
        out.append("(this SQLite build has no dbstat: no per-table breakdown)")
    contents = {m: size_contents(m) for m in (50, n, 4 * n)}
    out.append("\nWhat grows with N (payload bytes, one chain run each): node-state columns of full vs delta "
               "checkpoint rows, the stored graph description, trace events")
    keys = ["db", "full_rows", "full_state_bytes", "delta_rows", "delta_state_bytes",
            "graph_description_bytes", "events", "event_text_bytes"]
    out.append(render_table(["N", *keys], [[str(m), *(f"{c[k]:,}" for k in keys)] for m, c in contents.items()]))
    by_page = size_by_page_size(n)
    out.append(f"\nDatabase bytes after one {n}-node chain, file created with a given SQLite page size "
               f"(the runtime's default is 4096)")
    out.append(render_table(["page_size", "bytes", "MiB"], [[str(ps), f"{b:,}", f"{b / 2**20:.3f}"]
                                                           for ps, b in by_page.items()]))
    return "\n".join(out)


if __name__ == "__main__":
    print(report())
