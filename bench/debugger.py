"""Server time of the debugger, measured in-process (Litestar's test client, a real
SQLite file): the run page of a 1,000-node run with 1,000 checkpoints and 10,000 trace
events, stepping to another checkpoint (the htmx request), and the runs list with
10,000 runs; plus the HTML sent for that run page.

    .venv/bin/python bench/debugger.py [--runs 10000] [--reps 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from litestar.testing import TestClient  # noqa: E402

from runtime import Graph, Runtime, SqlStore  # noqa: E402
from server.web import create_app  # noqa: E402

NODES = 1000
EMITS = 8   # custom events per node: with start and succeed, 10 events a node


def chain() -> Graph:
    g = Graph("bench_chain")
    prev: list[str] = []
    for i in range(NODES):
        name = f"n{i:04d}"

        async def node(state: Any, ctx: Any, i: int = i) -> dict[str, Any]:
            for k in range(EMITS):
                ctx.emit({"step": i, "k": k})
            return {f"f{i % 50}": i}

        g.add_node(name, node, after=prev)
        prev = [name]
    return g


def one() -> Graph:
    g = Graph("bench_one")

    @g.node()
    async def only(state: Any) -> None:
        return None

    return g


def timed(fn: Any, reps: int) -> tuple[float, float, Any]:
    times, out = [], None
    for _ in range(reps):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000, min(times) * 1000, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-debugger-"))
    rt = Runtime(store=SqlStore(f"sqlite:///{folder / 'h.db'}"))
    t = time.perf_counter()
    big = asyncio.run(rt.start(chain(), {}))
    cps = asyncio.run(rt.history(big.id))
    events = asyncio.run(rt.events(big.id))
    print(f"big run: {len(cps)} checkpoints, {len(events)} events, built in {time.perf_counter() - t:.1f} s")
    small = one().compile()

    async def many() -> None:
        for _ in range(args.runs - 1):
            await rt.start(small, {})
    t = time.perf_counter()
    asyncio.run(many())
    print(f"{args.runs} runs in the store, built in {time.perf_counter() - t:.1f} s")
    app = create_app(rt)
    rows = []
    with TestClient(app) as c:
        c.get(f"/runs/{big.id}")   # warm: the graph's layout is drawn once per version
        med, best, r = timed(lambda: c.get(f"/runs/{big.id}"), args.reps)
        assert r.status_code == 200, r.text[:500]
        rows.append(("run page, 1,000 nodes / 1,000 checkpoints / 10,000 events", med, best, 200, len(r.content)))
        mid = cps[len(cps) // 2].seq
        hx = {"HX-Request": "true", "HX-Target": "main"}
        med, best, r = timed(lambda: c.get(f"/runs/{big.id}?cp={mid}", headers=hx), args.reps)
        assert r.status_code == 200
        rows.append(("step to another checkpoint (htmx fragment)", med, best, 30, len(r.content)))
        med, best, r = timed(lambda: c.get("/runs"), args.reps)
        assert r.status_code == 200
        rows.append((f"runs list, {args.runs:,} runs", med, best, 100, len(r.content)))
        med, best, r = timed(lambda: c.get("/runs?page=150"), args.reps)
        rows.append((f"runs list, page 150 of {args.runs:,}", med, best, 100, len(r.content)))
    print()
    print("| measurement | median | best | target | result | HTML sent |")
    print("|---|---|---|---|---|---|")
    for name, med, best, target, size in rows:
        verdict = "PASS" if med <= target else f"MISS ({med / target:.1f}×)"
        print(f"| {name} | {med:.1f} ms | {best:.1f} ms | ≤ {target} ms | {verdict} | {size / 1024:.0f} KiB |")
    rt.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
