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


def browser_rows(app: Any, run_id: str, mid: int, reps: int) -> list[tuple[str, float, float, Any, int]]:
    """The same run page loaded in Chromium over a real socket: time to interactive (the
    document parsed and its deferred scripts, htmx included, run) and load; then one
    step to another checkpoint by click, until the swapped panel is in place."""
    import os
    import socket
    import threading

    import uvicorn
    from playwright.sync_api import sync_playwright

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}/runs/{run_id}"
    tti, load, step = [], [], []
    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run", "--disable-quic"]
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium"), args=args)
            page = browser.new_page()
            page.goto(url)   # warm: the drawing is cached, the browser's caches too
            for _ in range(reps):
                page.goto(url, wait_until="load")
                nav = page.evaluate("JSON.stringify(performance.getEntriesByType('navigation')[0])")
                import json as _json
                t = _json.loads(nav)
                tti.append(t["domContentLoadedEventEnd"] - t["startTime"])
                load.append(t["loadEventEnd"] - t["startTime"])
                link = page.locator(".timeline a.cp-link").nth(5)   # one in the timeline's window
                seq = link.get_attribute("data-seq")
                started = time.perf_counter()
                link.click()
                page.wait_for_selector(f'.timeline a.selected[data-seq="{seq}"]')
                step.append((time.perf_counter() - started) * 1000)
            browser.close()
    finally:
        server.should_exit = True
        thread.join(5)
    return [("Chromium: run page, time to interactive", statistics.median(tti), min(tti), None, 0),
            ("Chromium: run page, load event", statistics.median(load), min(load), None, 0),
            ("Chromium: click to another checkpoint, panel swapped", statistics.median(step), min(step), None, 0)]


#: seeding the demo store must take less than this (``make demo`` waits for it)
SEED_BUDGET_MS = 10_000


def seed_row(reps: int) -> tuple[str, float, float, Any, int]:
    """Seeding the demo store, each time on a fresh SQLite file."""
    from server.demo import seed_demo

    times = []
    for _ in range(reps):
        folder = Path(tempfile.mkdtemp(prefix="bench-seed-"))
        rt = Runtime(store=SqlStore(f"sqlite:///{folder / 'demo.db'}"))
        try:
            t = time.perf_counter()
            asyncio.run(seed_demo(rt))
            times.append((time.perf_counter() - t) * 1000)
        finally:
            rt.close()
    return ("seeding the demo store (18 runs), fresh SQLite file", statistics.median(times), min(times),
            SEED_BUDGET_MS, 0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-browser", action="store_true", help="skip the page load in Chromium")
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
    rows.append(seed_row(min(args.reps, 3)))
    if not args.no_browser:
        rows += browser_rows(app, big.id, cps[len(cps) // 2].seq, args.reps)
    print()
    print("| measurement | median | best | target | result | HTML sent |")
    print("|---|---|---|---|---|---|")
    for name, med, best, target, size in rows:
        verdict = "(figure)" if target is None else "PASS" if med <= target else f"MISS ({med / target:.1f}×)"
        target_text = "—" if target is None else f"≤ {target} ms"
        size_text = f"{size / 1024:.0f} KiB" if size else "—"
        print(f"| {name} | {med:.1f} ms | {best:.1f} ms | {target_text} | {verdict} | {size_text} |")
    rt.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
