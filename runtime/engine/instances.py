"""The node instances of one run: which exist, where each folds, what each waits for.

Pure: no I/O. A static graph has one instance per node and everything here reads
the compiled graph. A graph with loops or maps grows as the run goes: a loop's next
iteration is created once the nodes that lead back to its entry have settled and one
of them succeeded; a map's items once its worker is due. Instances are kept in
canonical order (``graph.key``), so a fold over any set of them is the same whatever
order they were created or finished in; inserting shifts the positions after the
insertion point, and whoever keeps positions as bitmasks registers to be told.
"""

from __future__ import annotations

import weakref
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence

from ..core.states import FINISHED_NODE, NodeStatus
from ..graph import ExecutableGraph, NodeSpec
from ..graph.instances import InstanceKey, base_node, group_of, instance_name, iterations, key_at, parse_instance
from .placement import Placement

#: a dependency as remembered: its instances (a live list when they may still grow) and
#: the loop whose end they wait for, None when they are fixed
_Plan = tuple[Sequence[str], tuple[str, tuple[int, ...]] | None]
#: a map item's remembered dependencies: none of its own (its group record waited for them)
_NO_DEPS: tuple[tuple[str, ...], tuple[_Plan, ...]] = ((), ())


def shift_mask(mask: int, at: int, count: int) -> int:
    """``mask`` with every position >= ``at`` moved up by ``count``."""
    high = mask >> at
    if not high:
        return mask
    return (mask & ((1 << at) - 1)) | (high << (at + count))


def as_instances(graph: ExecutableGraph | Instances) -> Instances:
    """A static view of a compiled graph where instances are expected."""
    return graph if isinstance(graph, Instances) else Instances(graph, ())


class Instances:
    def __init__(self, graph: ExecutableGraph, names: Iterable[str]):
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
        self._deps: dict[str, tuple[tuple[str, ...] | None, tuple[_Plan, ...]]] = {}
        g = graph
        #: a loop's members (those of loops inside it too) in canonical order, and the nodes
        #: after it that wait for its end
        self._members = {e: tuple(sorted(ms, key=g.index.__getitem__)) for e, ms in g.loops.items()}
        self._exits = {e: [c for m in ms for c in g.children(m) if c not in ms] for e, ms in g.loops.items()}
        #: a node that leads back to the entry of the loop it is in -> that entry (asked as
        #: each instance settles: most lead nowhere)
        self._leads_back = {s: e for e, srcs in g.back_sources.items() for s in srcs if g.loop_of.get(s) == e}
        self._where = Placement(g, self._exits)
        self._its, self._at, self._common = self._where.its, self._where.at, self._where.common
        self._after, self._reach = self._where.after, self._where.reach
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

    def _note(self, name: str) -> None:
        p = parse_instance(name)
        node, item = p.node, p.item
        if item is None:
            path = self._path.get(node)
            if not path:
                self._of.setdefault((node, ()), []).append(name)
                return
            its = self._its(name)
            for k in range(len(path)):   # seen from outside each loop around it
                self._of.setdefault((node, its[:k]), []).append(name)
        else:
            self._items.setdefault(group_of(p), []).append(name)
            path = self._path.get(node)
            if not path:
                return
            its = iterations(p, len(path))   # an item's own, not kept: items are many
        for k, entry in enumerate(path):
            self._in.setdefault((entry, its[:k]), []).append(name)

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

    def _planned(self, name: str) -> tuple[tuple[str, ...] | None, tuple[_Plan, ...]]:
        """``name``'s dependencies as remembered (see ``_deps``). They depend on names only:
        a loop's instances seen from outside it are kept as the list that grows with it."""
        found = self._deps.get(name)
        if found is not None:
            return found
        g = self.graph
        p = parse_instance(name)
        plan: list[_Plan] = []
        if p.item is None:   # else its group record waited for the dependencies already
            node = p.node
            its = self._its(name) if node in self._path else ()
            if p.iteration >= 1 and g.loop_of.get(node) == node:
                before = (*its[:-1], p.iteration - 1)
                plan = [((self._at(s, before),), None) for s in g.back_sources[node]]
            else:
                for d, k, depth in self._after(node):
                    if depth == k:
                        plan.append(((self._at(d, its[:k]) if k else d,), None))
                        continue
                    loop, around = self._path[d][k], its[:k] if k else ()
                    plan.append((self._of[(d, around)], (loop, around)))
        fixed = None if any(where is not None for _, where in plan) else tuple(
            d for members, _ in plan for d in members)
        found = self._deps[name] = (fixed, tuple(plan))
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

    # ------------------------------------------------------------------ growing

    def next_iteration(self, name: str, statuses: Mapping[str, NodeStatus]) -> tuple[str, tuple[int, ...]] | None:
        """When settling ``name`` completes an iteration that leads back to its loop's
        entry: (the loop's entry, the next iteration's numbers, one per loop around it,
        outermost first). None otherwise."""
        if not self.dynamic:
            return None
        p = parse_instance(name)
        entry = self._leads_back.get(p.node)
        if entry is None or p.item is not None:
            return None
        its = self._its(name)
        succeeded = False
        for s in self.graph.back_sources[entry]:
            status = statuses[self._at(s, its)]
            if status not in FINISHED_NODE:
                return None
            succeeded = succeeded or status == NodeStatus.SUCCEEDED
        if not succeeded:
            return None   # every way back was skipped: the loop ends here
        nxt = (*its[:-1], its[-1] + 1)
        if self._at(entry, nxt) in self.index:
            return None
        return entry, nxt

    def add_iteration(self, entry: str, its: tuple[int, ...]) -> list[str]:
        """Create the members of a loop's iteration ``its`` (with the iterations of the loops
        around it) that do not exist yet, loops inside it at their first iteration; returns
        the new names."""
        new, keys = [], []
        index, block = self.graph.index, self.graph.block
        for m in self._members[entry]:
            deeper = len(self._path[m]) - len(its)
            at = its + (0,) * deeper if deeper else its
            n = self._at(m, at)
            if n not in self.index:
                new.append(n)
                keys.append(key_at(index, block, m, at))
        return self._insert(new, ordered=True, keys=keys)

    def complete_iterations(self) -> list[str]:
        """Create the members an existing loop iteration lacks; returns the new names. A run
        of another graph version (a replay of new code from inside a loop) may have a
        member the iterations it inherited never had."""
        if not self.dynamic:
            return []
        return [n for (node, around), insts in list(self._of.items())
                if node in self._members and len(around) == len(self._path[node]) - 1   # each instance once
                for inst in list(insts) for n in self.add_iteration(node, self._its(inst))]

    def add_items(self, group: str, count: int) -> list[str]:
        """Create a map's items ``0..count-1`` that do not exist yet; returns the new ones.
        What each item's dependencies and ancestors are is its group record's (see
        ``_dep_instances``): set here for all of them at once, not asked item by item."""
        p = parse_instance(group)
        index = self.index
        # in item order, which is canonical order: no sort needed
        found = [(n, i) for i in range(count) if (n := instance_name(p.node, p.iteration, i, p.outer)) not in index]
        if not found:
            return []
        head = self.graph.key(group)[:-1]   # an item's key is its group record's, with the item
        new = self._insert([n for n, _ in found], ordered=True, keys=[(*head, i) for _, i in found], group=group)
        anc = self._anc.get(group)
        for n in new:
            self._deps[n] = _NO_DEPS
            if anc is not None:
                self._anc[n] = anc
        return new

    def _insert(self, names: list[str], ordered: bool = False, keys: list[InstanceKey] | None = None,
                group: str | None = None) -> list[str]:
        """Give ``names`` their positions (``keys``: theirs, when the caller knows them;
        ``group``: the map whose items they all are)."""
        if not names:
            return []
        if not ordered:
            names = self.graph.canonical(names)   # new: they have no position yet
        if keys is None:
            keys = [self.graph.key(n) for n in names]
        at = bisect_left(self._keys, keys[0])
        if at < len(self._keys) and self._keys[at] < keys[-1]:
            # some of a map's items exist already (taken over after a crash): one at a time
            for n in names:
                self._insert([n])
            return names
        count = len(names)
        assert isinstance(self.order, list)
        self.order[at:at] = names
        self._keys[at:at] = keys
        if at + count < len(self.order):
            for i in range(at, len(self.order)):
                self.index[self.order[i]] = i   # type: ignore[index]
            # an instance's ancestors come before it: only masks of instances after ``at`` move
            for n in self.order[at + count:]:
                m = self._anc.get(n)
                if m is not None:
                    self._anc[n] = shift_mask(m, at, count)
            for ref in self._shift:
                listener = ref()
                if listener is not None:
                    listener(at, count)
        else:
            for i, n in enumerate(names, at):
                self.index[n] = i   # type: ignore[index]
        if group is not None:
            self._note_items(group, names)
            return names
        for n in names:
            self._note(n)
        p = parse_instance(names[0])
        if p.item is not None:
            # positions are in canonical order: sorting by them needs no key computed again
            self._items[group_of(p)].sort(key=self.index.__getitem__)
        return names

    def _note_items(self, group: str, names: list[str]) -> None:
        """``_note`` for new items of one map, in item order: they share where they are."""
        items = self._items.setdefault(group, [])
        if items:   # some were there already (taken over after a crash): kept in order
            items += names
            items.sort(key=self.index.__getitem__)
        else:
            items += names
        path = self._path.get(parse_instance(group).node)
        if path:
            its = self._its(group)
            for k, entry in enumerate(path):
                self._in.setdefault((entry, its[:k]), []).extend(names)
