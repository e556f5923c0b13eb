"""A process that drives a run which asks a question while another branch works, and is
killed before it takes the answer left for it (``test_answer_from_another_process``).

    python answer_worker.py DB_URL MARKER_PATH

``work`` counts its calls in the file ``MARKER_PATH`` and, in this process, waits for
ever; the graph is the same object wherever it is imported (one version).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel

from runtime import Graph, NodeContext, Runtime, SqlStore, append

#: set in the worker's environment: its ``work`` never ends
HANG_ENV = "HARNESS_ANSWER_WORKER_HANGS"


class S(BaseModel):
    out: Annotated[list[str], append] = []


g = Graph("answer-left-for-a-worker", state=S)


@g.node()
async def ask(s: S, ctx: NodeContext) -> dict:
    return {"out": [f"ask:{await ctx.interrupt({'q': 'ship it?'})}"]}


@g.node(after=["ask"])
def ship(s: S) -> dict:
    return {"out": ["shipped"]}


@g.node()
async def work(s: S, ctx: NodeContext) -> dict:
    marker = Path(os.environ["HARNESS_ANSWER_MARKER"])
    with marker.open("a") as f:
        f.write("work\n")
    while os.environ.get(HANG_ENV):
        await asyncio.sleep(1)
    return {"out": ["work"]}


GRAPH = g.compile()


async def main(db_url: str) -> int:
    # a heartbeat longer than the test: the left answer is never read before the kill
    import answer_worker   # the graph as the test imports it (run as __main__, its version would differ)

    rt = Runtime(store=SqlStore(db_url), lease_ttl=2.0, heartbeat=30.0)
    try:
        await rt.start(answer_worker.GRAPH, {})
    finally:
        rt.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1])))
