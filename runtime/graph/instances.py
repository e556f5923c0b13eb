"""Names and canonical order of node instances.

Every execution of a node is an instance with a name that says which one it is:
``model`` (a node's only, or a loop's first, execution), ``model#3`` (its fourth loop
iteration), ``worker[7]`` (item 7 of a map), ``worker#2[7]`` (item 7 of the map in
iteration 2), ``sub/inner`` (a node of subgraph ``sub``). Names depend on the graph and
on what nodes returned, never on timing.

Instances fold their writes in a canonical order that extends the dependency order
whatever the timing: by the position of the node's block in the graph's order (a loop
is one block), then iteration, then the node's position, then the item index.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import NamedTuple

_NAME = re.compile(r"(?P<node>[^#\[\]]+)(?:#(?P<it>[1-9]\d*))?(?:\[(?P<item>\d+)\])?")


class InstanceName(NamedTuple):
    node: str
    iteration: int = 0
    item: int | None = None


@lru_cache(maxsize=65536)   # hot in the scheduler; names repeat for the whole run
def parse_instance(name: str) -> InstanceName:
    m = _NAME.fullmatch(name)
    if m is None:
        return InstanceName(name)
    it, item = m.group("it"), m.group("item")
    return InstanceName(m.group("node"), int(it) if it else 0, int(item) if item is not None else None)


def instance_name(node: str, iteration: int = 0, item: int | None = None) -> str:
    name = node if not iteration else f"{node}#{iteration}"
    return name if item is None else f"{name}[{item}]"


def base_node(name: str) -> str:
    """The graph node an instance executes."""
    if "#" not in name and "[" not in name:
        return name
    return parse_instance(name).node


InstanceKey = tuple[int, int, int, int]


def instance_key(index: Mapping[str, int], block: Mapping[str, int], name: str) -> InstanceKey:
    """Where ``name`` folds: (block position, iteration, node position, item); a map's
    group record (no item) comes before its items."""
    node, iteration, item = parse_instance(name) if ("#" in name or "[" in name) else (name, 0, None)
    pos = index.get(node, len(index))
    return (block.get(node, pos), iteration, pos, -1 if item is None else item)


def canonical_instances(index: Mapping[str, int], block: Mapping[str, int], names: Iterable[str]) -> list[str]:
    return sorted(names, key=lambda n: instance_key(index, block, n))
