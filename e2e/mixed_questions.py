"""A graph whose run pauses on four questions at once, each wanting an answer of its own
shape: a yes/no approval, an object with a text field, a bare number, and any JSON. The
browser test answers them together (``harness serve mixed_questions:graph``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, RootModel

from runtime import Graph, NodeContext


class Approval(BaseModel):
    approve: bool = Field(description="go ahead?")


class Label(BaseModel):
    name: str = Field(min_length=2, description="at least two characters")


class Amount(RootModel[float]):
    pass


class Release(BaseModel):
    approved: bool | None = None
    name: str = ""
    amount: float = 0.0
    comment: Any = None


g = Graph("release", state=Release)


@g.node()
async def approve(s: Release, ctx: NodeContext) -> dict[str, Any]:
    return {"approved": (await ctx.interrupt({"question": "Ship it?"}, response=Approval)).approve}


@g.node()
async def label(s: Release, ctx: NodeContext) -> dict[str, Any]:
    return {"name": (await ctx.interrupt({"question": "Name the release"}, response=Label)).name}


@g.node()
async def amount(s: Release, ctx: NodeContext) -> dict[str, Any]:
    return {"amount": (await ctx.interrupt({"question": "How much to refund?"}, response=Amount)).root}


@g.node()
async def comment(s: Release, ctx: NodeContext) -> dict[str, Any]:
    return {"comment": await ctx.interrupt("Anything to add?")}


graph = g.compile()
