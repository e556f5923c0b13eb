"""What a run would start first from a set of node statuses, worked out without running it.

A checkpoint's view shows what a branch from it (a fork, a continuation, a resume) runs
next, and people read it as exactly that. So this follows the run loop's first step
(``RunLoop.drive``) on a branch's statuses, with the scheduler's own decisions: create what
the statuses imply (a loop's next iteration; one past the loop's bound fails the run before
anything starts), then schedule round by round as ``RunLoop._schedule`` does: what depends
only on skipped instances is skipped, a due instance whose ``when=`` is false is skipped, a
due map creates its items, and each skip may make more instances due or grow a loop.

Pure: no I/O. The state a ``when=`` or a map reads comes from ``BranchInputs``, which asks
its caller for the recorded writes only when the checkpoint's state is not already what
that node would be given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any

from ..core.jsonvalues import JSON
from ..core.states import FINISHED_NODE, NodeStatus
from ..graph.instances import group_of, parse_instance
from . import scheduler
from .folding import StateFold, view_of
from .instances import Instances

N = NodeStatus

#: loads the state a branch's nodes fold onto and the recorded writes of its lineage (node -> writes)
Loader = Callable[[], tuple[Mapping[str, JSON], Mapping[str, JSON]]]


class BranchInputs:
    """The state each instance would be given in a branch from a checkpoint.

    A node that descends from every instance that succeeded there is given the
    checkpoint's state itself (both fold the same writes in canonical order), which the
    view has already; only a node with a succeeded non-ancestor (a parallel branch) needs
    its ancestors' writes alone, so ``load`` is called then, once."""

    def __init__(self, inst: Instances, statuses: Mapping[str, NodeStatus], state: Mapping[str, JSON],
                 load: Loader):
        self.inst = inst
        self.state = state
        self.load = load
        self.succeeded = [n for n, s in statuses.items() if s == N.SUCCEEDED]
        self.whole: StateFold | None = None
        self.folded: StateFold | None = None

    def fold_for(self, node: str) -> StateFold:
        """A fold whose input state for ``node`` is the one a branch would give it."""
        mask, index = self.inst.ancestor_mask(node), self.inst.index
        if all(mask >> index[n] & 1 for n in self.succeeded):
            if self.whole is None:   # the checkpoint's state as its input, with nothing to fold onto it
                self.whole = StateFold(self.inst, self.state, {})
            return self.whole
        if self.folded is None:
            base, writes = self.load()
            self.folded = StateFold(self.inst, base, {n: writes[n] for n in self.succeeded if n in writes})
        return self.folded

    def passes(self, node: str, when: Callable[[Any], bool]) -> bool:
        """What ``when`` says for ``node``. It is the graph's own code, run where the view is
        built: when it raises (or the state does not validate), the node counts as passing,
        since a branch would try it next (and fail it there), and the view still reads."""
        fold = self.fold_for(node)
        try:
            return bool(when(view_of(fold.input_model(node), self.inst.spec(node).view)))
        except Exception:
            return True

    def item_count(self, group: str) -> int | None:
        """How many items a map would run over, or None when its field is not a list
        (a branch fails the map before it starts)."""
        field = self.inst.spec(group).map_over
        assert field is not None
        values = self.fold_for(group).input_state(group).get(field)
        return len(values) if isinstance(values, list) else None


def first_started(inst: Instances, statuses: MutableMapping[str, NodeStatus], inputs: BranchInputs) -> list[str]:
    """The instances a run with these statuses starts before any of them finishes, in
    canonical order (all at once, up to its concurrency bound; the rest as slots free).

    ``inst`` and ``statuses`` change as the run's would. Two cases are shown as ready where
    a branch would fail at once: a ``when=`` that raises here, and a map whose field is not
    a list; the node is what it would try, and a view must not fail on the graph's code."""
    if inst.dynamic:   # what the statuses imply (``Growth._regrow``)
        _pending(statuses, inst.complete_iterations())
        for node in list(inst.order):
            if statuses[node] in FINISHED_NODE and not _grow(inst, statuses, node):
                return []   # a loop needs an iteration past its bound: the branch fails with nothing started
    started: list[str] = []
    while True:
        # every instance (the run loop asks only those a settle touched: the others give the
        # verdict they gave last round, and they started or settled then)
        front = scheduler.frontier(inst, statuses)
        settled = False
        within = True   # no loop needed an iteration past its bound: what is ready starts
        for node in front.skip:
            within = _settle(inst, statuses, node, N.SKIPPED) and within
            settled = True
        ready: list[str] = []
        for node in front.ready:
            when, spawns = scheduler.gates(inst.spec(node), node, statuses[node])
            if when is not None and not inputs.passes(node, when):
                within = _settle(inst, statuses, node, N.SKIPPED) and within
                settled = True
                continue
            if spawns:
                count = inputs.item_count(node)
                if count is not None:
                    within = _spawn(inst, statuses, node, count) and within
                    settled = True
                    continue
            ready.append(node)
        if not within:
            return inst.canonical(started)
        for node in ready:
            statuses[node] = N.RUNNING
        started += ready
        if not settled:
            return inst.canonical(started)


def _settle(inst: Instances, statuses: MutableMapping[str, NodeStatus], node: str, status: NodeStatus) -> bool:
    """``node`` settles with ``status``; False when that needs a loop iteration past its bound."""
    statuses[node] = status
    return _grow(inst, statuses, node) if inst.dynamic else True


def _grow(inst: Instances, statuses: MutableMapping[str, NodeStatus], node: str) -> bool:
    """What settling ``node`` creates (``Growth._grow``): its map's end, its loop's next
    iteration. False when that iteration is past the loop's bound."""
    name = parse_instance(node)
    if name.item is not None and not _close_map(inst, statuses, group_of(name)):
        return False
    nxt = inst.next_iteration(node, statuses)
    if nxt is None:
        return True
    entry, its = nxt
    if scheduler.over_bound(inst, entry, its):
        return False
    _pending(statuses, inst.add_iteration(entry, its))
    return True


def _spawn(inst: Instances, statuses: MutableMapping[str, NodeStatus], group: str, count: int) -> bool:
    """A due map creates its items (``Growth._spawn``) and settles at once when none is left."""
    _pending(statuses, inst.add_items(group, count))
    statuses[group] = N.RUNNING
    return _close_map(inst, statuses, group)


def _close_map(inst: Instances, statuses: MutableMapping[str, NodeStatus], group: str) -> bool:
    outcome = scheduler.map_settles(inst, statuses, group)
    return True if outcome is None else _settle(inst, statuses, group, outcome)


def _pending(statuses: MutableMapping[str, NodeStatus], names: Iterable[str]) -> None:
    for n in names:
        statuses[n] = N.PENDING
