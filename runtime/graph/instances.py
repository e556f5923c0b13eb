"""Names and canonical order of node instances.

Every execution of a node is an instance with a name that says which one it is:
``model`` (a node's only, or a loop's first, execution), ``model#3`` (its fourth loop
iteration), ``worker[7]`` (item 7 of a map), ``worker#2[7]`` (item 7 of the map in
iteration 2), ``step#1.2`` (iteration 2 of an inner loop, in iteration 1 of the loop
around it), ``sub/inner`` (a node of subgraph ``sub``). Names depend on the graph and on
what nodes returned, never on timing.

Instances fold their writes in a canonical order that extends the dependency order
whatever the timing: by the position of the node's block in the graph's order (a loop
is one block), then iteration (again for a loop inside it), then the node's position,
then the item index.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import NamedTuple

_NUMBER = r"(?:0|[1-9]\d*)"
_NAME = re.compile(rf"(?P<node>[^#\[\]]+)(?:#(?P<it>{_NUMBER}(?:\.{_NUMBER})*))?(?:\[(?P<item>{_NUMBER})\])?")


class InstanceName(NamedTuple):
    node: str
    iteration: int = 0                  # of the innermost loop the node is in
    item: int | None = None
    outer: tuple[int, ...] = ()         # of the loops around that one, outermost first


@lru_cache(maxsize=65536)   # hot in the scheduler; names repeat for the whole run
def parse_instance(name: str) -> InstanceName:
    m = _NAME.fullmatch(name)
    if m is None:
        return InstanceName(name)
    it, item = m.group("it"), m.group("item")
    found = int(item) if item is not None else None
    if not it:
        return InstanceName(m.group("node"), 0, found)
    if "." not in it:
        return InstanceName(m.group("node"), int(it), found) if it[0] != "0" else InstanceName(name)
    *outer, inner = (int(x) for x in it.split("."))
    if not inner and not any(outer):
        return InstanceName(name)   # not a name ``instance_name`` writes: the plain name is
    return InstanceName(m.group("node"), inner, found, tuple(outer))


def instance_name(node: str, iteration: int = 0, item: int | None = None, outer: tuple[int, ...] = ()) -> str:
    """``node#3``, ``node#1.2`` (iteration 2 of an inner loop in iteration 1 of the one
    around it) or ``node[4]``; the plain name when every iteration is 0."""
    if outer and (iteration or any(outer)):
        name = f"{node}#{'.'.join(map(str, (*outer, iteration)))}"
    else:
        name = node if not iteration else f"{node}#{iteration}"
    return name if item is None else f"{name}[{item}]"


@lru_cache(maxsize=65536)   # asked as each of a map's items is created, folded and settled
def group_of(name: InstanceName) -> str:
    """The map's group record an item belongs to (the instance itself, without its item)."""
    return instance_name(name.node, name.iteration, None, name.outer)


def iterations(name: InstanceName, depth: int) -> tuple[int, ...]:
    """The iteration of each loop around an instance, outermost first, for a node ``depth``
    loops deep (a name leaves out the leading zeros of the plain name)."""
    its = (*name.outer, name.iteration)
    return its[-depth:] if len(its) >= depth else (0,) * (depth - len(its)) + its


def base_node(name: str) -> str:
    """The graph node an instance executes."""
    if "#" not in name and "[" not in name:
        return name
    return parse_instance(name).node


InstanceKey = tuple[int, ...]


def instance_key(index: Mapping[str, int], block: Mapping[str, tuple[int, ...]], name: str) -> InstanceKey:
    """Where ``name`` folds: for each loop around its node, outermost first, (where the
    loop's block starts, its iteration); then the node's position and the item. A node in
    no loop is a block of its own at iteration 0. A map's group record (no item) comes
    before its items."""
    if "#" in name or "[" in name:
        p = parse_instance(name)
        node, item = p.node, p.item
    else:
        p, node, item = None, name, None
    pos = index.get(node, len(index))
    blocks = block.get(node)
    last = -1 if item is None else item
    if not blocks:
        return (pos, 0, pos, last)
    if len(blocks) == 1:
        return (blocks[0], p.iteration if p is not None else 0, pos, last)
    its = iterations(p, len(blocks)) if p is not None else (0,) * len(blocks)
    key: list[int] = []
    for b, it in zip(blocks, its):
        key += (b, it)
    return (*key, pos, last)


def key_at(index: Mapping[str, int], block: Mapping[str, tuple[int, ...]], node: str,
           its: tuple[int, ...]) -> InstanceKey:
    """``instance_key`` of ``node``'s instance at ``its`` (one iteration per loop around it,
    outermost first), without writing its name and parsing it again."""
    pos = index.get(node, len(index))
    blocks = block.get(node)
    if not blocks:
        return (pos, 0, pos, -1)
    key: list[int] = []
    for b, it in zip(blocks, its):
        key += (b, it)
    return (*key, pos, -1)


def loop_blocks(index: Mapping[str, int], loops: Mapping[str, Iterable[str]]) -> dict[str, tuple[int, ...]]:
    """For each node in a loop: where each loop around it starts in the order, outermost
    first (a loop's members form one block; an inner loop's members, one inside it)."""
    start = {e: min(index.get(x, 0) for x in ms) for e, ms in loops.items()}
    return {m: tuple(start[e] for e in path) for m, path in loop_paths(loops).items()}


def loop_paths(loops: Mapping[str, Iterable[str]]) -> dict[str, tuple[str, ...]]:
    """For each node in a loop: the entries of the loops around it, outermost first."""
    members = {e: list(ms) for e, ms in loops.items()}
    out: dict[str, tuple[str, ...]] = {}
    for e in sorted(members, key=lambda e: -len(members[e])):
        for m in members[e]:
            out[m] = (*out.get(m, ()), e)
    return out


def canonical_instances(index: Mapping[str, int], block: Mapping[str, tuple[int, ...]], names: Iterable[str]) -> list[str]:
    return sorted(names, key=lambda n: instance_key(index, block, n))
