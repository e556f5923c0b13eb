"""How a run grows: a loop's next iteration, a map's items, a map's end.

Mixed into ``RunLoop``: these steps act on the loop's records (transitions,
candidates, the stop reason) and are kept apart so the loop itself stays about
scheduling and outcomes.
"""

from __future__ import annotations

import re
from abc import abstractmethod

from ..core.errors import ErrorClass, InvalidWrites
from ..core.states import FINISHED_NODE, NodeEvent, NodeStatus, StopKind
from ..graph import ExecutableGraph
from . import scheduler
from .parts import LoopPart

N = NodeStatus

_OVER_BOUND = re.compile(r"loop '(?P<entry>[^']+)' reached max_iterations=\d+( \([^)]*\))?: "
                         r"'(?P<node>[^']+)' led back to it again")


def over_bound_message(entry: str, bound: int | None, its: tuple[int, ...], node: str) -> str:
    """The error of a run whose loop ``entry`` (in iterations ``its``) was led back to past
    its bound by ``node``."""
    # a loop inside another is bounded in each iteration of the outer one
    where = ("" if len(its) == 1 else f" (in iteration {its[0]} of the loop around it)" if len(its) == 2 else
             f" (in iterations {'.'.join(map(str, its[:-1]))} of the loops around it)")
    return f"loop {entry!r} reached max_iterations={bound}{where}: {node!r} led back to it again"


def bound_reached(message: str) -> tuple[str, str] | None:
    """(the loop's entry, the node that led back to it) of an ``over_bound_message``, or None."""
    found = _OVER_BOUND.fullmatch(message)
    return None if found is None else (found["entry"], found["node"])


class Growth(LoopPart):
    graph: ExecutableGraph

    @abstractmethod
    def _stop_with(self, kind: StopKind, cls: ErrorClass, message: str) -> None:
        ...

    @abstractmethod
    def _fail_before_start(self, node: str, error: BaseException) -> None:
        ...

    def _grow(self, node: str) -> bool:
        """What settling ``node`` creates: a map's end, or its loop's next iteration. True
        when ``node`` is a map's item, which leads nowhere (``next_iteration``) but to its
        map's end (only an item's name ends with ``]``)."""
        if node[-1] == "]":
            self._close_map(self.inst.group(node))
            return True
        nxt = self.inst.next_iteration(node, self.rec.statuses)
        if nxt is None:
            return False
        entry, its = nxt
        if scheduler.over_bound(self.inst, entry, its):
            bound = self.graph.nodes[entry].max_iterations
            self._stop_with(StopKind.FAIL, ErrorClass.LIMIT_EXCEEDED, over_bound_message(entry, bound, its, node))
            return False
        new = self.inst.add_iteration(entry, its)
        self.rec.add_instances(new)
        self._candidates.update(new)
        return False

    def _regrow(self) -> None:
        """A run taken over: create what its settled instances imply and a crash may have
        kept from being recorded (a loop's next iteration, a map's end)."""
        missing = self.inst.complete_iterations()
        self.rec.add_instances(missing)
        self._candidates.update(missing)
        for node in list(self.inst.order):
            if self.rec.statuses[node] in FINISHED_NODE:
                self._grow(node)

    def _spawn(self, group: str) -> list[str] | None:
        """A map is due: create one instance per item of its list (those not there yet).
        Returns the items created now, due at once in item order (they wait for nothing
        their group did not); None when the map failed to start."""
        spec = self.inst.spec(group)
        assert spec.map_over is not None
        values = self.state.input_state(group).get(spec.map_over)
        if not isinstance(values, list):
            self._fail_before_start(group, InvalidWrites(
                f"map {group!r} runs over state field {spec.map_over!r}, which must be a list; "
                f"it is {type(values).__name__}"))
            return None
        new = self.inst.add_items(group, len(values))
        self.rec.add_instances(new)
        attempt = self._attempt_no.get(group, 0) + 1
        self._attempt_no[group] = attempt
        self._node(group, NodeEvent.START, attempt=attempt, items=len(values))
        if len(new) < len(values):   # items kept from before (a resumed or forked run) are examined as usual
            fresh = set(new)
            self._candidates.update(i for i in self.inst.items(group) if i not in fresh)
        self._close_map(group)
        return new

    def _close_map(self, group: str) -> None:
        """A map settles once all its items have: failed if one failed."""
        statuses = self.rec.statuses
        outcome = scheduler.map_settles(self.inst, statuses, group)
        if outcome is None:
            return
        items = self.inst.items(group)
        failed = [i for i in items if statuses[i] == N.FAILED] if outcome == N.FAILED else []
        if failed:
            self._node(group, NodeEvent.FAIL, error=f"{len(failed)} of {len(items)} items failed: "
                                                    f"{', '.join(failed[:5])}")
        elif outcome == N.CANCELLED:
            self._node(group, NodeEvent.CANCEL, reason="items were cancelled")
        else:
            self.state.add(group, {})
            self.rec.folded(group, 0)
            self._node(group, NodeEvent.SUCCEED, items=len(items))
