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


def ask_four(g: Graph) -> None:
    """The four questions, one node each, on ``g`` (its state has ``approved``, ``name``,
    ``amount`` and ``comment``); the server's tests add them to a graph of their own."""

    @g.node()
    async def approve(s: Any, ctx: NodeContext) -> dict[str, Any]:
        return {"approved": (await ctx.interrupt({"question": "Ship it?"}, response=Approval)).approve}

    @g.node()
    async def label(s: Any, ctx: NodeContext) -> dict[str, Any]:
        return {"name": (await ctx.interrupt({"question": "Name the release"}, response=Label)).name}

    @g.node()
    async def amount(s: Any, ctx: NodeContext) -> dict[str, Any]:
        return {"amount": (await ctx.interrupt({"question": "How much to refund?"}, response=Amount)).root}

    @g.node()
    async def comment(s: Any, ctx: NodeContext) -> dict[str, Any]:
        return {"comment": await ctx.interrupt("Anything to add?")}


g = Graph("release", state=Release)
ask_four(g)
graph = g.compile()
