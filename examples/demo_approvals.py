"""Asking a person, with typed answers: each question names a pydantic model, so the
answer is validated on resume (a wrong one is refused and the run stays paused) and
a front end can build a form from the model's JSON schema.

* ``refund_graph`` — a refund waits for a reviewer's decision (:class:`RefundDecision`:
  an enum, a bounded amount, a reason code, a flag, a note).
* ``assistant_graph`` — an assistant proposes a tool call; the person approves it,
  edits its arguments, or rejects it (:class:`SendEmailReview`: the tool's arguments
  are fields of the answer, named as in the proposal).

    harness run examples.demo_approvals:refund_graph --input '{"order": 8, "amount": 990.0}'
    harness resume RUN --response '{"decision": "partial", "amount": 400, "reason": "damaged"}'
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, Field

from runtime import EffectInfo, Graph, NodeContext, append

#: what the outside world saw: refunds paid and emails sent (idempotency keys)
SENT: list[str] = []

# --------------------------------------------------------------------------- refund review


class Decision(StrEnum):
    APPROVE = "approve"
    PARTIAL = "partial"
    REJECT = "reject"


class Reason(StrEnum):
    DAMAGED = "damaged"
    LATE = "late"
    WRONG_ITEM = "wrong_item"
    GOODWILL = "goodwill"


class RefundDecision(BaseModel):
    """What the reviewer of a large refund decides."""

    decision: Decision = Field(description="Refund everything, part of it, or nothing.")
    amount: float = Field(ge=0, le=10_000, description="Euros to refund (0 when rejected).")
    reason: Reason = Field(description="Why the customer is refunded (or not): goes to the monthly report.")
    notify_customer: bool = Field(default=True, description="Email the customer the outcome.")
    note: str = Field(default="", max_length=500, description="For the audit trail; not shown to the customer.")


class Refund(BaseModel):
    order: int
    amount: float
    customer: str = ""
    history: list[str] = []
    decision: dict[str, Any] = {}
    paid: str = ""
    log: Annotated[list[str], append] = []


refund_graph = Graph("refund_review", state=Refund)


@refund_graph.node()
def lookup(state: Refund) -> dict[str, Any]:
    return {"customer": f"customer-{state.order}@example.com",
            "history": ["2 orders last year", "1 refund (late delivery)"], "log": ["looked up"]}


@refund_graph.node(after=["lookup"])
async def review(state: Refund, ctx: NodeContext) -> dict[str, Any]:
    answer = await ctx.interrupt({
        "question": f"Refund {state.amount:.2f} EUR for order {state.order}?",
        "order": state.order, "requested": state.amount, "customer": state.customer,
        "history": state.history, "policy": "refunds above 500 EUR need a reviewer",
    }, response=RefundDecision)
    return {"decision": answer.model_dump(mode="json"), "log": [f"reviewer: {answer.decision.value}"]}


@refund_graph.node(after=["review"], when=lambda s: s.decision.get("decision") != Decision.REJECT.value)
async def pay(state: Refund, ctx: NodeContext) -> dict[str, Any]:
    def refund(info: EffectInfo) -> str:
        SENT.append(info.key)
        return f"rf-{state.order}-{info.key[-6:]}"

    paid = await ctx.effect("payments.refund", refund,
                            request={"order": state.order, "amount": state.decision["amount"]})
    return {"paid": paid, "log": [f"refunded {state.decision['amount']:.2f}"]}


# --------------------------------------------------------------------------- tool call review


class Action(StrEnum):
    RUN = "run"
    REJECT = "reject"


class SendEmailReview(BaseModel):
    """The person's review of a proposed ``send_email`` call: run it with these
    arguments (edit any of them first), or reject it."""

    action: Action = Field(description="Run the tool with the arguments below, or reject the call.")
    to: str = Field(pattern=r"^[^@\s]+@[^@\s]+$", description="Recipient address.")
    subject: str = Field(min_length=1, max_length=120, description="Subject line.")
    body: str = Field(min_length=1, description="The message, as it will be sent.")
    cc: list[str] = Field(default_factory=list, description="Other recipients.")


class Assistant(BaseModel):
    request: str
    proposal: dict[str, Any] = {}
    review: dict[str, Any] = {}
    result: str = ""
    log: Annotated[list[str], append] = []


assistant_graph = Graph("assistant", state=Assistant)


@assistant_graph.node()
def propose(state: Assistant) -> dict[str, Any]:
    # a deterministic stand-in for the model's tool call
    args = {"to": "ops@example.com", "subject": "Outage follow-up",
            "body": f"Hello,\n\nAs requested: {state.request}.\n\nRegards", "cc": ["lead@example.com"]}
    return {"proposal": {"tool": "send_email", "args": args}, "log": ["model proposed send_email"]}


@assistant_graph.node(after=["propose"])
async def approve_tool(state: Assistant, ctx: NodeContext) -> dict[str, Any]:
    answer = await ctx.interrupt({
        "question": "The assistant wants to send this email. Run it as is, edit the arguments, or reject it.",
        "tool": state.proposal["tool"], "args": state.proposal["args"],
    }, response=SendEmailReview)
    return {"review": answer.model_dump(mode="json"), "log": [f"person: {answer.action.value}"]}


@assistant_graph.node(after=["approve_tool"], when=lambda s: s.review.get("action") == Action.RUN.value)
async def send_email(state: Assistant, ctx: NodeContext) -> dict[str, Any]:
    args = {k: state.review[k] for k in ("to", "subject", "body", "cc")}

    def send(info: EffectInfo) -> str:
        SENT.append(info.key)
        return f"sent to {args['to']}"

    return {"result": await ctx.effect("tools.send_email", send, request=args), "log": ["email sent"]}
