"""The state a run's nodes see, folded from their ancestors' writes, and the checks
every write passes before it is kept.

Pure: no I/O. Writes are indexed by the graph's canonical positions as bitmasks,
so "the completed ancestors of this node" and "an unordered writer of this field"
are a few integer operations, however many nodes the run has.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import from_json, to_json

from ..core.errors import InvalidWrites, WriteConflict
from ..core.jsonvalues import JSON
from ..graph import ExecutableGraph
from ..graph.reducers import fold


class StateFold:
    """The run input plus the writes of its succeeded nodes, folded in canonical order."""

    def __init__(self, graph: ExecutableGraph, run_input: Mapping[str, JSON], writes: Mapping[str, JSON]):
        self.graph = graph
        self.run_input = run_input
        self.writes: dict[str, JSON] = {}
        self._done_mask = 0
        #: per last-value field, the completed nodes that wrote it (a bitmask over canonical positions)
        self._field_writers: dict[str, int] = {}
        self._cache: dict[str, JSON] = {}
        self._cache_mask = -1     # which succeeded nodes the cache folds (-1: none cached)
        for n, w in writes.items():
            self.add(n, w)

    def add(self, node: str, writes: Mapping[str, JSON]) -> None:
        """Keep a succeeded node's (checked) writes."""
        self.writes[node] = writes
        bit = 1 << self.graph.index[node]
        self._done_mask |= bit
        for field in writes:
            if self.graph.reducer(field).conflicts:
                self._field_writers[field] = self._field_writers.get(field, 0) | bit

    def input_state(self, node: str) -> dict[str, JSON]:
        """Run input folded with the node's succeeded ancestors' writes, canonical order."""
        return self._fold_mask(self.graph.ancestor_mask(node) & self._done_mask)

    def input_model(self, node: str) -> BaseModel:
        # built from JSON, so nothing a node changes in place reaches other nodes or the store
        return self.graph.state_model.model_validate_json(to_json(self.input_state(node)))

    def head_state(self) -> dict[str, JSON]:
        return self._fold_mask(self._done_mask)

    def _fold_mask(self, mask: int) -> dict[str, JSON]:
        if mask == self._cache_mask:
            return self._cache
        base, start = dict(self.run_input), 0
        cached = self._cache_mask
        # Reuse the cache when the new set extends it with nodes later in canonical order.
        if (cached >= 0 and mask & cached == cached
                and (mask ^ cached) >> cached.bit_length() << cached.bit_length() == mask ^ cached):
            base, start = self._cache, cached.bit_length()
        order, items = self.graph.order, []
        rest = mask >> start << start
        while rest:  # visit set bits only, lowest (earliest in canonical order) first
            low = rest & -rest
            name = order[low.bit_length() - 1]
            items.append((name, self.writes[name]))
            rest ^= low
        state = fold(base, items, self.graph.reducers)
        self._cache, self._cache_mask = state, mask
        return state

    # ------------------------------------------------------------------ checking writes

    def check_writes(self, node: str, value: Any) -> tuple[dict[str, JSON], int]:
        """A node's return value as the writes to keep, and their size in bytes;
        ``InvalidWrites``/``WriteConflict`` saying exactly what is wrong otherwise."""
        if value is None:
            return {}, 0
        model = self.graph.state_model
        if isinstance(value, model):
            raise InvalidWrites(f"node {node!r} returned the whole state; return a dict of only the "
                                f"fields it writes (reducers would apply every field again)")
        if isinstance(value, BaseModel):
            value = value.model_dump(exclude_unset=True)
        if not isinstance(value, Mapping):
            raise InvalidWrites(f"node {node!r} returned {type(value).__name__}; a node returns a "
                                f"dict of state fields to write, or None")
        extra_ok = model.model_config.get("extra") == "allow"
        unknown = sorted(k for k in value if k not in model.model_fields)
        if unknown and not extra_ok:
            raise InvalidWrites(f"node {node!r} wrote unknown state field(s) {', '.join(map(repr, unknown))}; "
                                f"fields are: {', '.join(model.model_fields)}")
        # a JSON round trip: the stored writes share nothing with objects the node keeps
        raw = _to_json_bytes(dict(value), node)
        writes: dict[str, JSON] = from_json(raw)
        for field in writes:
            prev = self._unordered_writer(field, node)
            if prev is not None:
                raise WriteConflict(field, prev, node)
        base = self.input_state(node)
        try:
            folded = fold(base, [(node, writes)], self.graph.reducers)
        except Exception:
            self._name_reducer_failure(node, base, writes)
            raise
        try:
            checked = model.model_validate(folded)
        except ValidationError as e:
            err = e.errors()[0]
            field = ".".join(map(str, err["loc"]))
            raise InvalidWrites(f"node {node!r} wrote an invalid value for field {field!r}: {err['msg']}") from None
        dumped = checked.model_dump(mode="json")
        for field in writes:  # store last-value writes as the model coerced them ("3" -> 3)
            if self.graph.reducer(field).conflicts and field in dumped:
                writes[field] = dumped[field]
        return writes, len(raw)

    def _name_reducer_failure(self, node: str, base: Mapping[str, JSON], writes: Mapping[str, JSON]) -> None:
        """Raise ``InvalidWrites`` naming the field whose reducer could not fold the write."""
        for field, value in writes.items():
            try:
                fold(base, [(node, {field: value})], self.graph.reducers)
            except Exception as e:
                raise InvalidWrites(f"node {node!r} field {field!r}: reducer {self.graph.reducer(field).name!r} "
                                    f"failed: {type(e).__name__}: {e}") from None

    def _unordered_writer(self, field: str, node: str) -> str | None:
        """A completed node that wrote ``field`` (last-value) and is not ordered before ``node``."""
        writers = self._field_writers.get(field, 0)
        # bit arithmetic: constant work per write however many nodes wrote the field before
        unordered = writers & ~self.graph.ancestor_mask(node) & ~(1 << self.graph.index[node])
        if not unordered:
            return None
        low = unordered & -unordered
        return self.graph.order[low.bit_length() - 1]


def _to_json_bytes(value: Any, node: str) -> bytes:
    try:
        return to_json(value)
    except Exception as e:
        raise InvalidWrites(f"writes of node {node!r} are not JSON-serialisable: {e}") from None
