"""A payout whose process dies in the middle of the bank transfer.

The transfer is journaled STARTED (forced to disk) before the bank is called; the
process is then killed (SIGKILL) inside the call, so no outcome is ever recorded.
Resuming the run in another process recovers it and finds the transfer *in doubt*:
the money may or may not have left. Not idempotent, so the run pauses with an
``in_doubt`` question: give the bank's result, retry with the same key, or abort.

The crash is real: ``python -m examples.demo_payments DB_URL RUN_ID`` drives a
queued run of :data:`graph`, and with ``HARNESS_DEMO_CRASH_IN_TRANSFER=1`` in its
environment it kills itself inside the transfer. Without that variable the
transfer simply happens (say after a person answers "retry").
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Annotated, Any

from pydantic import BaseModel

from runtime import EffectInfo, Graph, NodeContext, Runtime, SqlStore, append

#: set in a worker's environment to kill it inside the bank call
CRASH_ENV = "HARNESS_DEMO_CRASH_IN_TRANSFER"
#: idempotency keys of the transfers that completed in this process
TRANSFERS: list[str] = []
PAYEES = {"acme-supplies": "PT50 0002 0123 4567 8901 2345 6", "lisbon-cleaning": "PT50 0035 0651 0000 1234 5678 9"}


class Payout(BaseModel):
    payee: str
    amount: float
    iban: str = ""
    transfer: str = ""
    log: Annotated[list[str], append] = []


graph = Graph("payout", state=Payout)


@graph.node()
def prepare(state: Payout) -> dict[str, Any]:
    return {"iban": PAYEES.get(state.payee, "unknown"),
            "log": [f"payout of {state.amount:.2f} to {state.payee} prepared"]}


def send_transfer(info: EffectInfo) -> str:
    if os.environ.get(CRASH_ENV) == "1":
        os.kill(os.getpid(), signal.SIGKILL)  # the worker dies while the bank call is in flight
    TRANSFERS.append(info.key)
    return f"tx-{info.key[-8:]}"


@graph.node(after=["prepare"])
async def transfer(state: Payout, ctx: NodeContext) -> dict[str, Any]:
    tx = await ctx.effect("bank.transfer", send_transfer,
                          request={"iban": state.iban, "amount": state.amount, "payee": state.payee})
    return {"transfer": tx, "log": [f"transfer {tx} sent"]}


@graph.node(after=["transfer"])
def notify(state: Payout) -> dict[str, Any]:
    return {"log": [f"{state.payee} told about {state.transfer}"]}


async def work(db_url: str, run_id: str) -> None:
    """Drive a queued run of this graph to its end (or to this process's death)."""
    rt = Runtime(store=SqlStore(db_url), graphs=[graph])   # however the run was queued
    try:
        await rt.resume(run_id)
    finally:
        rt.close()


if __name__ == "__main__":
    asyncio.run(work(sys.argv[1], sys.argv[2]))
