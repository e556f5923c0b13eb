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

from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence

from ..core.states import FINISHED_NODE, NodeStatus
from ..graph import ExecutableGraph, NodeSpec
from ..graph.instances import base_node, instance_name, parse_instance

#: a dependency as the scheduler weighs it: the instances whose statuses count, and
#: whether more may still appear (a loop seen from outside it that has not ended)
DepGroup = tuple[Sequence[str], bool]


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
        self._shift: list[Callable[[int, int], None]] = []
        if not self.dynamic:
            self.order: list[str] | tuple[str, ...] = graph.order
            self.index: Mapping[str, int] = graph.index
            return
        self.order = graph.canonical(list(dict.fromkeys([*graph.order, *names])))
        self.index = {n: i for i, n in enumerate(self.order)}
        self._keys = [graph.key(n) for n in self.order]
        self._anc: dict[str, int] = {}
        self._of: dict[str, list[str]] = {}       # node -> its instances (a map's group records), in order
        self._items: dict[str, list[str]] = {}    # a map's group record -> its items, in order
        self._ended: set[str] = set()             # loops (by entry) known to have ended
        #: an instance's dependencies when they are fixed instances (None: it waits on a
        #: loop from outside it, whose instances are still growing): asked on every step
        self._fixed: dict[str, tuple[str, ...] | None] = {}
        g = graph
        #: a loop's members in canonical order, and the nodes after it that wait for its end
        self._members = {e: tuple(sorted(ms, key=g.index.__getitem__)) for e, ms in g.loops.items()}
        self._exits = {e: [c for m in ms for c in g.children(m) if g.loop_of.get(c) != e]
                       for e, ms in g.loops.items()}
        for n in self.order:
            self._note(n)

    def _note(self, name: str) -> None:
        node, it, item = parse_instance(name)
        if item is None:
            self._of.setdefault(node, []).append(name)
        else:
            self._items.setdefault(instance_name(node, it), []).append(name)

    def on_shift(self, listener: Callable[[int, int], None]) -> None:
        self._shift.append(listener)

    # ------------------------------------------------------------------ reading

    def spec(self, name: str) -> NodeSpec:
        return self.graph.nodes[base_node(name)]

    def key(self, name: str) -> tuple[int, int, int, int]:
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

    def latest(self, node: str) -> str:
        """The newest instance of ``node`` (its last loop iteration)."""
        return self._of[node][-1] if self.dynamic else node

    def ancestor_mask(self, name: str) -> int:
        """Instances ``name`` folds the writes of, as a bitmask over positions. Asked once
        the instance is due, when everything it depends on has settled."""
        if not self.dynamic:
            return self.graph.ancestor_mask(name)
        found = self._anc.get(name)
        if found is not None:
            return found
        node, it, item = parse_instance(name)
        if item is not None:   # a map's items fold what their group record folds (see _dep_instances)
            found = self._anc[name] = self.ancestor_mask(instance_name(node, it))
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

    def _with_items(self, name: str) -> list[str]:
        items = self._items.get(name)
        return [name, *items] if items else [name]

    def _dep_instances(self, name: str) -> list[str]:
        node, it, item = parse_instance(name)
        if item is not None:   # a map's item depends on what its group record does
            return self._dep_instances(instance_name(node, it))
        g, out = self.graph, []
        entry = g.loop_of.get(node)
        if entry == node and it >= 1:
            for s in g.back_sources[node]:
                out += self._with_items(instance_name(s, it - 1))
            return out
        for d in g.forward_deps(node):
            loop = g.loop_of.get(d)
            if entry is not None and loop == entry:
                out += self._with_items(instance_name(d, it))
            elif loop is not None:
                # after a loop (it waits for the loop's end): every iteration of every
                # member, not only those that lead to ``d``. The last iteration's members
                # after ``d`` ran before the loop ended, and their writes are the loop's too.
                for m in self._members[loop]:
                    for inst in self._of.get(m, ()):
                        out += self._with_items(inst)
            else:
                for inst in self._of.get(d, ()):
                    out += self._with_items(inst)
        return out

    def fixed_deps(self, name: str) -> tuple[str, ...] | None:
        """The instances ``name`` depends on, when no more can appear (see ``dep_groups``)."""
        try:
            return self._fixed[name]
        except KeyError:
            pass
        # dep_groups reads statuses only for a loop seen from outside, the case excluded here
        groups = self.dep_groups(name, {}) if not self._waits_on_loop(name) else None
        fixed = None if groups is None else tuple(d for members, _ in groups for d in members)
        self._fixed[name] = fixed
        return fixed

    def _waits_on_loop(self, name: str) -> bool:
        """Whether ``name`` depends on a loop from outside it."""
        g = self.graph
        node, it, item = parse_instance(name)
        if item is not None:
            return False
        entry = g.loop_of.get(node)
        if entry == node and it >= 1:
            return False
        return any(g.loop_of.get(d) not in (None, entry) for d in g.forward_deps(node))

    def dep_groups(self, name: str, statuses: Mapping[str, NodeStatus]) -> list[DepGroup]:
        g = self.graph
        if not self.dynamic:
            return [((d,), False) for d in g.nodes[name].after]
        node, it, item = parse_instance(name)
        if item is not None:
            return []   # its group record waited for the dependencies already
        entry = g.loop_of.get(node)
        if entry == node and it >= 1:
            return [((instance_name(s, it - 1),), False) for s in g.back_sources[node]]
        out: list[DepGroup] = []
        for d in g.forward_deps(node):
            loop = g.loop_of.get(d)
            if loop is None:
                out.append(((d,), False))
            elif loop == entry:
                out.append(((instance_name(d, it),), False))
            else:
                out.append((self._of[d], not self.loop_ended(loop, statuses)))
        return out

    def loop_ended(self, entry: str, statuses: Mapping[str, NodeStatus]) -> bool:
        """Whether no instance of the loop will run any more (nodes after it may start)."""
        if entry in self._ended:
            return True
        members = self.graph.loops[entry]
        for m in members:   # the newest iteration first: it is the likeliest to be running
            if any(statuses[x] not in FINISHED_NODE for x in self._with_items(self._of[m][-1])):
                return False
        for m in members:
            for inst in reversed(self._of.get(m, ())):   # the newest iteration is the likeliest to run
                if any(statuses[x] not in FINISHED_NODE for x in self._with_items(inst)):
                    return False
        self._ended.add(entry)
        return True

    def children(self, name: str) -> list[str]:
        """Instances that may become due once ``name`` settles (a loop's next iteration
        and a map's group record are the caller's: see ``next_iteration``)."""
        g = self.graph
        if not self.dynamic:
            return list(g.children(name))
        node, it, item = parse_instance(name)
        if item is not None:
            return []
        entry, out = g.loop_of.get(node), []
        for c in g.children(node):
            loop = g.loop_of.get(c)
            if entry is not None and loop == entry:
                out.append(instance_name(c, it))
            elif loop is not None:
                out.append(self._of[c][-1])
            else:
                out.append(c)
        if entry is not None:   # nodes after the loop wait for it to end, whichever member ends last
            out += self._exits[entry]
            if node in g.back_sources[entry] and (nxt := instance_name(entry, it + 1)) in self.index:
                out.append(nxt)   # created before this way back settled (a branch inherited it)
        return out

    # ------------------------------------------------------------------ growing

    def next_iteration(self, name: str, statuses: Mapping[str, NodeStatus]) -> tuple[str, int] | None:
        """When settling ``name`` completes an iteration that leads back to its loop's
        entry: (the loop's entry, the next iteration's number). None otherwise."""
        if not self.dynamic:
            return None
        node, it, item = parse_instance(name)
        entry = self.graph.loop_of.get(node)
        if item is not None or entry is None or node not in self.graph.back_sources[entry]:
            return None
        sources = [instance_name(s, it) for s in self.graph.back_sources[entry]]
        if any(statuses[s] not in FINISHED_NODE for s in sources):
            return None
        if not any(statuses[s] == NodeStatus.SUCCEEDED for s in sources):
            return None   # every way back was skipped: the loop ends here
        nxt = instance_name(entry, it + 1)
        if nxt in self.index:
            return None
        return entry, it + 1

    def add_iteration(self, entry: str, iteration: int) -> list[str]:
        """Create the members of a loop's iteration that do not exist yet; returns the new names."""
        return self._insert([n for m in self._members[entry] if (n := instance_name(m, iteration)) not in self.index],
                            ordered=True)

    def complete_iterations(self) -> list[str]:
        """Create the members an existing loop iteration lacks; returns the new names. A run
        of another graph version (a replay of new code from inside a loop) may have a
        member the iterations it inherited never had."""
        if not self.dynamic:
            return []
        return [n for entry in self._members for inst in list(self._of.get(entry, ()))
                for n in self.add_iteration(entry, parse_instance(inst).iteration)]

    def add_items(self, group: str, count: int) -> list[str]:
        """Create a map's items ``0..count-1`` that do not exist yet; returns the new ones."""
        node, it, _ = parse_instance(group)
        return self._insert([n for i in range(count) if (n := instance_name(node, it, i)) not in self.index])

    def _insert(self, names: list[str], ordered: bool = False) -> list[str]:
        if not names:
            return []
        if not ordered:
            names = self.graph.canonical(names)   # new: they have no position yet
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
            for listener in self._shift:
                listener(at, count)
        else:
            for i, n in enumerate(names, at):
                self.index[n] = i   # type: ignore[index]
        for n in names:
            self._note(n)
        node, it, item = parse_instance(names[0])
        if item is not None:
            self._items[instance_name(node, it)].sort(key=self.graph.key)
        return names
