"""Graphs with node instances for the agent crash tests (a helper module, not a test module).

Both the test process and ``agent_worker.py`` subprocesses import this module under the
same name (``agent_graphs``), so the compiled graphs have the same structural version
everywhere and a run started in one process can be resumed in another.

* ``map_async`` / ``map_sync``: the seed's A/B experiment with A and B as the two items of
  a map (``work[0]``, ``work[1]``). Item A performs the counted effect ``charge``; item B
  fails with a TransientError (no retry policy) until ``<workdir>/b_may_succeed`` exists.
* ``loop_async`` / ``loop_sync``: the same with A and B as iterations 0 and 1 of a loop
  (``step``, ``step#1``).
* ``react`` / ``react_short``: a ReAct agent, model → tool → model …, whose tool performs
  the counted effect ``search`` with ``request={"i": k}`` once per tool call until
  ``target`` calls were made; ``react_short`` allows fewer iterations than it needs.
* ``supervisor``: nested loops, a supervisor loop (``plan`` → ``agent`` → ``review`` →
  ``again`` ⇢ ``plan``) whose body is the subgraph ``agent``, a ReAct sub-agent (``model``
  ⇄ ``tool``) making ``calls[r - 1]`` calls of ``search`` with ``request={"round": r, "i":
  k}`` in round r; its instances are ``agent/tool#<round - 1>.<k>``. Its bound
  (``SUB_AGENT_MAX_ITERATIONS``) counts per round.

Every call of an effect function appends a line to ``<workdir>/effects.log`` and every
node execution one to ``<workdir>/nodes.log``, so a repeated side effect or re-executed
node shows as another line.

How a worker process misbehaves is set by ``FLAGS`` and ``HANG_AT``, which only
``agent_worker.py`` sets; in the test process they are empty:

  a_waits_b_fail   map item A waits (on the store) until B's failure is recorded, then
                   calls its effect
  b_waits_a_done   map item B waits until A's success is recorded, then fails
  b_waits_marker   map item B waits until ``<workdir>/marker`` exists, then fails
  b_hangs          map item B blocks until the process is killed

``HANG_AT`` names a point (``reached(...)`` below); the process that reaches it writes
``<workdir>/marker`` ({"point", "pid"}) and blocks until the test SIGKILLs it.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel

from markers import write_marker
from runtime import ExecutableGraph, Graph, NodeContext, TransientError, append
from runtime.graph.instances import parse_instance

FLAGS: frozenset[str] = frozenset()
HANG_AT: str | None = None
#: the worker's store (a map item waits on the other's recorded outcome through it)
STORE: Any = None
WORKER_ENV = "HARNESS_CRASH_WORKER"
WAIT_TIMEOUT = 120.0       # longer than the tests wait for a worker: they kill it first
HANG_SECONDS = 180.0
B_FLAG = "b_may_succeed"


# ---------------------------------------------------------------- the outside world

def log(workdir: str, name: str, record: dict[str, Any]) -> None:
    # one write() of a whole line, so a SIGKILL cannot leave half a record
    with (Path(workdir) / name).open("a") as f:
        f.write(json.dumps(record) + "\n")


def read_log(workdir: str, name: str) -> list[dict[str, Any]]:
    path = Path(workdir) / name
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def executed(workdir: str, ctx: NodeContext) -> None:
    log(workdir, "nodes.log", {"node": ctx.node, "pid": os.getpid(), "attempt": ctx.attempt})


def _mark(workdir: str, point: str) -> bool:
    """At the hang point: write the marker; True when the caller must block now."""
    if HANG_AT != point:
        return False
    if os.environ.get(WORKER_ENV) != "1":
        raise RuntimeError("refusing to hang a process that is not a crash worker")
    write_marker(Path(workdir) / "marker", json.dumps({"point": point, "pid": os.getpid()}))
    return True


def reached(workdir: str, point: str) -> None:
    """A kill point (sync code: a node running in a worker thread, an effect function)."""
    if _mark(workdir, point):
        threading.Event().wait(HANG_SECONDS)
        raise RuntimeError(f"the test did not kill this process at {point}")


async def areached(workdir: str, point: str) -> None:
    if _mark(workdir, point):
        await asyncio.sleep(HANG_SECONDS)
        raise RuntimeError(f"the test did not kill this process at {point}")


def charge(workdir: str) -> Callable[[Any], str]:
    def fn(info: Any) -> str:
        log(workdir, "effects.log", {"key": info.key, "request": info.request, "pid": os.getpid()})
        return f"receipt-{info.request['item']}"
    return fn


def b_may_succeed(workdir: str) -> bool:
    return (Path(workdir) / B_FLAG).exists()


def _recorded(run_id: str, node: str, type_: str) -> bool:
    return any(e.type == type_ and e.node == node for e in STORE.events(run_id))


def _wait_sync(cond: Callable[[], bool], what: str) -> None:
    end = time.monotonic() + WAIT_TIMEOUT
    while not cond():
        if time.monotonic() > end:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.005)


async def _wait(cond: Callable[[], bool], what: str) -> None:
    end = time.monotonic() + WAIT_TIMEOUT
    while not cond():
        if time.monotonic() > end:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


def _b_condition(state: Any, ctx: NodeContext) -> tuple[Callable[[], bool], str] | None:
    """What map item B waits for before failing, under the worker's flags."""
    if "b_hangs" in FLAGS:
        return (lambda: False), "the process to be killed"
    if "b_waits_a_done" in FLAGS:
        return (lambda: _recorded(ctx.run_id, "work[0]", "node.succeed")), "A's success"
    if "b_waits_marker" in FLAGS:
        return (lambda: (Path(state.workdir) / "marker").exists()), "A's marker"
    return None


def _a_condition(ctx: NodeContext) -> tuple[Callable[[], bool], str] | None:
    if "a_waits_b_fail" in FLAGS:
        return (lambda: _recorded(ctx.run_id, "work[1]", "node.fail")), "B's failure"
    return None


# ---------------------------------------------------------------- A and B as map items

class MapState(BaseModel):
    workdir: str
    items: list[str] = ["A", "B"]
    results: Annotated[list[str], append] = []
    finished: bool = False


def _map_graph(kind: str) -> Graph:
    g = Graph(f"agent_map_{kind}", state=MapState)

    if kind == "async":
        @g.node(map_over="items")
        async def work(state: MapState, ctx: NodeContext, item: str) -> dict:
            executed(state.workdir, ctx)
            if item == "A":
                if (wait := _a_condition(ctx)) is not None:
                    await _wait(*wait)
                receipt = await ctx.effect("charge", charge(state.workdir), request={"item": item, "amount": 5})
                await areached(state.workdir, "A:after_effect")
                return {"results": [f"A:{receipt}"]}
            if (wait := _b_condition(state, ctx)) is not None:
                await _wait(*wait)
            if not b_may_succeed(state.workdir):
                raise TransientError("B: the service is unavailable")
            return {"results": ["B:done"]}
    else:
        @g.node(name="work", map_over="items")
        def work_sync(state: MapState, ctx: NodeContext, item: str) -> dict:
            executed(state.workdir, ctx)
            if item == "A":
                if (wait := _a_condition(ctx)) is not None:
                    _wait_sync(*wait)
                receipt = ctx.effect("charge", charge(state.workdir), request={"item": item, "amount": 5})
                reached(state.workdir, "A:after_effect")
                return {"results": [f"A:{receipt}"]}
            if (wait := _b_condition(state, ctx)) is not None:
                _wait_sync(*wait)
            if not b_may_succeed(state.workdir):
                raise TransientError("B: the service is unavailable")
            return {"results": ["B:done"]}

    @g.node(after=["work"])
    def finish(state: MapState, ctx: NodeContext) -> dict:
        executed(state.workdir, ctx)
        return {"finished": True}

    return g


# ---------------------------------------------------------------- A and B as loop iterations

class LoopState(BaseModel):
    workdir: str
    done: Annotated[list[str], append] = []
    finished: bool = False


def _loop_graph(kind: str) -> Graph:
    g = Graph(f"agent_loop_{kind}", state=LoopState)

    # iteration 0 is A, iteration 1 is B; ``again`` leads back to ``step`` while B has not run
    if kind == "async":
        @g.node(after=["again"], max_iterations=2)
        async def step(state: LoopState, ctx: NodeContext) -> dict:
            executed(state.workdir, ctx)
            if parse_instance(ctx.node).iteration == 0:
                receipt = await ctx.effect("charge", charge(state.workdir), request={"item": "A", "amount": 5})
                await areached(state.workdir, "A:after_effect")
                return {"done": [f"A:{receipt}"]}
            if not b_may_succeed(state.workdir):
                raise TransientError("B: the service is unavailable")
            return {"done": ["B:done"]}
    else:
        @g.node(name="step", after=["again"], max_iterations=2)
        def step_sync(state: LoopState, ctx: NodeContext) -> dict:
            executed(state.workdir, ctx)
            if parse_instance(ctx.node).iteration == 0:
                receipt = ctx.effect("charge", charge(state.workdir), request={"item": "A", "amount": 5})
                reached(state.workdir, "A:after_effect")
                return {"done": [f"A:{receipt}"]}
            if not b_may_succeed(state.workdir):
                raise TransientError("B: the service is unavailable")
            return {"done": ["B:done"]}

    @g.node(after=["step"], when=lambda s: len(s.done) < 2)
    def again(state: LoopState, ctx: NodeContext) -> dict:
        executed(state.workdir, ctx)
        return {}

    @g.node(after=["step"])
    def finish(state: LoopState, ctx: NodeContext) -> dict:
        executed(state.workdir, ctx)
        return {"finished": True}

    return g


# ---------------------------------------------------------------- a ReAct agent

class AgentState(BaseModel):
    workdir: str
    target: int
    messages: Annotated[list[dict[str, Any]], append] = []
    answer: str | None = None


def search(workdir: str, tool: str) -> Callable[[Any], str]:
    def fn(info: Any) -> str:
        i = info.request["i"]
        # a sub-agent's call names its round: ``result-<round>.<i>``
        result = f"result-{info.request['round']}.{i}" if "round" in info.request else f"result-{i}"
        log(workdir, "effects.log", {"key": info.key, "request": info.request, "node": tool,
                                     "result": result, "pid": os.getpid()})
        reached(workdir, f"{tool}:in_effect")   # killed here, the effect is in doubt
        return result
    return fn


def searched(workdir: str, messages: list[dict[str, Any]], ctx: NodeContext) -> tuple[dict[str, Any], Any]:
    """A tool instance's work: the call the model's last message asks for, and the result
    of the ``search`` effect for it (with the crash points before and after the effect)."""
    executed(workdir, ctx)
    request = messages[-1]["call"]
    reached(workdir, f"{ctx.node}:before_effect")
    result = ctx.effect("search", search(workdir, ctx.node), request=request)
    reached(workdir, f"{ctx.node}:after_effect")
    return request, result


def _calls_pending(state: AgentState) -> bool:
    return "call" in state.messages[-1]


def _react_graph(name: str, max_iterations: int) -> Graph:
    g = Graph(name, state=AgentState)

    @g.node()
    def prep(state: AgentState, ctx: NodeContext) -> dict:
        executed(state.workdir, ctx)
        return {"messages": [{"role": "user", "content": f"call the tool {state.target} times"}]}

    # the model runs on the event loop, the tool in a worker thread: both ways a node can die
    @g.node(after=["prep", "tool"], max_iterations=max_iterations)
    async def model(state: AgentState, ctx: NodeContext) -> dict:
        executed(state.workdir, ctx)
        await areached(state.workdir, ctx.node)
        made = sum(1 for m in state.messages if m["role"] == "tool")
        if made < state.target:
            return {"messages": [{"role": "assistant", "call": {"i": made}}]}
        return {"messages": [{"role": "assistant", "content": f"made {made} calls"}]}

    @g.node(after=["model"], when=_calls_pending)
    def tool(state: AgentState, ctx: NodeContext) -> dict:
        request, result = searched(state.workdir, state.messages, ctx)
        return {"messages": [{"role": "tool", "i": request["i"], "content": result}]}

    @g.node(after=["model"])
    def finish(state: AgentState, ctx: NodeContext) -> dict:
        executed(state.workdir, ctx)
        return {"answer": state.messages[-1]["content"]}

    return g


# ---------------------------------------------------------------- a supervisor calling a ReAct sub-agent

class SupervisorState(BaseModel):
    workdir: str
    calls: list[int]          # the tool calls the sub-agent makes in each round
    round: int = 0            # rounds begun (1-based once begun)
    messages: Annotated[list[dict[str, Any]], append] = []
    answer: str | None = None


class SubAgentState(BaseModel):
    """The sub-agent's view of ``SupervisorState``."""

    workdir: str
    calls: list[int]
    round: int = 0
    messages: Annotated[list[dict[str, Any]], append] = []


def _sub_agent(inner_bound: int) -> Graph:
    """model ⇄ tool, a loop of its own: the model asks for ``calls[round - 1]`` tool calls
    in its round, each tool call the counted effect ``search`` with
    ``request={"round": r, "i": k}``."""
    g = Graph("sub_agent", state=SubAgentState)

    @g.node(after=["tool"], max_iterations=inner_bound)
    async def model(state: SubAgentState, ctx: NodeContext) -> dict:
        executed(state.workdir, ctx)
        await areached(state.workdir, ctx.node)
        r = state.round
        made = sum(1 for m in state.messages if m["role"] == "tool" and m["round"] == r)
        if made < state.calls[r - 1]:
            return {"messages": [{"role": "assistant", "round": r, "call": {"round": r, "i": made}}]}
        return {"messages": [{"role": "assistant", "round": r, "content": f"round {r}: made {made} calls"}]}

    @g.node(after=["model"], when=_calls_pending)
    def tool(state: SubAgentState, ctx: NodeContext) -> dict:
        request, result = searched(state.workdir, state.messages, ctx)
        return {"messages": [{"role": "tool", "round": request["round"], "i": request["i"], "content": result}]}

    return g


def _supervisor_graph(name: str, rounds: int, inner_bound: int) -> Graph:
    """plan (outer entry) → agent (the sub-agent's loop) → review → again ⇢ plan; finish
    once ``again`` is skipped after the last round of ``calls``."""
    g = Graph(name, state=SupervisorState)

    @g.node(after=["again"], max_iterations=rounds)
    def plan(state: SupervisorState, ctx: NodeContext) -> dict:
        executed(state.workdir, ctx)
        r = state.round + 1
        return {"round": r, "messages": [
            {"role": "user", "round": r, "content": f"round {r}: call the tool {state.calls[r - 1]} times"}]}

    g.subgraph("agent", _sub_agent(inner_bound), after=["plan"])

    @g.node(after=["agent"])
    def review(state: SupervisorState, ctx: NodeContext) -> dict:
        executed(state.workdir, ctx)
        r = state.round
        return {"messages": [{"role": "supervisor", "round": r, "content": f"reviewed round {r}"}]}

    @g.node(after=["review"], when=lambda s: s.round < len(s.calls))
    def again(state: SupervisorState, ctx: NodeContext) -> dict:
        executed(state.workdir, ctx)
        return {}

    @g.node(after=["plan"])
    def finish(state: SupervisorState, ctx: NodeContext) -> dict:
        executed(state.workdir, ctx)
        made = sum(1 for m in state.messages if m["role"] == "tool")
        return {"answer": f"{made} calls in {state.round} rounds"}

    return g


REACT_TARGET = 50          # tool calls the agent makes: 51 model iterations
SHORT_TARGET = 10
SHORT_MAX_ITERATIONS = 5   # fewer than the SHORT_TARGET + 1 the short agent needs
SUPERVISOR_ROUNDS = 3      # the supervisor's bound: rounds of the outer loop
SUB_AGENT_MAX_ITERATIONS = 5   # the sub-agent's bound, per round: 4 tool calls in a round at most

GRAPHS: dict[str, Graph] = {
    "map_async": _map_graph("async"),
    "map_sync": _map_graph("sync"),
    "loop_async": _loop_graph("async"),
    "loop_sync": _loop_graph("sync"),
    "react": _react_graph("agent_react", REACT_TARGET + 1),
    "react_short": _react_graph("agent_react_short", SHORT_MAX_ITERATIONS),
    "supervisor": _supervisor_graph("agent_supervisor", SUPERVISOR_ROUNDS, SUB_AGENT_MAX_ITERATIONS),
}


def compiled(name: str) -> ExecutableGraph:
    return GRAPHS[name].compile()
