"""Demo data for the debugger: ``seed_demo(rt)`` fills a fresh store with runs of the
example graphs that show every feature of the debugger, and names them in ``DemoIds``.

What it makes (one run each unless said otherwise; the field of ``DemoIds`` first):

* ``research`` — the research agent (``examples.agent``): a tool loop, a map over the
  sources found and a review subgraph; succeeded.
* ``checkout_failed`` / ``checkout_continued`` — the A/B case (``examples.demo_shop``):
  A charges the customer (a counted effect) while B fails for good; once B is fixed,
  ``resume`` continues the run and A's charge is not made again.
* ``refund_review`` and ``tool_review`` — paused on a person's answer with a typed
  response model (an enum, bounds, required fields, descriptions); in the second the
  payload proposes tool arguments the answer may edit.
* ``support`` and its branches: ``fork_patched`` (a patch, every effect MOCKED,
  succeeded), ``fork_unrecorded`` (a patch that reaches an effect the source never
  made: paused on an ``unrecorded`` question) and ``replay`` (against a new version
  of the graph: its report has divergences).
* ``cancelled`` — cancelled with a reason while a node was in flight.
* ``compensated`` — a trip booking that failed after two bookings; both compensated.
* ``in_doubt`` — a payout whose worker process was killed (SIGKILL) inside the bank
  transfer; resumed here, the run was recovered and paused on an ``in_doubt`` question.
* ``retried`` — a node that failed with a transient error, then timed out, then succeeded.
* ``fan_out`` — a map over 300 documents (300 node instances), succeeded.
* ``chat_thread`` / ``chat_turns`` — a three-turn conversation (``examples.chat``).
* ``react`` — a ReAct loop of twelve tool calls (thirteen model calls).

No run is left RUNNING or QUEUED. The in-doubt payout is the one part that needs a
second process: the store must be a ``SqlStore`` that process can open too (a SQLite
file or PostgreSQL); it is started first and seeding goes on while it imports.

    python -m server.demo demo.db      # seed a new SQLite file and print what is in it
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from collections.abc import Awaitable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import examples
from examples import demo_payments, demo_shop
from runtime import (
    ExecutableGraph,
    InvalidRequest,
    Run,
    RunStatus,
    Runtime,
    SqlStore,
    resolve_ref,
)

from .connect import database_url

__all__ = ["DEMO_GRAPHS", "DemoIds", "SeedError", "main", "seed_demo", "summary"]

#: every graph the demo runs, by ``module:attribute`` (a server registers them by these)
DEMO_GRAPHS: dict[str, str] = {
    "research": "examples.agent:graph",
    "chat": "examples.chat:graph",
    "checkout": "examples.demo_shop:graph",
    "trip": "examples.demo_trip:graph",
    "refund_review": "examples.demo_approvals:refund_graph",
    "assistant": "examples.demo_approvals:assistant_graph",
    "support": "examples.demo_support:graph",
    "support_v2": "examples.demo_support:graph_v2",
    "rates": "examples.demo_ops:rates_graph",
    "batch": "examples.demo_ops:batch_graph",
    "crawl": "examples.demo_ops:crawl_graph",
    "payout": "examples.demo_payments:graph",
    "react": "examples.demo_react:graph",
}

#: documents in the fan-out run: one map instance each
FAN_OUT = 300
#: the longest any single step of seeding may take before it is reported as stuck
STEP_TIMEOUT = 30.0

T = TypeVar("T")


class SeedError(RuntimeError):
    """Seeding did not produce what the demo needs (a step ended in another state)."""


@dataclass(frozen=True, slots=True)
class DemoIds:
    """The ids of what ``seed_demo`` made (run ids unless the name says otherwise)."""

    research: str
    checkout_failed: str
    checkout_continued: str
    refund_review: str
    tool_review: str
    support: str
    fork_patched: str
    fork_unrecorded: str
    replay: str
    cancelled: str
    compensated: str
    in_doubt: str
    retried: str
    fan_out: str
    chat_thread: str            # a thread id
    chat_turns: tuple[str, ...]
    react: str

    def runs(self) -> dict[str, str]:
        """Every run, by name (the chat turns as ``chat_turn_1`` …), in field order."""
        out: dict[str, str] = {}
        for name, value in asdict(self).items():
            if name == "chat_turns":
                out.update({f"chat_turn_{i}": run_id for i, run_id in enumerate(value, 1)})
            elif name != "chat_thread":
                out[name] = value
        return out


async def seed_demo(rt: Runtime) -> DemoIds:
    """Fill ``rt``'s store, which must be empty, with the demo's runs; see the module."""
    if rt.store.list_runs(limit=1):
        raise InvalidRequest("seed_demo fills an empty store, and this one has runs already")
    if not isinstance(rt.store, SqlStore):
        raise InvalidRequest("seed_demo needs a SqlStore (a SQLite file or PostgreSQL): its crashed payout "
                             "is run by a second process on the same database")
    graphs = {name: rt.register(resolve_ref(ref)) for name, ref in DEMO_GRAPHS.items()}

    # the crash first: the worker process spends most of its time importing, while this one seeds on
    payout = await rt.submit(graphs["payout"], {"payee": "acme-supplies", "amount": 1250.0})
    worker = await _start_crash_worker(rt.store.url, payout.id)
    try:
        ids = await _seed_in_process(rt, graphs)
        await _expect_killed(worker)
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()
    # its owner is dead (and reaped), so the run is recovered here; the transfer is in doubt
    in_doubt = await _step(rt.resume(payout.id), "recovering the crashed payout")
    _expect(in_doubt, RunStatus.INTERRUPTED, "the recovered payout (in doubt)")

    left = [r.id for r in rt.store.list_runs(limit=10_000) if r.status in (RunStatus.RUNNING, RunStatus.QUEUED)]
    if left:
        raise SeedError(f"runs left running or queued after seeding: {', '.join(left)}")
    return DemoIds(in_doubt=payout.id, **ids)


async def _seed_in_process(rt: Runtime, graphs: dict[str, ExecutableGraph]) -> dict[str, Any]:
    ids: dict[str, Any] = {}

    run = await _step(rt.start(graphs["research"], {"question": "tides"}), "the research agent")
    ids["research"] = _expect(run, RunStatus.SUCCEEDED, "the research agent").id

    # A/B: B fails for good, then is fixed and the run continued; A's charge is not repeated
    demo_shop.set_warehouse_online(False)
    failed = await _step(rt.start(graphs["checkout"], {"order": 7, "amount": 42.5}), "the checkout")
    ids["checkout_failed"] = _expect(failed, RunStatus.FAILED, "the checkout with the warehouse down").id
    demo_shop.set_warehouse_online(True)
    cont = await _step(rt.resume(failed.id), "continuing the checkout")
    ids["checkout_continued"] = _expect(cont, RunStatus.SUCCEEDED, "the checkout's continuation").id

    run = await _step(rt.start(graphs["refund_review"], {"order": 8, "amount": 990.0}), "the refund review")
    ids["refund_review"] = _expect(run, RunStatus.INTERRUPTED, "the refund review").id
    run = await _step(rt.start(graphs["assistant"], {"request": "summarise yesterday's outage for ops"}),
                      "the assistant")
    ids["tool_review"] = _expect(run, RunStatus.INTERRUPTED, "the assistant's tool call review").id

    # time travel on one support ticket: two forks from the same checkpoint, and a replay
    support = await _step(rt.start(graphs["support"], {"customer": "ada", "text": "my invoice is wrong"}),
                          "the support ticket")
    ids["support"] = _expect(support, RunStatus.SUCCEEDED, "the support ticket").id
    classified = next(c.id for c in await rt.history(support.id) if "classify" in c.nodes)
    fork = await _step(rt.fork(classified, patch={"tier": "gold"}), "the patched fork")
    ids["fork_patched"] = _expect(fork, RunStatus.SUCCEEDED, "the fork patched to tier gold").id
    fork = await _step(rt.fork(classified, patch={"priority": "urgent"}), "the fork that pages")
    ids["fork_unrecorded"] = _expect(fork, RunStatus.INTERRUPTED, "the fork patched to urgent").id
    report = await _step(rt.replay(support.id, graph=graphs["support_v2"]), "the replay")
    if report.same or report.status != RunStatus.SUCCEEDED.value:
        raise SeedError(f"the replay against {DEMO_GRAPHS['support_v2']} should succeed with divergences; "
                        f"it is {report.status}, same={report.same}")
    ids["replay"] = report.run_id

    ids["cancelled"] = (await _cancel_mid_node(rt, graphs["crawl"])).id

    trip = await _step(rt.start(graphs["trip"], {"traveller": "ada", "city": "Lisbon"}), "the trip")
    _expect(trip, RunStatus.FAILED, "the trip booking")
    undone = await _step(rt.compensate(trip.id), "compensating the trip")
    if not undone.complete:
        raise SeedError(f"compensating the trip {trip.id} did not complete: {undone}")
    ids["compensated"] = trip.id

    run = await _step(rt.start(graphs["rates"], {}), "the flaky rates fetch")
    ids["retried"] = _expect(run, RunStatus.SUCCEEDED, "the rates fetch with retries").id
    run = await _step(rt.start(graphs["batch"], {"documents": FAN_OUT}), "the fan-out")
    ids["fan_out"] = _expect(run, RunStatus.SUCCEEDED, "the fan-out").id

    thread = "chat-ada"
    turns = []
    for said in ("hello! where is order 7?", "and what about order 8?", "thanks, that's all"):
        run = await _step(rt.start(graphs["chat"], {"messages": [f"customer: {said}"]}, thread_id=thread),
                          "a chat turn")
        turns.append(_expect(run, RunStatus.SUCCEEDED, "a chat turn").id)
    ids["chat_thread"], ids["chat_turns"] = thread, tuple(turns)

    run = await _step(rt.start(graphs["react"], {"question": "Which coastal capital is warmest this weekend?"}),
                      "the ReAct agent")
    ids["react"] = _expect(run, RunStatus.SUCCEEDED, "the ReAct agent").id
    return ids


async def _cancel_mid_node(rt: Runtime, graph: ExecutableGraph) -> Run:
    """Start a crawl and cancel it once its slow node says it is waiting (the node is in flight)."""
    run_id: str | None = None
    cancelled: Run | None = None
    async with asyncio.timeout(STEP_TIMEOUT):
        async for event in rt.stream(graph, {"site": "https://slow.example.com"}):
            run_id = run_id or event.run_id
            if cancelled is None and event.type == "custom" and event.node == "crawl":
                cancelled = await rt.cancel(run_id, "stopped by an operator: the site throttles crawlers")
    if run_id is None or cancelled is None:
        raise SeedError("the crawl ended before its slow node started")
    return _expect(await rt.get_run(run_id), RunStatus.CANCELLED, "the crawl")


# ------------------------------------------------------------------ the crashed payout


async def _start_crash_worker(db_url: str, run_id: str) -> asyncio.subprocess.Process:
    root = str(Path(examples.__file__).resolve().parents[1])  # so the worker imports this checkout
    env = {**os.environ, demo_payments.CRASH_ENV: "1",
           "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "examples.demo_payments", db_url, run_id, cwd=root, env=env,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def _expect_killed(worker: asyncio.subprocess.Process) -> None:
    """Wait for the worker (reaping it: a zombie's PID would still look alive); it must have been
    killed inside the transfer."""
    out, err = await asyncio.wait_for(worker.communicate(), STEP_TIMEOUT)
    if worker.returncode != -signal.SIGKILL:
        raise SeedError(f"the payout worker should have been killed inside the transfer; it exited with "
                        f"{worker.returncode}\n{out.decode(errors='replace')}{err.decode(errors='replace')}")


# ------------------------------------------------------------------ helpers


async def _step(call: Awaitable[T], what: str) -> T:
    try:
        return await asyncio.wait_for(call, STEP_TIMEOUT)
    except TimeoutError:
        raise SeedError(f"{what} did not finish within {STEP_TIMEOUT:.0f} s") from None


def _expect(run: Run, status: RunStatus, what: str) -> Run:
    if run.status != status:
        raise SeedError(f"{what} ({run.id}) should be {status.value}, but it is {run.status.value}"
                        + (f": {dict(run.error)}" if run.error else ""))
    return run


# ------------------------------------------------------------------ printing


def summary(rt: Runtime, ids: DemoIds) -> str:
    """One line per seeded run: its name in ``DemoIds``, id, graph, kind and status."""
    rows = []
    for name, run_id in ids.runs().items():
        run = rt.store.get_run(run_id)
        rows.append((name, run.id, run.graph_name, run.kind.value, run.status.value))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r[:4], widths, strict=True)) + "  " + r[4] for r in rows]
    return "\n".join([*lines, f"chat thread: {ids.chat_thread}"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m server.demo",
                                     description="Seed a new database with the debugger's demo runs.")
    parser.add_argument("db", help="a new SQLite file, or a database URL (it must hold no runs)")
    url = database_url(parser.parse_args(argv).db)
    try:
        rt = Runtime(store=SqlStore(url))
    except InvalidRequest as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    try:
        began = time.perf_counter()
        ids = asyncio.run(seed_demo(rt))
        print(summary(rt, ids))
        print(f"seeded {len(ids.runs())} runs into {url} in {time.perf_counter() - began:.1f} s")
    except (InvalidRequest, SeedError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        rt.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
