"""Support triage, for time travel: classify a ticket, look the customer up and draft
a reply (effects), then page the on-call engineer for urgent tickets (an effect the
normal path never makes), then route the ticket to a queue.

* Fork after ``classify`` with ``{"tier": "gold"}``: every effect is served from the
  recording (MOCKED) and only the queue changes.
* Fork after ``classify`` with ``{"priority": "urgent"}``: ``page`` now runs and its
  effect was never recorded, so the fork pauses with an *unrecorded effect* question.
* Replay with ``graph_v2`` (a new version: another routing rule, and a draft request
  that names a tone): the report shows the changed writes and the changed request.

    harness run examples.demo_support:graph --input '{"customer": "ada", "text": "invoice is wrong"}'
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel

from runtime import Graph, NodeContext, append

CRM = {"ada": {"plan": "pro", "since": 2021}, "bob": {"plan": "free", "since": 2024}}


class Ticket(BaseModel):
    customer: str
    text: str
    tier: str = "standard"
    priority: str = ""
    account: dict[str, Any] = {}
    reply: str = ""
    paged: str = ""
    queue: str = ""
    log: Annotated[list[str], append] = []


def urgent(state: Ticket) -> bool:
    return state.priority == "urgent"


def classify(state: Ticket) -> dict[str, Any]:
    words = state.text.lower()
    priority = "urgent" if ("down" in words or "outage" in words) else "normal"
    return {"priority": priority, "log": [f"classified {priority}"]}


async def lookup(state: Ticket, ctx: NodeContext) -> dict[str, Any]:
    account = await ctx.effect("crm.lookup", lambda: CRM.get(state.customer, {"plan": "unknown"}),
                               request={"customer": state.customer})
    return {"account": account, "log": [f"{state.customer} is on {account['plan']}"]}


async def draft(state: Ticket, ctx: NodeContext) -> dict[str, Any]:
    reply = await ctx.effect("llm.draft", lambda: f"Hi {state.customer}, we are looking into it.",
                             request={"ticket": state.text, "plan": state.account["plan"]})
    return {"reply": reply, "log": ["reply drafted"]}


async def draft_v2(state: Ticket, ctx: NodeContext) -> dict[str, Any]:
    reply = await ctx.effect("llm.draft", lambda: f"Hi {state.customer}! We're on it.",
                             request={"ticket": state.text, "plan": state.account["plan"], "tone": "friendly"})
    return {"reply": reply, "log": ["reply drafted (friendly)"]}


async def page(state: Ticket, ctx: NodeContext) -> dict[str, Any]:
    who = await ctx.effect("pager.notify", lambda: "on-call: sam",
                           request={"customer": state.customer, "summary": state.text[:60]})
    return {"paged": who, "log": [f"paged {who}"]}


def route(state: Ticket) -> dict[str, Any]:
    queue = f"{state.tier}-{state.priority}"
    return {"queue": queue, "log": [f"routed to {queue}"]}


def route_v2(state: Ticket) -> dict[str, Any]:
    # the new rule: paying plans get their own queue, whatever the tier
    queue = f"{'paying' if state.account.get('plan') in ('pro', 'team') else state.tier}-{state.priority}"
    return {"queue": queue, "log": [f"routed to {queue} (v2)"]}


def build(*, draft_fn: Any = draft, route_fn: Any = route) -> Graph:
    g = Graph("support", state=Ticket)
    g.add_node("classify", classify)
    g.add_node("lookup", lookup, after=["classify"])
    g.add_node("draft", draft_fn, after=["lookup"])
    # after the draft, not beside it: the fork that pages pauses at the same point every time
    g.add_node("page", page, after=["draft"], when=urgent)
    g.add_node("route", route_fn, after=["draft", "page"])
    return g


graph = build()
#: the same graph with new code in two nodes: another version of ``support``
graph_v2 = build(draft_fn=draft_v2, route_fn=route_v2)
