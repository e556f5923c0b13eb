"""Graphs for the crash tests (a helper module, not a test module).

Both the test process and ``crash_worker.py`` subprocesses import this module under
the same name (``crash_graphs``), so the compiled graphs have the same structural
version everywhere and a run started in one process can be resumed in another.

A and B run in parallel. A performs the counted effect ``charge`` (every call of the
effect function appends a line to ``<workdir>/effects.log``); optionally it then asks a
person (``ask=True``). How a worker process misbehaves is set by ``FLAGS``, which only
``crash_worker.py`` sets; in the test process it is empty, and ``die()`` refuses to
kill a process that is not a crash worker.

flags:
  a_waits_b          A waits (on the store) until B's success is recorded, then calls its effect
  b_hangs            B never finishes in this process
  kill_after_effect  A SIGKILLs its process right after ``ctx.effect`` returned
  kill_in_effect     the effect function SIGKILLs the process before returning
  hang_after_effect  A writes ``<workdir>/marker`` after its effect and blocks (the parent kills it)
  kill_when_paused   the worker SIGKILLs itself after ``start``/``resume`` returned INTERRUPTED
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from markers import write_marker
from runtime import Graph, NodeContext

FLAGS: frozenset[str] = frozenset()
#: the worker's store (A reads B's recorded outcome from it under ``a_waits_b``)
STORE: Any = None
WAIT_TIMEOUT = 20.0
WORKER_ENV = "HARNESS_CRASH_WORKER"


class CrashState(BaseModel):
    workdir: str
    idempotent: bool = False
    ask: bool = False
    a: str | None = None
    b: str | None = None
    receipt: str | None = None
    approved: bool | None = None


# ---------------------------------------------------------------- the outside world

def log(workdir: str, name: str, record: dict[str, Any]) -> int:
    """Append one JSON line; returns how many lines the file has now."""
    path = Path(workdir) / name
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")
    return len(read_log(workdir, name))


def read_log(workdir: str, name: str) -> list[dict[str, Any]]:
    path = Path(workdir) / name
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def die() -> None:
    if os.environ.get(WORKER_ENV) != "1":
        raise RuntimeError("refusing to SIGKILL a process that is not a crash worker")
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # not reached: SIGKILL cannot be caught


def charge(workdir: str) -> Callable[[Any], str]:
    def fn(info: Any) -> str:  # reads the idempotency key, as a payment API would
        n = log(workdir, "effects.log", {"key": info.key, "pid": os.getpid(), "attempt": info.attempt})
        if "kill_in_effect" in FLAGS:
            die()
        return f"receipt-{n}"
    return fn


def _b_succeeded(run_id: str) -> bool:
    return any(e.type == "node.succeed" and e.node == "b" for e in STORE.events(run_id))


def _wait_for_b_sync(run_id: str) -> None:
    end = time.monotonic() + WAIT_TIMEOUT
    while not _b_succeeded(run_id):
        if time.monotonic() > end:
            raise RuntimeError("timed out waiting for B's success to be recorded")
        time.sleep(0.005)


async def _wait_for_b(run_id: str) -> None:
    end = time.monotonic() + WAIT_TIMEOUT
    while not _b_succeeded(run_id):
        if time.monotonic() > end:
            raise RuntimeError("timed out waiting for B's success to be recorded")
        await asyncio.sleep(0.005)


def _after_effect_sync(state: CrashState) -> None:
    if "kill_after_effect" in FLAGS:
        die()
    if "hang_after_effect" in FLAGS:
        write_marker(Path(state.workdir) / "marker", str(os.getpid()))
        threading.Event().wait(WAIT_TIMEOUT * 3)
        raise RuntimeError("the parent did not kill this process")


async def _after_effect(state: CrashState) -> None:
    if "kill_after_effect" in FLAGS:
        die()
    if "hang_after_effect" in FLAGS:
        write_marker(Path(state.workdir) / "marker", str(os.getpid()))
        await asyncio.sleep(WAIT_TIMEOUT * 3)
        raise RuntimeError("the parent did not kill this process")


# ---------------------------------------------------------------- async graph

graph_async = Graph("crash_ab_async", state=CrashState)


@graph_async.node()
async def a(state: CrashState, ctx: NodeContext) -> dict:
    log(state.workdir, "a.log", {"pid": os.getpid(), "attempt": ctx.attempt})
    if "a_waits_b" in FLAGS:
        await _wait_for_b(ctx.run_id)
    receipt = await ctx.effect("charge", charge(state.workdir), request={"amount": 5},
                               idempotent=state.idempotent)
    await _after_effect(state)
    approved = None
    if state.ask:
        answer = await ctx.interrupt({"question": "approve the charge?"})
        approved = bool(answer["approve"])
    return {"a": "A", "receipt": receipt, "approved": approved}


@graph_async.node()
async def b(state: CrashState, ctx: NodeContext) -> dict:
    log(state.workdir, "b.log", {"pid": os.getpid(), "attempt": ctx.attempt})
    if "b_hangs" in FLAGS:
        await asyncio.sleep(WAIT_TIMEOUT * 3)
        raise RuntimeError("B was not killed")
    return {"b": "B"}


# ---------------------------------------------------------------- sync graph (nodes run in threads)

graph_sync = Graph("crash_ab_sync", state=CrashState)


@graph_sync.node(name="a")
def a_sync(state: CrashState, ctx: NodeContext) -> dict:
    log(state.workdir, "a.log", {"pid": os.getpid(), "attempt": ctx.attempt})
    if "a_waits_b" in FLAGS:
        _wait_for_b_sync(ctx.run_id)
    receipt = ctx.effect("charge", charge(state.workdir), request={"amount": 5}, idempotent=state.idempotent)
    _after_effect_sync(state)
    approved = None
    if state.ask:
        answer = ctx.interrupt({"question": "approve the charge?"})
        approved = bool(answer["approve"])
    return {"a": "A", "receipt": receipt, "approved": approved}


@graph_sync.node(name="b")
def b_sync(state: CrashState, ctx: NodeContext) -> dict:
    log(state.workdir, "b.log", {"pid": os.getpid(), "attempt": ctx.attempt})
    if "b_hangs" in FLAGS:
        threading.Event().wait(WAIT_TIMEOUT * 3)
        raise RuntimeError("B was not killed")
    return {"b": "B"}


GRAPHS = {"async": graph_async, "sync": graph_sync}
