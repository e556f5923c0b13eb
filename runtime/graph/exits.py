"""Whether a loop can end before its bound.

A loop goes round again when any way back to its entry succeeded, and ends when every
one was skipped (``engine.instances.Instances.next_iteration``). A way back that no
outcome of the ``when=`` conditions skips makes every iteration lead to another: the
run could only fail at the bound, so the graph is refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..core.errors import Problem
from .spec import NodeDecl


def endless_loops(deps: Mapping[str, Sequence[str]], decls: Mapping[str, NodeDecl],
                  loops: Mapping[str, Sequence[str]], refused: set[str]) -> list[Problem]:
    """The loops (``loops``: those ``check_loop`` found) that can end only at their bound:
    a way back to the entry that no outcome of the ``when=`` conditions skips makes every
    iteration lead to another. ``refused``: nodes of cycles refused already."""
    skips = _Skips(deps, decls, loops, refused)
    problems = []
    for entry in sorted(loops):
        comp = set(loops[entry])
        it = skips.iteration(entry)
        always = [s for s in deps[entry] if s in comp and not it.can_skip(s)]
        if not always:
            continue
        shown = " → ".join([*_path_to(always[0], entry, comp, deps), entry])
        why = "; ".join(it.why_runs(s) for s in always)
        one = len(always) == 1
        problems.append(Problem(
            f"node {entry!r}",
            f"cycle: {shown} can only end at its bound: the way{'' if one else 's'} back through "
            f"{', '.join(map(repr, always))} {'is' if one else 'are'} never skipped ({why}), so every iteration "
            f"leads to another; give {repr(always[0]) if one else 'each of them'} a when= condition, or give one "
            f"to each node {'it runs' if one else 'they run'} after (a node is skipped when its when= is false, "
            "or when all it runs after was skipped)"))
    return problems


class _Skips:
    """Which nodes some outcome of the ``when=`` conditions skips, as the engine skips them:
    a node whose ``when=`` is false, or all of whose dependencies were skipped (a node
    with none always runs). A subgraph's end is skipped only when the subgraph was never
    entered, when all its first nodes wait for was skipped; a map succeeds even over an
    empty list.

    Skipping only spreads, so every condition false skips the most nodes at once: that
    one outcome is asked about. A loop is read at its first iteration, where its entry
    waits for the nodes before it; later its entry runs (a way back succeeded), which
    skips no more. So a loop that can end at all can end there, and the nodes after it
    see its members as that iteration leaves them."""

    def __init__(self, deps: Mapping[str, Sequence[str]], decls: Mapping[str, NodeDecl],
                 loops: Mapping[str, Sequence[str]], refused: set[str]):
        self.decls, self.loops, self.refused = decls, loops, refused
        back = {e: {d for d in deps[e] if d in ms} for e, ms in loops.items()}
        self._forward = {n: [d for d in ds if d not in back.get(n, ())] for n, ds in deps.items()}
        self.first: dict[str, bool] = {}   # read at every loop's first iteration

    def waits_for(self, node: str) -> list[str]:
        """What skips ``node`` when all of it was skipped (its own when= aside)."""
        root = self.decls[node].subgraph_root
        return self._forward.get(root, []) if root is not None else self._forward[node]

    def iteration(self, entry: str) -> _Iteration:
        return _Iteration(self, entry)


class _Iteration:
    """What can be skipped in an iteration of ``entry``'s loop that runs. Its entry has run
    then, and so have those of the loops around it: each is skipped only by its own
    when=, whether its loop started there or a way back led to it."""

    def __init__(self, skips: _Skips, entry: str):
        self._skips, self.entry = skips, entry
        around = [e for e, ms in skips.loops.items() if entry in ms]   # its own loop included
        self.ready = set(around)
        self.inside = set().union(*(skips.loops[e] for e in around))
        # the loops' members as such an iteration has them; what they wait for from outside
        # the loops is the same in every iteration
        self._known: dict[str, bool] = {}

    def _memo(self, node: str) -> dict[str, bool]:
        return self._known if node in self.inside else self._skips.first

    def can_skip(self, node: str) -> bool:
        skips = self._skips
        stack = [node]
        while stack:   # iterative: a long chain would exhaust the stack of a recursion
            n = stack[-1]
            memo = self._memo(n)
            if n in memo:
                stack.pop()
                continue
            d = skips.decls.get(n)
            if d is None or n in skips.refused:
                memo[n] = True   # reported already: assume nothing of it
            elif d.when is not None or n in self.ready:
                memo[n] = d.when is not None
            else:
                waits = skips.waits_for(n)
                missing = [w for w in waits if w not in self._memo(w)]
                if missing:
                    stack.extend(missing)
                    continue
                memo[n] = bool(waits) and all(self._memo(w)[w] for w in waits)
            stack.pop()
        return self._memo(node)[node]

    def why_runs(self, source: str) -> str:
        """Why ``source`` is never skipped: the nodes it runs whenever they do, back to the
        entry of a loop it is in or to a node before them."""
        steps: list[str] = []
        node = source
        while node not in self.ready and node in self.inside:
            after = next((w for w in self._skips.waits_for(node) if not self.can_skip(w)), None)
            if after is None:
                break
            subgraph = " (a subgraph: once entered, it always ends)" if self._skips.decls[node].subgraph_root else ""
            steps.append(f"{node!r}{subgraph} {'runs ' if not steps else ''}whenever {after!r} does")
            node = after
        end = (f"{node!r} starts every iteration" if node == self.entry else
               f"{node!r} starts every iteration of the loop around it" if node in self.ready else
               f"{node!r}, before the loop, is never skipped")
        return f"{', '.join(steps)}, and {end}" if steps else end


def _path_to(target: str, entry: str, comp: set[str], deps: Mapping[str, Sequence[str]]) -> list[str]:
    """A shortest path from ``entry`` to ``target`` within ``comp`` (without the edges back
    to ``entry``), read in execution order."""
    came = {entry: entry}
    queue = [entry]
    for node in queue:
        for child in sorted(n for n in comp if n != entry and node in deps.get(n, ())):
            if child not in came:
                came[child] = node
                queue.append(child)
    path = [target]
    while path[-1] != entry:
        path.append(came[path[-1]])
    return path[::-1]
