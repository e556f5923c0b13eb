"""Graph and worker process for the compensation crash tests (a helper module, not a test module).

The graph is a chain ``n1 -> n2 -> n3``; node ``nK`` performs one effect ``stepK`` whose
compensation is the module-level function ``undo_stepK`` (so a process that did not run
the effect can import it: its journal reference is ``compensation_worker:undo_stepK``).
``n3`` raises a non-retryable ``SemanticError`` after its effect (unless ``fail=False``),
so the run ends FAILED with three live, compensable effects.

The outside world is one log file (path in ``$HARNESS_COMP_LOG``): every call of an
effect or a compensation function appends one JSON line
``{"op": "do"|"undo", "step", "key", "result", "pid"}``, so a repeated call shows up
as a second line.

How a worker misbehaves is set by ``$HARNESS_COMP_FLAGS`` (comma-separated), read
when the hook is reached; the test process never sets it:

  kill_between_undos     SIGKILL right after step3's COMPENSATED entry was committed,
                         before step2's COMPENSATING entry is written
  hang_in_undo_step2     undo_step2 writes ``$HARNESS_COMP_MARKER`` and blocks *before*
                         its external action (the parent SIGKILLs it)
  kill_after_undo_step3  undo_step3 logs its external action, then SIGKILLs its process
                         (before COMPENSATED is recorded)

Command line (PYTHONPATH must hold the repository root; ``HARNESS_CRASH_WORKER=1``)::

    python compensation_worker.py DB_URL start [POLICY]   # POLICY: "failed" -> compensate_on=["failed"]
    python compensation_worker.py DB_URL start_and_compensate
    python compensation_worker.py DB_URL compensate RUN_ID [retry]

Every command prints JSON lines: ``{"run_id", "status"}`` once the run ended, and
``{"report": ...}`` after a compensation.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from markers import write_marker
from runtime import EffectInfo, Graph, NodeContext, Runtime, SemanticError, SqlStore
from runtime import EffectStatus
from runtime.core.records import Batch

LOG_ENV = "HARNESS_COMP_LOG"
MARKER_ENV = "HARNESS_COMP_MARKER"
FLAGS_ENV = "HARNESS_COMP_FLAGS"
WORKER_ENV = "HARNESS_CRASH_WORKER"
HANG_TIMEOUT = 30.0


class ChainState(BaseModel):
    fail: bool = True
    s1: str | None = None
    s2: str | None = None
    s3: str | None = None


# ---------------------------------------------------------------- the outside world

def log_path() -> Path:
    return Path(os.environ[LOG_ENV])


def read_log(path: Path | None = None) -> list[dict[str, Any]]:
    path = path or log_path()
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _log(op: str, info: EffectInfo, result: Any = None) -> None:
    with log_path().open("a") as f:
        f.write(json.dumps({"op": op, "step": info.name, "key": info.key, "result": result,
                            "pid": os.getpid()}) + "\n")


def _flags() -> frozenset[str]:
    return frozenset(f for f in os.environ.get(FLAGS_ENV, "").split(",") if f)


def die() -> None:
    if os.environ.get(WORKER_ENV) != "1":
        raise RuntimeError("refusing to SIGKILL a process that is not a crash worker")
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # not reached: SIGKILL cannot be caught


def do(info: EffectInfo) -> str:
    result = f"{info.name}-receipt"
    _log("do", info, result)
    return result


def _undo(info: EffectInfo) -> str:
    flags = _flags()
    if info.name == "step2" and "hang_in_undo_step2" in flags:
        write_marker(Path(os.environ[MARKER_ENV]), str(os.getpid()))
        threading.Event().wait(HANG_TIMEOUT)
        raise RuntimeError("the parent did not kill this process")
    _log("undo", info, info.result)  # info.result: the effect's recorded result
    if info.name == "step3" and "kill_after_undo_step3" in flags:
        die()
    return f"undone-{info.name}"


def undo_step1(info: EffectInfo) -> str:
    return _undo(info)


def undo_step2(info: EffectInfo) -> str:
    return _undo(info)


def undo_step3(info: EffectInfo) -> str:
    return _undo(info)


# ---------------------------------------------------------------- the graph

graph = Graph("compensation_chain", state=ChainState)


@graph.node()
async def n1(state: ChainState, ctx: NodeContext) -> dict:
    return {"s1": await ctx.effect("step1", do, request={"step": 1}, compensate=undo_step1)}


@graph.node(after=["n1"])
async def n2(state: ChainState, ctx: NodeContext) -> dict:
    return {"s2": await ctx.effect("step2", do, request={"step": 2}, compensate=undo_step2)}


@graph.node(after=["n2"])
async def n3(state: ChainState, ctx: NodeContext) -> dict:
    s3 = await ctx.effect("step3", do, request={"step": 3}, compensate=undo_step3)
    if state.fail:
        raise SemanticError("step3 was refused downstream: the order cannot be completed")
    return {"s3": s3}


# ---------------------------------------------------------------- the worker process

def _kill_between_undos(rt: Runtime) -> None:
    """Die right after step3's COMPENSATED entry is on disk (before step2's COMPENSATING)."""
    commit = rt.store.commit

    def hooked(batch: Batch) -> None:
        commit(batch)
        if any(e.name == "step3" and e.status == EffectStatus.COMPENSATED for e in batch.effects):
            die()

    rt.store.commit = hooked  # type: ignore[method-assign]


async def main(argv: list[str]) -> int:
    db_url, command, *rest = argv
    rt = Runtime(store=SqlStore(db_url), graphs=[graph])
    if "kill_between_undos" in _flags():
        _kill_between_undos(rt)
    try:
        if command in ("start", "start_and_compensate"):
            policy = ["failed"] if rest[:1] == ["failed"] else []
            run = await rt.start(graph, {}, compensate_on=policy)
            print(json.dumps({"run_id": run.id, "status": run.status.value}), flush=True)
            if command == "start_and_compensate":
                report = await rt.compensate(run.id)
                print(json.dumps({"report": report.to_json()}), flush=True)
        elif command == "compensate":
            report = await rt.compensate(rest[0], retry_in_doubt=rest[1:] == ["retry"])
            print(json.dumps({"report": report.to_json()}), flush=True)
        else:
            raise SystemExit(f"unknown command {command!r}")
    finally:
        rt.close()
    return 0


if __name__ == "__main__":
    # Run the copy imported as ``compensation_worker``, not ``__main__``: the journal
    # records compensations by module path, and other processes import that name.
    from compensation_worker import main as _main

    sys.exit(asyncio.run(_main(sys.argv[1:])))
