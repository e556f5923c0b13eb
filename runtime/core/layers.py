"""A checkpoint's node statuses made from its parent's and what changed since.

A run takes a checkpoint at nearly every step, and each holds the status of every
instance the run has. Copying them all each time would make a step of a long loop cost
in proportion to the iterations before it. ``StatusLayers`` instead keeps the parent's
statuses as they are (read-only) and the few that changed on top: made in time
proportional to the change. Every ``MAX_DEPTH`` layers the recorder takes a flat copy
again, so a lookup walks a bounded number of layers.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView

from .states import NodeStatus

#: layers at most between two flat copies
MAX_DEPTH = 16


class StatusLayers(Mapping[str, NodeStatus]):
    """``below`` (never changed afterwards) with ``top`` over it. Iterated, it lists
    ``below``'s nodes in their order, then those only in ``top`` in ``top``'s order."""

    __slots__ = ("_below", "_top", "depth", "_flat")

    def __init__(self, below: Mapping[str, NodeStatus], top: dict[str, NodeStatus]):
        self._below = below
        self._top = top
        self.depth: int = below.depth + 1 if isinstance(below, StatusLayers) else 1
        #: every status in one dict, once something asked for all of them (iteration, len)
        self._flat: dict[str, NodeStatus] | None = None

    @staticmethod
    def over(below: Mapping[str, NodeStatus], top: dict[str, NodeStatus],
             whole: Mapping[str, NodeStatus]) -> Mapping[str, NodeStatus]:
        """``top`` over ``below``, or a flat copy of ``whole`` (what the two make) once
        ``below`` is ``MAX_DEPTH`` layers deep."""
        if isinstance(below, StatusLayers) and below.depth >= MAX_DEPTH:
            return dict(whole)
        return StatusLayers(below, top)

    def __getitem__(self, node: str) -> NodeStatus:
        found = self._top.get(node)
        return found if found is not None else self._below[node]

    def get(self, node: str, default: NodeStatus | None = None) -> NodeStatus | None:  # type: ignore[override]
        found = self._top.get(node)
        return found if found is not None else self._below.get(node, default)

    def __contains__(self, node: object) -> bool:
        return node in self._top or node in self._below

    def _all(self) -> dict[str, NodeStatus]:
        if self._flat is None:
            flat = dict(self._below)
            flat.update(self._top)
            self._flat = flat
        return self._flat

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def keys(self) -> KeysView[str]:
        return self._all().keys()

    def items(self) -> ItemsView[str, NodeStatus]:
        return self._all().items()

    def values(self) -> ValuesView[NodeStatus]:
        return self._all().values()

    def __len__(self) -> int:
        return len(self._all())

    def __repr__(self) -> str:
        return repr(self._all())
