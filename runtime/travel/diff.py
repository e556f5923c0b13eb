"""Field-level diffs between two JSON-like values (dict, list, str, int, float, bool, None).

A :class:`Change` says what happened at one path into the value: ``("items", 3, "price")``
was ``added``, ``removed`` or ``changed`` (``()`` is the whole value). ``diff(a, b)`` lists
the changes that turn ``a`` into ``b`` and ``apply(a, changes)`` replays them, so
``apply(a, diff(a, b)) == b``.

Dicts are compared key by key. Lists are compared index by index: items at the same index
are diffed, then the tail of the longer list is added or removed. Agent state mostly grows
by appending, which this reports as one ``added`` change per new item, and it stays linear;
a longest-common-subsequence diff would spot insertions in the middle but is quadratic in
the list length.

Equality is JSON equality: ``1 == 1.0``, but ``True`` is not ``1`` (a bool never equals a
number, at any depth). Only plain ``dict`` and ``list`` are containers; any other value is
compared as a whole with ``==`` and never copied (NaN, not being JSON, always differs from
itself unless it is the same object). Walks are iterative, so deeply nested values do not
hit the recursion limit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..core.jsonvalues import json_equal

__all__ = ["Change", "apply", "diff", "summary"]

Path = tuple[str | int, ...]
OPS = ("added", "removed", "changed")


@dataclass(frozen=True, slots=True)
class Change:
    """One difference at ``path``. Values are references into the diffed inputs, not copies."""

    path: Path
    op: str  # "added" | "removed" | "changed"
    old: Any = None  # None for "added"
    new: Any = None  # None for "removed"

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"unknown change op {self.op!r}; expected one of {OPS}")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": list(self.path), "op": self.op}
        if self.op != "added":
            out["old"] = self.old
        if self.op != "removed":
            out["new"] = self.new
        return out

    def dotted(self) -> str:
        """``items[3].price``; keys that would be ambiguous are quoted: ``a["x.y"]``."""
        parts: list[str] = []
        for key in self.path:
            if isinstance(key, str):
                if key and not any(c in key for c in '.[]"'):
                    parts.append(f".{key}" if parts else key)
                else:
                    parts.append(f"[{json.dumps(key)}]")
            else:
                parts.append(f"[{key!r}]")
        return "".join(parts) or "(root)"


def diff(a: Any, b: Any) -> list[Change]:
    """The changes that turn ``a`` into ``b``; ``[]`` when they are equal.

    Order is deterministic and depth-first: a dict's keys of ``a`` in order (changed or
    removed), then the keys only in ``b`` in order; a list's common prefix by index, then
    its added items in ascending index order, or its removed items from the highest index
    down (so that ``apply`` can delete them one by one without shifting the rest).
    """
    if json_equal(a, b):
        return []
    changes: list[Change] = []
    # Entries are finished changes or (path, x, y) pairs already known to differ; children
    # are pushed in reverse so that popping yields them in order.
    stack: list[Change | tuple[Path, Any, Any]] = [((), a, b)]
    while stack:
        item = stack.pop()
        if isinstance(item, Change):
            changes.append(item)
            continue
        path, x, y = item
        todo: list[Change | tuple[Path, Any, Any]] = []
        if type(x) is dict and type(y) is dict:
            for key, old in x.items():
                if key not in y:
                    todo.append(Change((*path, key), "removed", old=old))
                elif not json_equal(old, y[key]):
                    todo.append(((*path, key), old, y[key]))
            todo.extend(Change((*path, key), "added", new=new)
                        for key, new in y.items() if key not in x)
        elif type(x) is list and type(y) is list:
            common = min(len(x), len(y))
            for i in range(common):
                old, new = x[i], y[i]
                if old is not new and not json_equal(old, new):
                    todo.append(((*path, i), old, new))
            todo.extend(Change((*path, i), "added", new=y[i]) for i in range(common, len(y)))
            todo.extend(Change((*path, i), "removed", old=x[i])
                        for i in range(len(x) - 1, common - 1, -1))
        else:
            todo.append(Change(path, "changed", old=x, new=y))
        stack.extend(reversed(todo))
    return changes


def apply(a: Any, changes: list[Change]) -> Any:
    """A new value: ``a`` with ``changes`` applied in order. ``a`` is not modified.

    Containers on the changed paths are copied and inserted values are deep-copied, so the
    result shares no changed container with ``a`` or with the changes; untouched subtrees
    are shared with ``a`` (copying them would make a one-item change cost the whole value).
    Old values are not checked. A change that does not fit raises ``ValueError``.
    """
    result = a
    # Containers this call created, by id: safe to change in place. Holding them keeps
    # their ids from being reused by other objects.
    owned: dict[int, Any] = {}

    def own(container: Any, change: Change) -> Any:
        if id(container) in owned:
            return container
        if type(container) is dict:
            copied: Any = dict(container)
        elif type(container) is list:
            copied = list(container)
        else:
            raise ValueError(f"cannot apply {change.dotted()}: {type(container).__name__} "
                             "on the path is not a dict or list")
        owned[id(copied)] = copied
        return copied

    for change in changes:
        if not change.path:
            if change.op != "changed":
                raise ValueError(f"cannot apply {change.op!r} to the root; only 'changed'")
            result = _deep_copy(change.new)
            if type(result) is dict or type(result) is list:
                owned[id(result)] = result
            continue
        result = parent = own(result, change)
        try:
            for key in change.path[:-1]:
                child = own(parent[_key(parent, key)], change)
                parent[key] = child
                parent = child
            _apply_last(parent, change)
        except (KeyError, IndexError, TypeError) as exc:
            raise ValueError(f"cannot apply {change.op} at {change.dotted()}: "
                             f"{type(exc).__name__}: {exc}") from exc
    return result


def summary(changes: list[Change]) -> dict[str, int]:
    """How many changes of each op: ``{"added": n, "removed": n, "changed": n}``."""
    counts = dict.fromkeys(OPS, 0)
    for change in changes:
        counts[change.op] += 1
    return counts


def _apply_last(parent: Any, change: Change) -> None:
    key = change.path[-1]
    if change.op == "removed":
        del parent[_key(parent, key)]
    elif change.op == "added" and type(parent) is list:
        parent.insert(_index(parent, key, extra=1), _deep_copy(change.new))  # len: appends
    else:
        parent[_key(parent, key)] = _deep_copy(change.new)


def _key(parent: Any, key: str | int) -> str | int:
    """``key``, checked to be an existing index when ``parent`` is a list."""
    return _index(parent, key) if type(parent) is list else key


def _index(items: list[Any], key: str | int, extra: int = 0) -> int:
    """``key`` as an index into ``items`` (``extra=1`` allows one past the end); no negatives."""
    if type(key) is not int or not 0 <= key < len(items) + extra:
        raise IndexError(f"index {key!r} out of range for a list of {len(items)}")
    return key


def _deep_copy(value: Any) -> Any:
    """A copy of the dicts and lists in ``value`` (iterative: any depth; other values shared)."""
    if type(value) is not dict and type(value) is not list:
        return value
    root: Any = dict(value) if type(value) is dict else list(value)
    stack = [root]
    while stack:
        container = stack.pop()
        keys = container.keys() if type(container) is dict else range(len(container))
        for key in keys:
            item = container[key]
            if type(item) is dict or type(item) is list:
                # Replacing the value of an existing key does not disturb dict iteration.
                copied = dict(item) if type(item) is dict else list(item)
                container[key] = copied
                stack.append(copied)
    return root
