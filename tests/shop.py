"""A shop whose effects make a lineage with every kind of journal entry: ``pay`` charges,
then its audit effect fails while ``failing`` holds (a continuation then records it);
``email`` follows. Shared by the tests of what a mocked fork can be served."""

from __future__ import annotations

from pydantic import BaseModel

from runtime import ExecutableGraph, Graph, NodeContext


class Order(BaseModel):
    order: int = 1
    receipt: str = ""
    note: str = ""


def shop(failing: list[bool], name: str = "mockable_shop") -> ExecutableGraph:
    """``pay`` charges, then its audit effect fails while ``failing`` holds; ``email`` follows."""
    g = Graph(name, state=Order)

    @g.node()
    async def pay(s: Order, ctx: NodeContext) -> dict[str, str]:
        receipt = await ctx.effect("payments.charge", lambda: f"rcpt-{s.order}", request={"order": s.order})

        def audit() -> str:
            if failing[0]:
                raise ConnectionError("audit service down")
            return "logged"

        await ctx.effect("audit.log", audit, request={"receipt": receipt})
        return {"receipt": receipt}

    @g.node(after=["pay"])
    async def email(s: Order, ctx: NodeContext) -> dict[str, str]:
        await ctx.effect("mail.send", lambda: "sent", request={"receipt": s.receipt})
        return {"note": "emailed"}

    return g.compile()
