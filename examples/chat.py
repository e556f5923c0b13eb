"""A support chat: each turn appends the customer's message, looks the order up
through the effect journal, and answers. Run turns on one thread:

    harness run examples.chat:graph --input '{"messages": ["where is order 7?"]}' --thread ada
    harness run examples.chat:graph --input '{"messages": ["thanks!"]}' --thread ada
    harness thread ada
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel

from runtime import Graph, NodeContext, append

ORDERS = {7: "shipped on Monday", 8: "waiting for the refund"}


class Chat(BaseModel):
    messages: Annotated[list[str], append] = []
    orders_seen: Annotated[list[int], append] = []


graph = Graph("chat", state=Chat)


@graph.node()
async def answer(state: Chat, ctx: NodeContext) -> dict:
    question = state.messages[-1]
    found = re.search(r"order (\d+)", question)
    if found is None:
        ctx.emit({"progress": "no order in the question"})
        return {"messages": [f"agent: glad to help (this conversation has {len(state.messages)} messages)"]}
    order = int(found.group(1))
    ctx.emit({"progress": f"looking up order {order}"})
    status = await ctx.effect("orders.lookup", lambda: ORDERS.get(order, "unknown"), request={"order": order})
    return {"messages": [f"agent: order {order} is {status}"], "orders_seen": [order]}
