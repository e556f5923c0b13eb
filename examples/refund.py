"""A refund agent: look the order up, pay the refund (an external effect), then ask
a person before emailing the customer.

    harness run examples.refund:graph --input '{"order_id": 7}'
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel

from runtime import Graph, NodeContext, RetryPolicy, append

ORDERS = {7: {"customer": "ada@example.com", "amount": 42.5}, 8: {"customer": "bob@example.com", "amount": 990.0}}
#: what the outside world saw; the demo prints it to show each effect happened once
PAYMENTS: list[str] = []


class RefundState(BaseModel):
    order_id: int
    customer: str = ""
    amount: float = 0.0
    receipt: str = ""
    notes: Annotated[list[str], append] = []
    emailed: bool = False


class Approval(BaseModel):
    """What the person reviewing the refund answers."""

    approve: bool
    note: str = ""


graph = Graph("refund", state=RefundState)


@graph.node()
def lookup(state: RefundState) -> dict:
    order = ORDERS.get(state.order_id)
    if order is None:
        raise ValueError(f"no order {state.order_id}")
    return {"customer": order["customer"], "amount": order["amount"], "notes": ["looked up"]}


@graph.node(after=["lookup"], retry=RetryPolicy(max_attempts=3, initial_interval=0.05), timeout=5.0)
async def pay(state: RefundState, ctx: NodeContext) -> dict:
    def refund(info):  # the effect function reads its idempotency key, as a payment API would
        PAYMENTS.append(info.key)
        return f"rcpt-{state.order_id}-{info.key[-6:]}"

    receipt = await ctx.effect("payments.refund", refund, request={"order": state.order_id,
                                                                  "amount": state.amount})
    return {"receipt": receipt, "notes": [f"refunded {state.amount:.2f}"]}


@graph.node(after=["lookup"], when=lambda s: s.amount > 500)
def flag_large(state: RefundState) -> dict:
    return {"notes": ["large refund flagged for audit"]}


@graph.node(after=["pay", "flag_large"])
async def confirm(state: RefundState, ctx: NodeContext) -> dict:
    answer = await ctx.interrupt({"question": f"Email {state.customer} about refund {state.receipt}?"},
                                 response=Approval)
    return {"emailed": answer.approve, "notes": [f"reviewer: {answer.note or 'no note'}"]}
