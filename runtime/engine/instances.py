"""The node instances of one run: which exist, where each folds, what each waits for.

Pure: no I/O. A static graph has one instance per node and everything here reads
the compiled graph. A graph with loops or maps grows as the run goes: a loop's next
iteration is created once the nodes that lead back to its entry have settled and one
of them succeeded; a map's items once its worker is due. Instances are kept in
canonical order (``graph.key``), so a fold over any set of them is the same whatever
order they were created or finished in; inserting shifts the positions after the
insertion point, and whoever keeps positions as bitmasks registers to be told (how
they grow: ``instance_growth``).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence

from ..core.states import FINISHED_NODE, NodeStatus
from ..graph import ExecutableGraph, NodeSpec
from ..graph.instances import base_node, group_of, parse_instance
from .instance_growth import InstanceGrowth, Plan
from .placement import Flat, Placement



def _no_shape(node: str) -> Flat | None:
    return None


def as_instances(graph: ExecutableGraph | Instances) -> Instances:
    """A static view of a compiled graph where instances are expected."""
    return graph if isinstance(graph, Instances) else Instances(graph, ())


class Instances(InstanceGrowth):
    def __init__(self, graph: ExecutableGraph, names: Iterable[str], *, shapes: bool = True):
        """``shapes=False``: every answer from the general path (what the shapes are checked against)."""
        self.graph = graph
        self.dynamic = graph.dynamic
        self._shift: list[weakref.WeakMethod[Callable[[int, int], None]]] = []
        if not self.dynamic:
            self.order: list[str] | tuple[str, ...] = graph.order
            self.index: Mapping[str, int] = graph.index
            return
        self.order = graph.canonical(list(dict.fromkeys([*graph.order, *names])))
        self.index = {n: i for i, n in enumerate(self.order)}
        self._keys = [graph.key(n) for n in self.order]
        self._anc: dict[str, int] = {}
        self._path = graph.loop_path
        #: (node, the iterations of the outermost k loops around it, for every k below how
        #: many there are) -> its instances there (a map's group records), in order of creation
        self._of: dict[tuple[str, tuple[int, ...]], list[str]] = {}
        self._items: dict[str, list[str]] = {}    # a map's group record -> its items, in order
        #: (loop entry, the iterations of the loops around it) -> every instance of its
        #: members there, items included, in order of creation
        self._in: dict[tuple[str, tuple[int, ...]], list[str]] = {}
        self._ended: set[tuple[str, tuple[int, ...]]] = set()   # loops known to have ended there
        #: an instance's dependencies, asked on every step: (them when they are fixed
        #: instances, else None; each group as the instances whose statuses count and the
        #: loop seen from outside, with the iterations around it, whose end it waits for)
        self._deps: dict[str, tuple[tuple[str, ...] | None, tuple[Plan, ...]]] = {}
        g = graph
        #: a loop's members (those of loops inside it too) in canonical order, and the nodes
        #: after it that wait for its end
        self._members = {e: tuple(sorted(ms, key=g.index.__getitem__)) for e, ms in g.loops.items()}
        self._exits = {e: [c for m in ms for c in g.children(m) if c not in ms] for e, ms in g.loops.items()}
        #: a node that leads back to the entry of the loop it is in -> that entry (asked as
        #: each instance settles: most lead nowhere)
        self._leads_back = {s: e for e, srcs in g.back_sources.items() for s in srcs if g.loop_of.get(s) == e}
        self._where = Placement(g, self._exits, self._leads_back)
        self._its, self._at, self._common = self._where.its, self._where.at, self._where.common
        self._after, self._reach = self._where.after, self._where.reach
        self._flat = self._where.flat if shapes else _no_shape
        self._flat_loops = {e: tuple((m, g.block[m][0], g.index[m]) for m in ms) for e, ms in self._members.items()
                            if shapes and all(len(self._path[m]) == 1 for m in ms)}
        for n in self.order:
            self._note(n)

    def _seen_from(self, node: str, its: tuple[int, ...], other: str) -> str:
        """The instance of ``other`` that an instance of ``node`` at ``its`` leads to: the one
        of the same iterations of the loops around both, and when ``other`` is in a loop
        ``node`` is not, that loop's newest iteration there."""
        k = self._common(node, other)
        path = self._path.get(other, ())
        if len(path) == k:
            return self._at(other, its[:k]) if k else other
        return self._of[(other, its[:k])][-1]

    def first_of(self, name: str, node: str) -> str:
        """The instance of ``node`` in the iterations of the loops around both it and
        ``name``, at the first iteration of any loop around ``node`` only."""
        if not self.dynamic:
            return node
        k = self._common(parse_instance(name).node, node)
        its = self._its(name)[:k]
        return self._at(node, its + (0,) * (len(self._path.get(node, ())) - k))

    def on_shift(self, listener: Callable[[int, int], None]) -> None:
        """Call the bound method ``listener`` when instances move. Held weakly: its owner (a
        ``StateFold``) holds these instances, and the cycle would keep a finished run's
        structures alive until the cyclic collector found them."""
        self._shift.append(weakref.WeakMethod(listener))

    # ------------------------------------------------------------------ reading

    def spec(self, name: str) -> NodeSpec:
        return self.graph.nodes[base_node(name)]

    def key(self, name: str) -> tuple[int, ...]:
        return self.graph.key(name)

    def canonical(self, names: Sequence[str]) -> list[str]:
        """``names`` in canonical order: by position when they all exist (positions are
        kept in canonical order), by the graph's key otherwise."""
        try:
            return sorted(names, key=self.index.__getitem__)
        except KeyError:
            return self.graph.canonical(names)

    def items(self, group: str) -> Sequence[str]:
        """A map's items, in order (read only: asked as each item settles, so not copied)."""
        return self._items.get(group, ()) if self.dynamic else ()

    def group(self, item: str) -> str:
        """The map's group record ``item`` belongs to."""
        return group_of(parse_instance(item))

    def ancestor_mask(self, name: str) -> int:
        """Instances ``name`` folds the writes of, as a bitmask over positions. Asked once
        the instance is due, when everything it depends on has settled."""
        if not self.dynamic:
            return self.graph.ancestor_mask(name)
        found = self._anc.get(name)
        if found is not None:
            return found
        p = parse_instance(name)
        if p.item is not None:   # a map's items fold what their group record folds (see _dep_instances)
            found = self._anc[name] = self.ancestor_mask(group_of(p))
            return found
        if (found := self._fixed_mask(name)) is not None:
            return found
        stack = [name]
        while stack:   # iterative: a long loop would exhaust the stack of a recursion
            n = stack[-1]
            if n in self._anc:
                stack.pop()
                continue
            deps = self._dep_instances(n)
            missing = [d for d in deps if d not in self._anc]
            if missing:
                stack.extend(missing)
                continue
            mask = 0
            for d in deps:
                mask |= self._anc[d] | 1 << self.index[d]
            self._anc[n] = mask
            stack.pop()
        return self._anc[name]

    def _fixed_mask(self, name: str) -> int | None:
        """``ancestor_mask`` from fixed dependencies whose masks are known (a loop's next
        iteration, once due), with the items of maps; None otherwise (the walk finds it)."""
        fixed = self._planned(name)[0]
        if fixed is None:
            return None
        anc, index, items = self._anc, self.index, self._items
        mask = 0
        for d in fixed:   # the same instances as ``_dep_instances`` gives, without the items
            if (m := anc.get(d)) is None:
                return None
            mask |= m | 1 << index[d]
            for i in items.get(d, ()):
                mask |= 1 << index[i]
        anc[name] = mask
        return mask

    def _with_items(self, name: str) -> list[str]:
        items = self._items.get(name)
        return [name, *items] if items else [name]

    def _dep_instances(self, name: str) -> list[str]:
        p = parse_instance(name)
        if p.item is not None:   # a map's item depends on what its group record does
            return self._dep_instances(group_of(p))
        g, node, out = self.graph, p.node, []
        its = self._its(name)
        if g.loop_of.get(node) == node and p.iteration >= 1:
            before = (*its[:-1], p.iteration - 1)
            for s in g.back_sources[node]:   # at the loop's own level (the graph checks it)
                out += self._with_items(self._at(s, before))
            return out
        for d, k, depth in self._after(node):
            if depth == k:
                out += self._with_items(self._at(d, its[:k]) if k else d)
            else:
                # after a loop (it waits for the loop's end): every instance of every member
                # there, not only those that lead to ``d``. The last iteration's members after
                # ``d`` ran before the loop ended, and their writes are the loop's too.
                out += self._in[(self._path[d][k], its[:k])]
        return out

    def current_deps(self, name: str, statuses: Mapping[str, NodeStatus]) -> Sequence[str] | None:
        """The instances ``name`` depends on, whose statuses decide whether it may run, or
        None while a loop it waits for from outside may still grow (a loop's instances count
        once it has ended). Asked on every step, so read from what is remembered of ``name``."""
        try:
            fixed, plan = self._deps[name]
        except KeyError:
            fixed, plan = self._planned(name)
        if fixed is not None:
            return fixed
        still_open = False
        for _, where in plan:   # every loop is asked: ``loop_ended`` remembers those that ended
            if where is not None and not self.loop_ended(where[0], where[1], statuses):
                still_open = True
        if still_open:
            return None
        return [d for members, _ in plan for d in members]

    def _planned(self, name: str) -> tuple[tuple[str, ...] | None, tuple[Plan, ...]]:
        """``name``'s dependencies as remembered (see ``_deps``). They depend on names only:
        a loop's instances seen from outside it are kept as the list that grows with it."""
        found = self._deps.get(name)
        if found is not None:
            return found
        g = self.graph
        p = parse_instance(name)
        #: the dependencies while all are fixed instances (the usual case), else None
        fixed: list[str] | None = []
        plan: list[Plan] = []
        node = p.node
        flat = self._flat(node) if p.item is None else None
        if flat is not None:   # as ``children``: the names are the node's own suffix on the others'
            fixed = list(flat.deps_at(p.iteration, g.loop_of.get(node) == node))
        elif p.item is None:   # else its group record waited for the dependencies already
            its = self._its(name) if node in self._path else ()
            if p.iteration >= 1 and g.loop_of.get(node) == node:
                before = (*its[:-1], p.iteration - 1)
                fixed = [self._at(s, before) for s in g.back_sources[node]]
            else:
                for d, k, depth in self._after(node):
                    if depth == k:
                        dep = self._at(d, its[:k]) if k else d
                        plan.append(((dep,), None))
                        if fixed is not None:
                            fixed.append(dep)
                        continue
                    loop, around = self._path[d][k], its[:k] if k else ()
                    plan.append((self._of[(d, around)], (loop, around)))
                    fixed = None
        # a plan is asked only while some dependency is not fixed (``current_deps``)
        found = self._deps[name] = (tuple(fixed), ()) if fixed is not None else (None, tuple(plan))
        return found

    def loop_ended(self, entry: str, around: tuple[int, ...], statuses: Mapping[str, NodeStatus]) -> bool:
        """Whether no instance of the loop will run any more in the iterations ``around``
        of the loops around it (nodes after it may start)."""
        where = (entry, around)
        if where in self._ended:
            return True
        for x in reversed(self._in[where]):   # the newest iteration is the likeliest to be running
            if statuses[x] not in FINISHED_NODE:
                return False
        self._ended.add(where)
        return True

    def children(self, name: str) -> list[str]:
        """Instances that may become due once ``name`` settles (a loop's next iteration
        and a map's group record are the caller's: see ``next_iteration``)."""
        g = self.graph
        if not self.dynamic:
            return list(g.children(name))
        p = parse_instance(name)
        if p.item is not None:
            return []
        node = p.node
        flat = self._flat(node)
        if flat is not None:   # the names are the node's own suffix on the others'
            suffix = name[len(node):]
            out = [c + suffix if same else c for c, same in flat.kids]
            if flat.leads_to is not None:
                nxt = f"{flat.leads_to}#{p.iteration + 1}"
                if nxt in self.index:
                    out.append(nxt)   # created before this way back settled (a branch inherited it)
            return out
        path = self._path.get(node, ())
        its = self._its(name) if path else ()
        out = []
        for c, k, depth in self._reach(node):
            if depth == k:
                out.append(self._at(c, its[:k]) if k else c)
            else:   # entering a loop from outside it
                out.append(self._seen_from(node, its, c))
        if path:
            entry = path[-1]
            if self._leads_back.get(node) == entry:
                nxt = self._at(entry, (*its[:-1], p.iteration + 1))
                if nxt in self.index:
                    out.append(nxt)   # created before this way back settled (a branch inherited it)
        return out
