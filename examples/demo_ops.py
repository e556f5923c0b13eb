"""Operations seen in a debugger: retries, a large fan-out, and a run stopped by hand.

* ``rates_graph`` — ``fetch_rates`` fails its first attempt with a transient error
  (rate limited), times out on its second (deadline), and succeeds on its third:
  its retry policy retries both classes, with short backoffs.
* ``batch_graph`` — ``embed`` is a map over every document ``plan`` lists (300 in
  the demo): one node instance per item, then ``index`` sees all their writes.
* ``crawl_graph`` — ``crawl`` waits on a slow site; cancel the run while it does.

    harness run examples.demo_ops:batch_graph --input '{"documents": 300}'
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from pydantic import BaseModel

from runtime import Graph, NodeContext, RetryPolicy, TransientError, append

# --------------------------------------------------------------------------- retries


class Rates(BaseModel):
    base: str = "EUR"
    rates: dict[str, float] = {}
    log: Annotated[list[str], append] = []


rates_graph = Graph("rates", state=Rates)

#: how long ``fetch_rates`` may take per attempt, and how long its slow attempt takes
RATES_TIMEOUT = 0.25
SLOW_ANSWER = 5.0


@rates_graph.node(retry=RetryPolicy(max_attempts=4, initial_interval=0.01, backoff=2.0),
                  timeout=RATES_TIMEOUT)
async def fetch_rates(state: Rates, ctx: NodeContext) -> dict[str, Any]:
    # the attempt number decides how the (stand-in) rates API behaves, so the story is the same every run
    if ctx.attempt == 1:
        raise TransientError("rates API: 429 too many requests")
    if ctx.attempt == 2:
        await asyncio.sleep(SLOW_ANSWER)  # longer than the node's timeout: the attempt is cancelled
    return {"rates": {"USD": 1.08, "GBP": 0.85, "JPY": 162.4}, "log": [f"rates on attempt {ctx.attempt}"]}


@rates_graph.node(after=["fetch_rates"])
def publish(state: Rates) -> dict[str, Any]:
    return {"log": [f"published {len(state.rates)} rates against {state.base}"]}


# --------------------------------------------------------------------------- fan-out


class Batch(BaseModel):
    documents: int = 300
    items: list[str] = []
    vectors: Annotated[list[str], append] = []
    indexed: int = 0


batch_graph = Graph("batch", state=Batch)


@batch_graph.node()
def plan(state: Batch) -> dict[str, Any]:
    return {"items": [f"doc-{i:03d}" for i in range(state.documents)]}


@batch_graph.node(after=["plan"], map_over="items")
async def embed(state: Batch, ctx: NodeContext, item: str) -> dict[str, Any]:
    vector = await ctx.effect("embeddings.create", lambda: f"v{sum(map(ord, item)) % 997}", request={"doc": item})
    return {"vectors": [f"{item}:{vector}"]}


@batch_graph.node(after=["embed"])
def index(state: Batch) -> dict[str, Any]:
    return {"indexed": len(state.vectors)}


# --------------------------------------------------------------------------- cancelled


class Crawl(BaseModel):
    site: str
    pages: Annotated[list[str], append] = []


crawl_graph = Graph("crawl", state=Crawl)

#: how long the slow site takes to answer (the demo cancels the run long before)
SLOW_SITE = 3600.0


@crawl_graph.node()
def sitemap(state: Crawl) -> dict[str, Any]:
    return {"pages": [f"{state.site}/", f"{state.site}/about"]}


@crawl_graph.node(after=["sitemap"])
async def crawl(state: Crawl, ctx: NodeContext) -> dict[str, Any]:
    ctx.emit({"progress": f"waiting for {state.site} (it throttles crawlers)"})
    await asyncio.sleep(SLOW_SITE)
    return {"pages": [f"{state.site}/blog"]}
