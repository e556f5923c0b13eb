"""A busy run: a map over many items, eight at a time (the default), each a sleep of 1.2 s,
so that the run records a checkpoint every few hundredths of a second for a minute, however
fast the machine. The browser test types
into the run page while its live updates arrive (``harness serve busy_graphs:graph``)."""

from __future__ import annotations

import asyncio
from typing import Annotated

from pydantic import BaseModel

from runtime import Graph, append


class Busy(BaseModel):
    items: list[int] = []
    done: Annotated[list[int], append] = []


graph = Graph("busy", state=Busy)


@graph.node(map_over="items")
async def step(state: Busy, item: int) -> dict[str, list[int]]:
    await asyncio.sleep(1.2)
    return {"done": [item]}
