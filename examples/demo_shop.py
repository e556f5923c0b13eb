"""Checkout, the A/B case: ``charge`` (A) takes the customer's money through an
effect while ``reserve`` (B) books the stock in parallel. With the warehouse API
down, B fails for good and the run FAILS after A's charge was made; once the
warehouse is back, ``rt.resume(run_id)`` continues the run as a new continuation
that runs B again and never A: the charge happened once.

    harness run examples.demo_shop:graph --input '{"order": 7, "amount": 42.5}'

Whether the warehouse answers is :data:`WAREHOUSE` (``set_warehouse_online``), read
by ``reserve`` each time it runs: in a new process it starts offline.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel

from runtime import EffectInfo, Graph, NodeContext, PermissionDeniedError, append

#: idempotency keys of every charge made in this process, in order (the outside world's record)
CHARGES: list[str] = []
#: whether the warehouse API accepts reservations
WAREHOUSE = {"online": False}


def set_warehouse_online(online: bool) -> None:
    WAREHOUSE["online"] = online


class Checkout(BaseModel):
    order: int
    amount: float
    receipt: str = ""
    reservation: str = ""
    log: Annotated[list[str], append] = []


graph = Graph("checkout", state=Checkout)


@graph.node()
async def charge(state: Checkout, ctx: NodeContext) -> dict[str, Any]:
    def pay(info: EffectInfo) -> str:
        CHARGES.append(info.key)
        return f"ch-{state.order}-{info.key[-6:]}"

    receipt = await ctx.effect("payments.charge", pay, request={"order": state.order, "amount": state.amount})
    return {"receipt": receipt, "log": [f"charged {state.amount:.2f}"]}


@graph.node()
def reserve(state: Checkout) -> dict[str, Any]:
    if not WAREHOUSE["online"]:
        # a revoked credential is not worth retrying: the run fails and waits for a fix
        raise PermissionDeniedError("warehouse API refused the reservation: API key revoked")
    return {"reservation": f"res-{state.order}", "log": ["stock reserved"]}


@graph.node(after=["charge", "reserve"])
def confirm(state: Checkout) -> dict[str, Any]:
    return {"log": [f"order {state.order} confirmed: {state.receipt}, {state.reservation}"]}
