"""A research agent: a tool loop (model → tool → model … until it has enough), then a
map over the sources it found (one instance per source), then a review subgraph.

    harness run examples.agent:graph --input '{"question": "tides"}'
    harness show RUN        # model, tool, model#1, …; read[0], read[1], …; review/check

The model and the tools are deterministic stand-ins; every call to the outside world
goes through ``ctx.effect``, so a resumed, forked or replayed run never repeats one.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel

from runtime import Graph, NodeContext, append


class Research(BaseModel):
    question: str = ""
    messages: Annotated[list[str], append] = []
    sources: Annotated[list[str], append] = []
    notes: Annotated[list[str], append] = []
    verdict: str = ""


class Review(BaseModel):
    """The review subgraph's view of the state: only what it reads and writes."""

    notes: Annotated[list[str], append] = []
    verdict: str = ""


def enough(state: Research) -> bool:
    return len(state.sources) >= 3


graph = Graph("research", state=Research)


@graph.node(after=["tool"], max_iterations=8)
def model(state: Research) -> dict:
    if enough(state):
        return {"messages": [f"model: {len(state.sources)} sources are enough"]}
    return {"messages": [f"model: search {state.question} page {len(state.sources) + 1}"]}


@graph.node(after=["model"], when=lambda s: not enough(s))
async def tool(state: Research, ctx: NodeContext) -> dict:
    page = len(state.sources) + 1
    found = await ctx.effect("search", lambda: f"{state.question}-source-{page}",
                             request={"q": state.question, "page": page})
    ctx.emit({"progress": f"found {found}"})
    return {"messages": [f"tool: {found}"], "sources": [found]}


@graph.node(after=["model"], map_over="sources")
async def read(state: Research, ctx: NodeContext, item: str) -> dict:
    text = await ctx.effect("fetch", lambda: f"{item} says the moon pulls the sea", request={"url": item})
    return {"notes": [f"{item}: {text[len(item) + 1:]}"]}


review = Graph("review", state=Review)


@review.node()
def check(state: Review) -> dict:
    return {"verdict": f"ok: {len(state.notes)} notes agree"}


graph.subgraph("review", review, after=["read"])
