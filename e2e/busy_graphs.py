"""Runs that go on while a browser follows them (``harness serve busy_graphs:graph``).

A busy run: a map over many items, eight at a time (the default), each a sleep of 1.2 s, so
that the run records a checkpoint every few hundredths of a second for a minute, however fast
the machine; a browser test types into its page while its live updates arrive. A steady run
(``steady``): five steps in a row, each with events between its checkpoints. A paying run
(``paying``): steps with no effect, then one effect, then a last step."""

from __future__ import annotations

import asyncio
from typing import Annotated

from pydantic import BaseModel

from runtime import Graph, NodeContext, append


class Busy(BaseModel):
    items: list[int] = []
    done: Annotated[list[int], append] = []


graph = Graph("busy", state=Busy)


@graph.node(map_over="items")
async def step(state: Busy, item: int) -> dict[str, list[int]]:
    await asyncio.sleep(1.2)
    return {"done": [item]}



class Steady(BaseModel):
    log: Annotated[list[str], append] = []


#: a run that goes on for about fifteen seconds: five steps one after the other, each saying
#: how far it got every 0.4 s (recorded events between checkpoints), so that a page following
#: it sees events arrive both with and without a checkpoint
steady = Graph("steady", state=Steady)


async def _work(name: str, ctx: NodeContext) -> dict[str, list[str]]:
    for k in range(7):
        ctx.emit({"step": name, "at": k})
        await asyncio.sleep(0.4)
    return {"log": [name]}


@steady.node()
async def fetch(state: Steady, ctx: NodeContext) -> dict[str, list[str]]:
    return await _work("fetch", ctx)


@steady.node(after=["fetch"])
async def parse(state: Steady, ctx: NodeContext) -> dict[str, list[str]]:
    return await _work("parse", ctx)


@steady.node(after=["parse"])
async def score(state: Steady, ctx: NodeContext) -> dict[str, list[str]]:
    return await _work("score", ctx)


@steady.node(after=["score"])
async def rank(state: Steady, ctx: NodeContext) -> dict[str, list[str]]:
    return await _work("rank", ctx)


@steady.node(after=["rank"])
async def report(state: Steady, ctx: NodeContext) -> dict[str, list[str]]:
    return await _work("report", ctx)


class Paying(BaseModel):
    log: Annotated[list[str], append] = []


#: a run of about eight seconds whose journal stays empty for its first four (four steps, a
#: checkpoint each), then records one effect and goes on for three more
paying = Graph("paying", state=Paying)


async def _pause(name: str) -> dict[str, list[str]]:
    await asyncio.sleep(1.0)
    return {"log": [name]}


@paying.node()
async def one(state: Paying) -> dict[str, list[str]]:
    return await _pause("one")


@paying.node(after=["one"])
async def two(state: Paying) -> dict[str, list[str]]:
    return await _pause("two")


@paying.node(after=["two"])
async def three(state: Paying) -> dict[str, list[str]]:
    return await _pause("three")


@paying.node(after=["three"])
async def four(state: Paying) -> dict[str, list[str]]:
    return await _pause("four")


@paying.node(after=["four"])
async def pay(state: Paying, ctx: NodeContext) -> dict[str, list[str]]:
    receipt = await ctx.effect("payments.charge", lambda: "rcpt-1", request={"amount": 5})
    return {"log": [receipt]}


@paying.node(after=["pay"])
async def wrap(state: Paying) -> dict[str, list[str]]:
    await asyncio.sleep(3.0)
    return {"log": ["wrapped"]}
