"""How a run's node instances grow: a loop's next iteration, a map's items.

Pure, mixed into ``Instances`` (``instances.py`` reads them): new instances get their
positions in canonical order, and everything kept by position (masks, the positions
of later instances, whoever registered with ``on_shift``) moves up past them.
"""

from __future__ import annotations

import weakref
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence

from ..core.states import FINISHED_NODE, NodeStatus
from ..graph import ExecutableGraph
from ..graph.instances import InstanceKey, group_of, instance_name, iterations, key_at, parse_instance
from .placement import Flat

#: a dependency as remembered: its instances (a live list when they may still grow) and
#: the loop whose end they wait for, None when they are fixed
Plan = tuple[Sequence[str], tuple[str, tuple[int, ...]] | None]
#: a map item's remembered dependencies: none of its own (its group record waited for them)
NO_DEPS: tuple[tuple[str, ...], tuple[Plan, ...]] = ((), ())


def shift_mask(mask: int, at: int, count: int) -> int:
    """``mask`` with every position >= ``at`` moved up by ``count``."""
    high = mask >> at
    if not high:
        return mask
    return (mask & ((1 << at) - 1)) | (high << (at + count))


class InstanceGrowth:
    graph: ExecutableGraph
    dynamic: bool
    order: list[str] | tuple[str, ...]
    index: Mapping[str, int]
    _keys: list[InstanceKey]
    _anc: dict[str, int]
    _shift: list[weakref.WeakMethod[Callable[[int, int], None]]]
    _path: Mapping[str, tuple[str, ...]]
    _of: dict[tuple[str, tuple[int, ...]], list[str]]
    _items: dict[str, list[str]]
    _in: dict[tuple[str, tuple[int, ...]], list[str]]
    _deps: dict[str, tuple[tuple[str, ...] | None, tuple[Plan, ...]]]
    _members: Mapping[str, tuple[str, ...]]
    _leads_back: Mapping[str, str]
    _its: Callable[[str], tuple[int, ...]]
    _at: Callable[[str, tuple[int, ...]], str]
    _flat: Callable[[str], Flat | None]
    #: a loop with no loop inside it, in none -> its members' (name, where the loop's block
    #: starts, position), in canonical order
    _flat_loops: Mapping[str, tuple[tuple[str, int, int], ...]]

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
        nxt: tuple[int, ...]
        if self._flat(p.node) is not None:
            # the ways back are at its loop's level, so at its iteration: its own suffix
            suffix, k = name[len(p.node):], p.iteration
            back, nxt, following = [s + suffix for s in self.graph.back_sources[entry]], (k + 1,), f"{entry}#{k + 1}"
        else:
            its = self._its(name)
            back, nxt = [self._at(s, its) for s in self.graph.back_sources[entry]], (*its[:-1], its[-1] + 1)
            following = self._at(entry, nxt)
        succeeded = False
        for s in back:
            status = statuses[s]
            if status not in FINISHED_NODE:
                return None
            succeeded = succeeded or status == NodeStatus.SUCCEEDED
        if not succeeded or following in self.index:
            return None   # every way back was skipped (the loop ends here), or it exists
        return entry, nxt

    def add_iteration(self, entry: str, its: tuple[int, ...]) -> list[str]:
        """Create the members of a loop's iteration ``its`` (with the iterations of the loops
        around it) that do not exist yet, loops inside it at their first iteration; returns
        the new names."""
        flat = self._flat_loops.get(entry) if len(its) == 1 else None
        if flat is not None:
            return self._add_flat(entry, its[0], flat)
        new, keys, where = [], [], []
        index, block, path = self.graph.index, self.graph.block, self._path
        for m in self._members[entry]:
            deeper = len(path[m]) - len(its)
            at = its + (0,) * deeper if deeper else its
            n = self._at(m, at)
            if n not in self.index:
                new.append(n)
                keys.append(key_at(index, block, m, at))
                where.append((m, at))
        if not new:
            return new
        self._insert(new, keys)
        of, within = self._of, self._in
        for n, (m, at) in zip(new, where):   # ``_note``, with the iterations known
            around = path[m]
            for k in range(len(around)):
                of.setdefault((m, at[:k]), []).append(n)
                within.setdefault((around[k], at[:k]), []).append(n)
        return new

    def _add_flat(self, entry: str, k: int, members: tuple[tuple[str, int, int], ...]) -> list[str]:
        """``add_iteration`` of a loop around no other: each member's name is its own with
        the iteration's suffix, its key (where the loop's block starts, k, its position)."""
        suffix = f"#{k}" if k else ""
        index, made = self.index, [(m + suffix, m, (start, k, pos, -1)) for m, start, pos in members]
        made = [x for x in made if x[0] not in index]
        new = [n for n, _, _ in made]
        if new:
            self._insert(new, [key for _, _, key in made])
            of, within, deps = self._of, self._in.setdefault((entry, ()), []), self._deps
            for n, m, _ in made:   # ``_note``, with what the name says known
                of.setdefault((m, ()), []).append(n)
                within.append(n)
                # what ``_planned`` would remember of it, from the shape it already has
                if (flat := self._flat(m)) is not None:
                    deps[n] = (flat.deps_at(k, m == entry), ())
        return new

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
        new = [n for n, _ in found]
        self._insert(new, [(*head, i) for _, i in found])
        self._note_items(group, new)
        anc = self._anc.get(group)
        for n in new:
            self._deps[n] = NO_DEPS
            if anc is not None:
                self._anc[n] = anc
        return new

    def _insert(self, names: list[str], keys: list[InstanceKey]) -> None:
        """Give ``names`` (in canonical order, new) their positions: ``keys`` are theirs.
        The caller notes what they are (``_note``)."""
        at = bisect_left(self._keys, keys[0])
        if at < len(self._keys) and self._keys[at] < keys[-1]:
            # some of a map's items exist already (taken over after a crash): one at a time
            for n, key in zip(names, keys):
                self._insert([n], [key])
            return
        count = len(names)
        assert isinstance(self.order, list)
        self.order[at:at] = names
        self._keys[at:at] = keys
        index = self.index
        if at + count < len(self.order):
            order = self.order
            for i in range(at, len(order)):
                index[order[i]] = i   # type: ignore[index]
            # an instance's ancestors come before it: only masks of instances after ``at`` move
            anc = self._anc
            for n in order[at + count:]:
                m = anc.get(n)
                if m is not None:
                    anc[n] = shift_mask(m, at, count)
            for ref in self._shift:
                listener = ref()
                if listener is not None:
                    listener(at, count)
        else:
            for i, n in enumerate(names, at):
                index[n] = i   # type: ignore[index]

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
