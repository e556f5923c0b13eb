"""A process for the crash tests: starts or resumes a ``crash_graphs`` run on a SQLite file.

    python crash_worker.py DB_URL GRAPH FLAGS start INPUT_JSON
    python crash_worker.py DB_URL GRAPH FLAGS resume RUN_ID [ANSWER_JSON]

GRAPH is "async" or "sync"; FLAGS is a comma-separated list (see ``crash_graphs``).
When the command returns, one JSON line {"run_id", "status", "kind"} is printed.
Run it with PYTHONPATH containing the repository root and with the environment
variable HARNESS_CRASH_WORKER=1 (``crash_graphs.die`` refuses to act otherwise).
"""

from __future__ import annotations

import asyncio
import json
import sys

import crash_graphs
from harness_checks import worker_command

from runtime import RunStatus, Runtime, SqlStore


async def main(argv: list[str]) -> int:
    db_url, graph_name, flags, command, *rest = argv
    crash_graphs.FLAGS = frozenset(f for f in flags.split(",") if f)
    graph = crash_graphs.GRAPHS[graph_name]
    rt = Runtime(store=SqlStore(db_url), graphs=[graph])
    crash_graphs.STORE = rt.store
    try:
        run = await worker_command(rt, graph, command, rest)
        print(json.dumps({"run_id": run.id, "status": run.status.value, "kind": run.kind.value}), flush=True)
        if "kill_when_paused" in crash_graphs.FLAGS and run.status == RunStatus.INTERRUPTED:
            crash_graphs.die()
    finally:
        rt.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
