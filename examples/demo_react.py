"""A ReAct agent: ``think`` (a model call) picks a tool, ``act`` calls it, and round
again until the model has its answer; then ``answer`` writes it up. A question
about ten cities takes twelve tool calls: a search, ten weather look-ups and a
distance, so the loop runs ``think``, ``act``, ``think#1``, ``act#1``, … ``think#12``.

    harness run examples.demo_react:graph --input '{"question": "warmest coastal capital this weekend?"}'

The model and the tools are deterministic stand-ins; both go through ``ctx.effect``
(the model call reports its token usage there), so nothing repeats on resume.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel

from runtime import EffectInfo, Graph, NodeContext, append

CITIES = ["Lisbon", "Dublin", "Athens", "Valletta", "Copenhagen", "Oslo", "Helsinki", "Tallinn", "Riga", "Monaco"]


class Agent(BaseModel):
    question: str
    messages: Annotated[list[str], append] = []
    observations: Annotated[list[dict[str, Any]], append] = []
    next_call: dict[str, Any] | None = None
    answer: str = ""


def plan_next(observations: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The stand-in model's policy: search, then the weather of every city found, then a distance."""
    if not observations:
        return {"tool": "search", "args": {"query": "European capitals on the coast"}}
    cities: list[str] = observations[0]["result"]
    weather = [o for o in observations if o["tool"] == "weather"]
    if len(weather) < len(cities):
        return {"tool": "weather", "args": {"city": cities[len(weather)]}}
    if observations[-1]["tool"] == "weather":
        warmest = max(weather, key=lambda o: o["result"])["args"]["city"]
        return {"tool": "distance", "args": {"from": "Lisbon", "to": warmest}}
    return None


def run_tool(tool: str, args: dict[str, Any]) -> Any:
    if tool == "search":
        return CITIES
    if tool == "weather":
        return 12 + sum(map(ord, args["city"])) % 17   # °C
    if tool == "distance":
        return 0 if args["to"] == args["from"] else 100 + sum(map(ord, args["to"])) % 3000  # km
    raise ValueError(f"unknown tool {tool!r}")


graph = Graph("react", state=Agent)


@graph.node(after=["act"], max_iterations=20)
async def think(state: Agent, ctx: NodeContext) -> dict[str, Any]:
    def complete(info: EffectInfo) -> dict[str, Any]:
        info.usage(tokens=180 + 40 * len(state.observations), cost=0.0004)
        call = plan_next(state.observations)
        thought = "I have what I need." if call is None else f"Next I call {call['tool']}."
        return {"thought": thought, "call": call}

    reply = await ctx.effect("llm.chat", complete,
                             request={"question": state.question, "seen": len(state.observations)})
    return {"next_call": reply["call"], "messages": [f"model: {reply['thought']}"]}


@graph.node(after=["think"], when=lambda s: s.next_call is not None)
async def act(state: Agent, ctx: NodeContext) -> dict[str, Any]:
    call = state.next_call or {}
    result = await ctx.effect(f"tools.{call['tool']}", lambda: run_tool(call["tool"], call["args"]),
                              request=call["args"])
    return {"observations": [{"tool": call["tool"], "args": call["args"], "result": result}],
            "messages": [f"tool {call['tool']}: {result}"]}


@graph.node(after=["think"])
def answer(state: Agent) -> dict[str, Any]:
    weather = [o for o in state.observations if o["tool"] == "weather"]
    best = max(weather, key=lambda o: o["result"])
    km = state.observations[-1]["result"]
    return {"answer": f"{best['args']['city']} ({best['result']} °C), {km} km from Lisbon"}
