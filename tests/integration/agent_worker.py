"""A process for the agent crash tests: starts or resumes an ``agent_graphs`` run on a SQLite file.

    python agent_worker.py DB_URL GRAPH FLAGS HANG_AT start INPUT_JSON
    python agent_worker.py DB_URL GRAPH FLAGS HANG_AT resume RUN_ID [ANSWER_JSON]

GRAPH is a key of ``agent_graphs.GRAPHS``; FLAGS a comma-separated list and HANG_AT a
kill point (``-`` for none), see ``agent_graphs``. When the command returns, one JSON line
{"run_id", "status", "kind", "error"} is printed. Run it with PYTHONPATH containing the
repository root and with HARNESS_CRASH_WORKER=1 (the graphs refuse to hang otherwise).
"""

from __future__ import annotations

import asyncio
import json
import sys

import agent_graphs
from harness_checks import worker_command

from runtime import Runtime, SqlStore


async def main(argv: list[str]) -> int:
    db_url, graph_name, flags, hang_at, command, *rest = argv
    agent_graphs.FLAGS = frozenset(f for f in flags.split(",") if f)
    agent_graphs.HANG_AT = None if hang_at == "-" else hang_at
    graph = agent_graphs.GRAPHS[graph_name]
    rt = Runtime(store=SqlStore(db_url), graphs=[graph])
    agent_graphs.STORE = rt.store
    try:
        run = await worker_command(rt, graph, command, rest)
        print(json.dumps({"run_id": run.id, "status": run.status.value, "kind": run.kind.value,
                          "error": run.error}), flush=True)
    finally:
        rt.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
