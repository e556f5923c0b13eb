"""A checkpoint's node statuses made from its parent's and what changed since.

A run takes a checkpoint at nearly every step, and each holds the status of every
instance the run has. Copying them all each time would make a step of a long loop cost
in proportion to the iterations before it. ``StatusLayers`` instead keeps the parent's
statuses as they are (read-only) and the few that changed on top: made in time
proportional to the change. Every ``MAX_DEPTH`` layers the recorder takes a flat copy
again, so a lookup walks a bounded number of layers; a run with few instances copies
them flat every time (below ``FLAT_BELOW`` a copy costs less than a layer).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, ItemsView, Iterator, KeysView, Mapping, ValuesView

from .states import NodeStatus

#: layers at most between two flat copies
MAX_DEPTH = 16
#: fewer statuses than this are copied flat: copying them costs less than a layer
FLAT_BELOW = 128


class StatusLayers(Mapping[str, NodeStatus]):
    """``top`` over ``below`` (which nobody changes afterwards). Iterated, it lists
    ``below``'s nodes in their order, then those only in ``top`` in ``top``'s order."""

    __slots__ = ("tops", "base", "_flat")

    def __init__(self, below: Mapping[str, NodeStatus], top: dict[str, NodeStatus]):
        #: the layers' changes, newest first, over ``base``, the flat statuses at the bottom
        self.tops: tuple[dict[str, NodeStatus], ...]
        self.base: Mapping[str, NodeStatus]
        if type(below) is StatusLayers:
            self.tops, self.base = (top, *below.tops), below.base
        else:
            self.tops, self.base = (top,), below
        #: every status in one dict, once something asked for all of them (iteration, len)
        self._flat: dict[str, NodeStatus] | None = None

    @property
    def depth(self) -> int:
        return len(self.tops)

    @staticmethod
    def over(below: Mapping[str, NodeStatus], changed: Iterable[str],
             whole: Mapping[str, NodeStatus], flat_below: int = FLAT_BELOW) -> Mapping[str, NodeStatus]:
        """``whole`` (``below`` with the nodes ``changed`` since): the ``changed`` statuses
        over ``below``, or a flat copy of ``whole`` when it holds fewer than ``flat_below``
        statuses or ``below`` is ``MAX_DEPTH`` layers deep."""
        if len(whole) < flat_below or (type(below) is StatusLayers and below.depth >= MAX_DEPTH):
            return dict(whole)
        return StatusLayers(below, {n: whole[n] for n in changed})

    @staticmethod
    def read(below: Mapping[str, NodeStatus], top: dict[str, NodeStatus],
             size: int) -> tuple[Mapping[str, NodeStatus], int]:
        """``top`` over ``below`` as ``over`` makes it, for a reader of stored checkpoints, who
        knows how many statuses ``below`` holds (``size``) rather than the whole: the
        statuses, and how many they are."""
        size += sum(1 for n in top if n not in below)
        if size < FLAT_BELOW or (type(below) is StatusLayers and below.depth >= MAX_DEPTH):
            flat = dict(below.items())   # (a layer's items are its flat statuses: no lookup per node)
            flat.update(top)
            return flat, size
        return StatusLayers(below, top), size

    def __getitem__(self, node: str) -> NodeStatus:
        found = self.get(node)
        if found is None:
            raise KeyError(node)
        return found

    def get(self, node: str, default: NodeStatus | None = None) -> NodeStatus | None:  # type: ignore[override]
        for top in self.tops:
            found = top.get(node)
            if found is not None:
                return found
        return self.base.get(node, default)

    def __contains__(self, node: object) -> bool:
        return any(node in top for top in self.tops) or node in self.base

    def _all(self) -> dict[str, NodeStatus]:
        if self._flat is None:
            flat = dict(self.base)
            for top in reversed(self.tops):
                flat.update(top)
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
