"""The ready queue, as pure functions of the graph and the node statuses.

Nothing here precomputes an execution order: the frontier is recomputed from the
statuses after every completion, so a node becomes ready the moment its last
dependency finishes, whatever order completions arrive in.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from ..core.states import FINISHED_NODE, NodeStatus
from ..graph import ExecutableGraph, NodeSpec
from ..graph.instances import parse_instance
from .instances import Instances, as_instances

N = NodeStatus
#: the statuses of an instance that may start once its dependencies allow
_DUE = frozenset({N.PENDING, N.RETRYING})


class Frontier(NamedTuple):   # a tuple: built several times a step, in one call
    ready: tuple[str, ...]   # may start now, in canonical order
    skip: tuple[str, ...]    # every dependency was skipped: skip propagates


#: the frontier among no candidates
NOTHING_DUE = Frontier((), ())


def dependency_verdict(inst: Instances, statuses: Mapping[str, NodeStatus], node: str) -> str:
    """"ready", "skip", "wait" or "blocked" for one node instance, from its dependencies only.

    A node runs once all its dependencies finished, none failed or was cancelled,
    and at least one succeeded (or it has none). All skipped → skipped. A dependency
    on a loop from outside it counts once the loop has ended, with every instance of
    that node (one succeeded: it succeeded).
    """
    deps: Sequence[str] | None
    if inst.dynamic:
        deps = inst.current_deps(node, statuses)
        if deps is None:   # a loop it waits for from outside may still grow
            return "wait"
    else:   # one instance per node: its dependencies as declared
        deps = inst.graph.nodes[node].after
    return _verdict(statuses, deps)


def _verdict(statuses: Mapping[str, NodeStatus], deps: Sequence[str]) -> str:
    """``dependency_verdict`` once the dependencies are known."""
    if not deps:
        return "ready"
    succeeded = False
    for d in deps:
        s = statuses[d]
        if s not in FINISHED_NODE:
            return "wait"
        if s in (N.FAILED, N.CANCELLED):
            return "blocked"
        succeeded = succeeded or s == N.SUCCEEDED
    return "ready" if succeeded else "skip"


def entered(inst: Instances, statuses: Mapping[str, NodeStatus], node: str) -> bool:
    """Whether ``node`` ends a subgraph that was entered. A subgraph is one step of its
    parent: once entered, its end runs (and what follows it in the parent) even when its
    last nodes were skipped by their own ``when``; it is skipped only when its first
    nodes were skipped because what the subgraph runs after was."""
    root = inst.spec(node).subgraph_root
    if root is None:
        return False
    return dependency_verdict(inst, statuses, inst.first_of(node, root)) != "skip"


def frontier(graph: Instances | ExecutableGraph, statuses: Mapping[str, NodeStatus],
             candidates: Iterable[str] | None = None) -> Frontier:
    """Ready and skippable node instances among ``candidates`` (default: all), canonical order.

    Callers pass only the instances whose dependencies changed (the children of what
    just finished) to keep each step proportional to the change, not the graph.
    """
    inst = as_instances(graph)
    ready: list[str] = []
    skip: list[str] = []
    if candidates is None:
        nodes: Iterable[str] = inst.order
    else:
        # a set already (as the run loop passes them): no copy needed to drop duplicates
        nodes = candidates if isinstance(candidates, (set, frozenset)) else set(candidates)
        if len(nodes) > 1:
            nodes = sorted(nodes, key=inst.index.__getitem__)
    for node in nodes:
        status = statuses[node]
        if status not in _DUE:
            continue
        # ``dependency_verdict``, with its usual answers inlined: asked several times a step
        deps = inst.current_deps(node, statuses) if inst.dynamic else inst.graph.nodes[node].after
        if deps is None:
            continue   # a loop it waits for from outside may still grow
        if len(deps) == 1:
            s = statuses[deps[0]]
            if s == N.SUCCEEDED:
                ready.append(node)
                continue
            if s not in FINISHED_NODE:
                continue
        verdict = _verdict(statuses, deps)
        if verdict == "skip" and entered(inst, statuses, node):
            verdict = "ready"
        if verdict == "ready":
            ready.append(node)
        elif verdict == "skip" and status == N.PENDING:
            skip.append(node)
    return Frontier(tuple(ready), tuple(skip))


def gates(spec: NodeSpec, node: str, status: NodeStatus) -> tuple[Callable[[Any], bool] | None, bool]:
    """What a due instance passes before it starts: (the ``when=`` to ask, if any; whether
    it is a map's group record, which creates its items instead of running). ``when=`` is
    asked before a first attempt only (a retry passed it already), and of a map, not of
    each of its items."""
    if spec.map_over is not None and parse_instance(node).item is not None:
        return None, False
    return spec.when if status == N.PENDING else None, spec.map_over is not None


def over_bound(inst: Instances, entry: str, its: tuple[int, ...]) -> bool:
    """Whether iteration ``its`` of the loop entered at ``entry`` is past its
    ``max_iterations`` (a loop inside another is bounded in each outer iteration)."""
    return its[-1] >= (inst.graph.nodes[entry].max_iterations or 0)


def map_settles(inst: Instances, statuses: Mapping[str, NodeStatus], group: str) -> NodeStatus | None:
    """How a running map's group record settles once all its items have: failed if one
    failed, else cancelled if one was, else succeeded. None while it is not running or
    an item has not finished."""
    if statuses.get(group) != N.RUNNING:
        return None
    items = inst.items(group)
    # later items finish later: the last one answers for all but the map's last few
    if items and statuses[items[-1]] not in FINISHED_NODE:
        return None
    if any(statuses[i] not in FINISHED_NODE for i in reversed(items)):
        return None
    if any(statuses[i] == N.FAILED for i in items):
        return N.FAILED
    if any(statuses[i] == N.CANCELLED for i in items):
        return N.CANCELLED
    return N.SUCCEEDED


class ReadyQueue(deque[str]):
    """Due instances waiting for a free slot, in canonical order. Taking the next few costs
    what they are, not what waits behind them (a wide map queues thousands of items and
    starts a few at each step); a deque, so that asking whether any wait costs no call."""

    def admit(self, ready: list[str], position: Callable[[str], int], room: int) -> list[str]:
        """Queue ``ready`` (in canonical order, each instance's ``position`` in it) and take
        the first ``room`` waiting out (fewer when fewer wait). What joins others waiting is
        merged with them: a node found due while they wait may come before them."""
        if not self:
            if len(ready) <= room:   # the usual step: nothing waits, and all may start
                return ready
            self.extend(ready)
        elif ready:
            merged = sorted({*self, *ready}, key=position)
            self.clear()
            self.extend(merged)
        return [self.popleft() for _ in range(max(0, min(room, len(self))))]
