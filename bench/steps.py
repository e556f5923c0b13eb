"""What a node costs, counted rather than timed: the same figures on a busy machine.

Timings on a shared machine move by a third from one hour to the next; a change to
the run path worth 3 % cannot be seen in them. This script counts instead, for the two
graphs of ``agents.py`` (a ReAct loop of 100 iterations, a map over 200 items):

* Python lines executed and Python calls made per node, under a tracer, in one run
  after two warm-up runs on a MemoryStore (the engine alone; one commit per run, so
  that the count does not depend on speed), in total and by file;
* what the SQLite store writes for one run, with every step committed and with one
  commit for the whole run (the default group commit lies between, by timing): transactions, the statements that write rows
  (INSERT/UPDATE/DELETE, several rows each), and WAL frames (pages written; the disk's
  share of a commit grows with them), by table or index.

    python bench/steps.py [--top N]

Counts are exact for a given tree and Python version; compare two trees by running
this script in each (``git worktree``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import sqlite3
import struct
import sys
import tempfile
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import agents as A  # noqa: E402
from runtime import Runtime  # noqa: E402
from runtime.store.memory import MemoryStore  # noqa: E402
from runtime.store.sql import SqlStore  # noqa: E402
from runtime.store.sql import connection as sql_connection  # noqa: E402
from runtime.store.sql import store as sql_store  # noqa: E402

#: a group-commit window longer than any run here: what is not forced commits once, at the end
WHOLE_RUN = 60.0
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
CASES: dict[str, tuple[Callable[[], Any], dict[str, Any], int]] = {
    # graph, start options, node attempts per run
    "ReAct loop, 100 iterations": (A.react_graph, {}, 2 * A.ITERATIONS),
    "map-reduce over 200 items": (A.mapreduce_graph, {"max_concurrency": A.MAP_CONCURRENCY}, A.ITEMS + 2),
}


def _where(filename: str) -> str:
    if filename.startswith(ROOT):
        return filename[len(ROOT):]
    if "site-packages" in filename:
        return filename.split("site-packages" + os.sep, 1)[1]
    return os.path.basename(filename) if filename.startswith(os.sep) else filename


def count_lines(graph: Any, options: dict[str, Any]) -> tuple[collections.Counter[str], collections.Counter[str]]:
    """(lines by file, calls by file) of one run on a MemoryStore, after two warm-up runs."""
    lines: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()

    def on_line(frame: Any, event: str, _arg: Any) -> Any:
        if event == "line":
            lines[frame.f_code.co_filename] += 1
        return on_line

    def on_call(frame: Any, event: str, _arg: Any) -> Any:
        if event == "call":
            calls[frame.f_code.co_filename] += 1
            return on_line
        return None

    async def main() -> None:
        # one commit per run: how many a run makes otherwise depends on how fast it goes
        rt = Runtime(store=MemoryStore(), max_concurrency=8, group_commit=WHOLE_RUN)
        for _ in range(2):
            await rt.start(graph, {}, **options)
        sys.settrace(on_call)
        try:
            await rt.start(graph, {}, **options)
        finally:
            sys.settrace(None)

    asyncio.run(main())
    return (collections.Counter({_where(f): n for f, n in lines.items()}),
            collections.Counter({_where(f): n for f, n in calls.items()}))


def count_writes(graph: Any, options: dict[str, Any],
                 group_commit: float) -> tuple[int, int, collections.Counter[str]]:
    """(transactions, statements, WAL frames by table) of one run on a SQLite file, after a
    warm-up run; the WAL is emptied before the run and not checkpointed during it."""
    original = sql_store._sqlite_pragmas
    counts = collections.Counter[str]()

    def pragmas(conn: Any, record: Any) -> None:
        original(conn, record)
        conn.execute("PRAGMA wal_autocheckpoint=0")   # every frame the run writes stays in the WAL
        conn.set_trace_callback(written)

    def written(sql: str) -> None:
        if sql.lstrip()[:6].upper() in ("INSERT", "UPDATE", "DELETE"):
            counts["statements"] += 1

    transaction = sql_connection.WriteConnection.transaction

    def counted(self: Any, durable: bool) -> Any:
        counts["transactions"] += 1
        return transaction(self, durable)

    with tempfile.TemporaryDirectory(prefix="bench-steps-") as d:
        path = os.path.join(d, "harness.db")
        sql_store._sqlite_pragmas = pragmas
        sql_connection.WriteConnection.transaction = counted  # type: ignore[method-assign]
        try:
            async def main() -> bytes:
                rt = Runtime(store=SqlStore(f"sqlite:///{path}"), max_concurrency=8, group_commit=group_commit)
                try:
                    await rt.start(graph, {}, **options)
                    with sqlite3.connect(path) as c:
                        c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                    counts.clear()
                    await rt.start(graph, {}, **options)
                    with open(path + "-wal", "rb") as f:
                        return f.read()
                finally:
                    rt.close()
            wal = asyncio.run(main())
        finally:
            sql_store._sqlite_pragmas = original
            sql_connection.WriteConnection.transaction = transaction  # type: ignore[method-assign]
        with sqlite3.connect(path) as c:
            owner = {page: name for name, page in c.execute("SELECT name, pageno FROM dbstat")}
    frames: collections.Counter[str] = collections.Counter()
    page_size = struct.unpack(">I", wal[8:12])[0]
    at = 32
    while at + 24 <= len(wal):
        page = struct.unpack(">I", wal[at:at + 4])[0]
        if page == 0:
            break
        frames[owner.get(page, "(freed)")] += 1
        at += 24 + page_size
    return counts["transactions"], counts["statements"], frames


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=12, help="files shown per case")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}; counts per node attempt of one run")
    for name, (make, options, nodes) in CASES.items():
        graph = make()
        lines, calls = count_lines(graph, options)
        print(f"\n{name}: {sum(lines.values()) / nodes:.0f} lines and {sum(calls.values()) / nodes:.0f} "
              f"Python calls per node ({nodes} nodes)")
        for where, n in lines.most_common(args.top):
            print(f"  {n / nodes:7.1f} lines  {calls[where] / nodes:6.2f} calls  {where}")
        for label, window in (("every step committed (group_commit=0)", 0.0),
                              ("one commit for the run", WHOLE_RUN)):
            transactions, statements, frames = count_writes(graph, options, window)
            print(f"  SqlStore, {label}: {transactions} transactions, {statements} writing statements, "
                  f"{sum(frames.values())} WAL frames (pages written); frames by table or index:")
            print("    " + ", ".join(f"{t} {n}" for t, n in frames.most_common()))


if __name__ == "__main__":
    main()
