"""Where a node instance stands among the loops around it, and which instance of another
node it meets: the same iterations of the loops around both.

Pure, one per run (asked several times per step, so every answer is remembered; they
depend on the graph and on names only).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from ..graph import ExecutableGraph
from ..graph.instances import instance_name, iterations, parse_instance


class Flat(NamedTuple):
    """What an instance of a node in one loop, with nothing of another loop around what it
    meets, needs from its name: its instances are ``node`` and ``node#k``, and whatever it
    meets in its loop is at the same iteration, written with the same suffix."""

    #: what may become due once it settles, as (node, whether in the same iteration)
    kids: tuple[tuple[str, bool], ...]
    #: what it runs after, the same way (the loop's entry: from its first iteration on)
    deps: tuple[tuple[str, bool], ...]
    #: the loop's entry, from its second iteration on: the nodes of the previous one it
    #: runs after; else ()
    back: tuple[str, ...]
    #: the loop's entry, when settling it may lead back there; else None
    leads_to: str | None

    def deps_at(self, k: int, entry: bool) -> tuple[str, ...]:
        """What its instance of iteration ``k`` runs after (``entry``: it is the loop's
        entry, which from iteration 1 on runs after the previous iteration's ways back)."""
        if k and entry:
            before = "" if k == 1 else f"#{k - 1}"
            return tuple(b + before for b in self.back)
        suffix = f"#{k}" if k else ""
        return tuple(d + suffix if same else d for d, same in self.deps)


class Placement:
    def __init__(self, graph: ExecutableGraph, exits: Mapping[str, Sequence[str]], leads_back: Mapping[str, str]):
        self._graph = graph
        self._leads_back = leads_back   # a node leading back to the entry of its loop -> that entry
        self._path = graph.loop_path
        self._exits = exits   # a loop's entry -> the nodes after it, that wait for its end
        self._its_of: dict[str, tuple[int, ...]] = {}
        self._names: dict[tuple[str, tuple[int, ...]], str] = {}
        self._shared: dict[tuple[str, str], int] = {}
        self._reaches: dict[str, tuple[tuple[str, int, int], ...]] = {}
        self._afters: dict[str, tuple[tuple[str, int, int], ...]] = {}
        self._flats: dict[str, Flat | None] = {}

    def its(self, name: str) -> tuple[int, ...]:
        """The iteration of each loop around the instance, outermost first."""
        try:
            return self._its_of[name]
        except KeyError:
            p = parse_instance(name)
            path = self._path.get(p.node)
            its = () if not path else (p.iteration,) if len(path) == 1 else iterations(p, len(path))
            self._its_of[name] = its
            return its

    def at(self, node: str, its: tuple[int, ...]) -> str:
        """The instance of ``node`` at ``its`` (one iteration per loop around it)."""
        if not its:
            return node
        try:
            return self._names[node, its]
        except KeyError:
            name = self._names[node, its] = (instance_name(node, its[-1]) if len(its) == 1 else
                                             instance_name(node, its[-1], None, its[:-1]))
            if len(its) == len(self._path.get(node, ())):
                self._its_of.setdefault(name, its)   # what ``its`` would parse out of the name
            return name

    def common(self, node: str, other: str) -> int:
        """How many loops, from the outermost, are around both nodes."""
        try:
            return self._shared[node, other]
        except KeyError:
            a, b = self._path.get(node, ()), self._path.get(other, ())
            k = 0
            while k < len(a) and k < len(b) and a[k] == b[k]:
                k += 1
            self._shared[node, other] = k
            return k

    def after(self, node: str) -> tuple[tuple[str, int, int], ...]:
        """``node``'s dependencies without the edges back to it, each with the loops around
        both and around it (more: it waits from outside for a loop to end)."""
        try:
            return self._afters[node]
        except KeyError:
            after = self._afters[node] = tuple(
                (d, self.common(node, d), len(self._path.get(d, ()))) for d in self._graph.forward_deps(node))
            return after

    def reach(self, node: str) -> tuple[tuple[str, int, int], ...]:
        """The nodes whose instances may become due once one of ``node`` settles: its
        children, and those after each loop around it (they wait for the loop's end,
        whichever member ends last); each with the loops around both and around it."""
        try:
            return self._reaches[node]
        except KeyError:
            found = list(self._graph.children(node))
            for entry in self._path.get(node, ()):
                found += self._exits[entry]
            reach = self._reaches[node] = tuple(
                (c, self.common(node, c), len(self._path.get(c, ()))) for c in dict.fromkeys(found))
            return reach

    def flat(self, node: str) -> Flat | None:
        """``node``'s ``Flat`` shape, or None when it is in no loop, in a loop inside another,
        or meets a node of another loop (the general path answers those)."""
        try:
            return self._flats[node]
        except KeyError:
            pass
        path, g = self._path.get(node, ()), self._graph
        found = None
        if len(path) == 1:
            kids, deps = self.reach(node), self.after(node)
            # each met at the same iteration of the same loop (1, 1) or in no loop (0, 0)
            if all((k, depth) in ((1, 1), (0, 0)) for _, k, depth in (*kids, *deps)):
                entry = path[0]
                back = g.back_sources.get(node, ()) if node == entry else ()
                if all(self._path.get(b) == path for b in back):
                    found = Flat(tuple((c, k == 1) for c, k, _ in kids), tuple((d, k == 1) for d, k, _ in deps),
                                 tuple(back), entry if self._leads_back.get(node) == entry else None)
        self._flats[node] = found
        return found

