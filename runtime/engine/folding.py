"""The state a run's nodes see, folded from their ancestors' writes, and the checks
every write passes before it is kept.

Pure: no I/O. Writes are indexed by the graph's canonical positions as bitmasks,
so "the completed ancestors of this node" and "an unordered writer of this field"
are a few integer operations, however many nodes the run has.

What a node costs should follow what it writes, not how big the state it reads has
grown. So the folded states of the last few node sets are kept, as JSON and (when the
state model validates field by field, see ``field_plan``) as a validated model: the
next state is built from the nearest kept one by folding only the writes it lacks and
validating only the fields those writes touch. A node gets its own copy of the
validated model, sharing nothing it could change in place. Whenever that path meets
an error, the whole state is validated as before, so errors read exactly the same.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import from_json, to_json

from ..core.errors import InvalidWrites, WriteConflict
from ..core.jsonvalues import JSON
from ..graph.instances import base_node
from ..graph.reducers import FieldPlan, append, copy_model, field_plan, fold
from ..graph import ExecutableGraph
from .instance_growth import shift_mask
from .instances import Instances, as_instances

#: folded states kept (beyond the run input): a chain's, a fan-out's root, a few branches in flight
KEPT_STATES = 8
#: nodes whose input is remembered until they are added (see ``_asked``): more than run at once
KEPT_ASKED = 256


@dataclass(slots=True)
class _Folded:
    """The state of one set of succeeded nodes: JSON, and validated once someone asked.

    Or, while ``appended`` is set, only the recipe for it: a node's state before its
    writes (validated), its writes, all to ``append`` fields, and their validated items.
    A map's items each keep such a state, and their descendants see all of them at
    once, so most are never read: folded when read (``_ready``), not when checked."""

    json: dict[str, JSON]
    model: BaseModel | None = None
    appended: tuple[_Folded, dict[str, JSON], dict[str, list[Any]]] | None = None


#: the JSON of a state not folded yet (see ``_Folded.appended``); never read as it is
_UNFOLDED: dict[str, JSON] = {}


class StateFold:
    """The run input plus the writes of its succeeded nodes, folded in canonical order."""

    def __init__(self, inst: Instances | ExecutableGraph, run_input: Mapping[str, JSON], writes: Mapping[str, JSON]):
        self.inst = inst = as_instances(inst)
        self.graph = graph = inst.graph
        inst.on_shift(self._shift)
        self.run_input = run_input
        self.writes: dict[str, JSON] = {}
        self._done_mask = 0
        #: per last-value field, the completed nodes that wrote it (a bitmask over canonical positions)
        self._field_writers: dict[str, int] = {}
        self._root = _Folded(dict(run_input))
        self._kept: OrderedDict[int, _Folded] = OrderedDict()   # node set (bitmask) -> its state, oldest first
        #: the state after a node's checked writes, kept once the node is added
        self._after: tuple[str, Mapping[str, JSON], int, _Folded] | None = None
        plan = field_plan(graph.state_model)
        self._fields = graph.state_model.model_fields
        #: fields whose reducer keeps the last value (two unordered writers conflict); any
        #: other name is an extra field, which keeps the last value too
        self._merged = frozenset(f for f, r in graph.reducers.items() if not r.conflicts)
        #: the nodes of subgraphs that see a state model of their own (a view of this one)
        self._views = {n: spec.view for n, spec in graph.nodes.items() if spec.view is not None}
        # a field missing from the input gets its default on every validation: the whole-state path does that
        self._plan = plan if plan is not None and set(graph.state_model.model_fields) <= set(run_input) else None
        self._scratch_model: BaseModel | None = None
        #: nodes asked for their input (once due: all they fold has settled, so it stays as it
        #: was) and not added since -> their input mask and state (a map's items ask twice)
        self._asked: dict[str, tuple[int, _Folded]] = {}
        for n, w in writes.items():
            self.add(n, w)

    def add(self, node: str, writes: Mapping[str, JSON]) -> None:
        """Keep a succeeded node's (checked) writes."""
        self.writes[node] = writes
        self._asked.pop(node, None)
        bit = 1 << self.inst.index[node]
        self._done_mask |= bit
        for field in writes:
            if field not in self._merged:
                self._field_writers[field] = self._field_writers.get(field, 0) | bit
        after, self._after = self._after, None
        # a map item's state after it is nobody's input (what follows a map sees all its
        # items at once): kept, it would push out the state its siblings start from
        if after is not None and after[0] == node and after[1] is writes and node[-1] != "]":
            self._keep(after[2], after[3])

    def input_state(self, node: str) -> dict[str, JSON]:
        """Run input folded with the node's succeeded ancestors' writes, canonical order."""
        return self._state(self._input_mask(node)).json

    def input_model(self, node: str) -> BaseModel:
        """The node's input state as a model of its own: nothing a node changes in place
        reaches other nodes or the store."""
        mask, folded = self._input(node)
        if self._plan is not None:
            try:
                validated = folded.model if folded.model is not None else self._validated(mask, folded)
                return self._plan.for_node(validated, folded.json)
            except ValidationError:
                pass  # the whole-state validation below raises the error as it always reads
        return self.graph.state_model.model_validate_json(to_json(folded.json))

    def _input(self, node: str) -> tuple[int, _Folded]:
        """The node's input mask and state; asked again (a ``when`` predicate, then the
        node, then its writes), the same answer from memory."""
        found = self._asked.get(node)
        if found is not None:
            return found
        mask = self.inst.ancestor_mask(node) & self._done_mask
        folded = self._state(mask)
        if len(self._asked) >= KEPT_ASKED:   # those never added (skipped, failed) go at last
            self._asked.clear()
        self._asked[node] = found = (mask, folded)
        return found

    def head_state(self) -> dict[str, JSON]:
        return self._state(self._done_mask).json

    def _input_mask(self, node: str) -> int:
        return self.inst.ancestor_mask(node) & self._done_mask

    def _shift(self, at: int, count: int) -> None:
        """Instances were inserted at position ``at``: move every later position up."""
        self._asked.clear()
        after = self._after[2] if self._after is not None else 0
        if not (self._done_mask | after) >> at:
            return   # every mask kept here is made of those positions: none moves (a loop's next iteration)
        self._done_mask = shift_mask(self._done_mask, at, count)
        self._field_writers = {f: shift_mask(m, at, count) for f, m in self._field_writers.items()}
        self._kept = OrderedDict((shift_mask(m, at, count), f) for m, f in self._kept.items())
        if self._after is not None:
            node, writes, mask, folded = self._after
            self._after = (node, writes, shift_mask(mask, at, count), folded)

    # ------------------------------------------------------------------ kept states

    def _keep(self, mask: int, folded: _Folded) -> None:
        self._kept[mask] = folded
        self._kept.move_to_end(mask)
        while len(self._kept) > KEPT_STATES:
            self._kept.popitem(last=False)

    def _base(self, mask: int, validated: bool) -> tuple[int, _Folded]:
        """The kept state nearest to ``mask`` that it extends with nodes later in canonical
        order (so folding the rest onto it is the canonical fold), the run input at worst."""
        best, found = 0, self._root
        for kept, folded in self._kept.items():
            rest = mask ^ kept
            if (kept & mask == kept and rest >> kept.bit_length() << kept.bit_length() == rest
                    and kept.bit_length() > best.bit_length()
                    and (folded.model is not None or folded.appended is not None or not validated)):
                best, found = kept, folded
        return best, _ready(found)

    def _beyond(self, mask: int, base: int) -> list[str]:
        """The nodes of ``mask`` after ``base``'s last one, canonical order."""
        order, names = self.inst.order, []
        rest = mask >> base.bit_length() << base.bit_length()
        while rest:  # visit set bits only, lowest (earliest in canonical order) first
            low = rest & -rest
            names.append(order[low.bit_length() - 1])
            rest ^= low
        return names

    def _state(self, mask: int) -> _Folded:
        if mask == 0:
            return self._root
        folded = self._kept.get(mask)
        if folded is not None:
            self._kept.move_to_end(mask)
            return _ready(folded)
        base, start = self._base(mask, validated=False)
        items = [(n, w) for n in self._beyond(mask, base) if (w := self.writes[n])]
        # nodes that wrote nothing leave the state as it was: the same object serves
        folded = _Folded(fold(start.json, items, self.graph.reducers)) if items else start
        self._keep(mask, folded)
        return folded

    def _validated(self, mask: int, folded: _Folded) -> BaseModel:
        """``folded`` (the state of ``mask``) validated: a kept validated state with only the
        fields written since validated again. Never handed to a node as it is."""
        if folded.model is not None:
            return folded.model
        plan = self._plan
        assert plan is not None
        if mask == 0:
            # a plan's fields validate alike from Python and JSON (``field_plan``): no JSON round trip
            folded.model = self.graph.state_model.model_validate(folded.json)
            return folded.model
        base, start = self._base(mask, validated=True)
        if start.model is None:
            self._validated(0, start)
        assert start.model is not None
        changed = {f for n in self._beyond(mask, base) for f in self.writes[n]}
        model = plan.copy(start.model)
        for field in folded.json:  # in the state's own order, so extra fields keep it too
            if field in changed:
                plan.assign(model, field, folded.json[field])
        folded.model = model
        return model

    # ------------------------------------------------------------------ checking writes

    def check_writes(self, node: str, value: Any) -> tuple[dict[str, JSON], int]:
        """A node's return value as the writes to keep, and their size in bytes;
        ``InvalidWrites``/``WriteConflict`` saying exactly what is wrong otherwise."""
        if value is None:
            nothing: dict[str, JSON] = {}
            mask = self._input_mask(node)
            self._after = (node, nothing, mask | 1 << self.inst.index[node], self._state(mask))
            return nothing, 0
        model = self.graph.state_model
        if type(value) is not dict:   # the usual return value skips the checks below
            if isinstance(value, model):
                raise InvalidWrites(f"node {node!r} returned the whole state; return a dict of only the "
                                    f"fields it writes (reducers would apply every field again)")
            if isinstance(value, BaseModel):
                value = value.model_dump(exclude_unset=True)
            if not isinstance(value, Mapping):
                raise InvalidWrites(f"node {node!r} returned {type(value).__name__}; a node returns a "
                                    f"dict of state fields to write, or None")
        # a subgraph's node writes the fields of its own state model (a view of this one) only
        own = (self._views.get(base_node(node)) or model) if self._views else model
        fields = self._fields if own is model else own.model_fields
        # a dict's keys are compared as a set (no loop in Python); the names only on an error
        known = type(value) is dict and value.keys() <= fields.keys()
        unknown = [] if known else [k for k in value if k not in fields]
        # extra fields only where both the node's state and the run's take them
        if unknown and not (own.model_config.get("extra") == model.model_config.get("extra") == "allow"):
            unknown.sort()
            raise InvalidWrites(f"node {node!r} wrote unknown state field(s) {', '.join(map(repr, unknown))}; "
                                f"fields are: {', '.join(own.model_fields)}")
        # a JSON round trip: the stored writes share nothing with objects the node keeps
        if type(value) is not dict:
            try:
                value = dict(value)
            except Exception as e:
                raise InvalidWrites(f"node {node!r} returned a mapping whose items cannot be read: "
                                    f"{type(e).__name__}: {e}") from None
        try:
            raw = to_json(value)
        except Exception as e:
            raise InvalidWrites(f"writes of node {node!r} are not JSON-serialisable: {e}") from None
        writes: dict[str, JSON] = from_json(raw)
        if self._plan is not None and self._plan.appends.issuperset(writes) and own is model:
            if self._appended(node, writes):
                return writes, len(raw)
        for field in writes:
            prev = self._unordered_writer(field, node)
            if prev is not None:
                raise WriteConflict(field, prev, node)
        mask = self._input_mask(node)
        base = self._state(mask)
        try:
            folded = fold(base.json, [(node, writes)], self.graph.reducers)
        except Exception:
            self._name_reducer_failure(node, base.json, writes)
            raise
        if self._plan is not None:
            try:
                after = self._check_fields(self._plan, self._validated(mask, base), writes, folded)
            except ValidationError:
                pass  # the whole-state validation below names the field as it always did
            else:
                self._after = (node, writes, mask | 1 << self.inst.index[node], _Folded(folded, after))
                return writes, len(raw)
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

    def _appended(self, node: str, writes: dict[str, JSON]) -> bool:
        """Check writes to ``append`` fields only (the usual ones of a map's items and of a
        loop's messages): validate the appended items alone, and leave the state after
        the node to be folded when someone reads it. Nothing to fold can fail (see
        ``FieldPlan.appends``), and no two writers of these fields conflict. False when
        an item does not validate: the whole-state path then names it."""
        plan = self._plan
        assert plan is not None
        mask, base = self._input(node)
        items: dict[str, list[Any]] = {}
        try:
            if base.model is None:
                self._validated(mask, base)
            scratch = self._scratch_model if self._scratch_model is not None else self._scratch(base)
            for field, update in writes.items():
                items[field] = plan.items(scratch, field, update)
        except ValidationError:
            return False
        # no writes: the state after the node is the one before it (as for None)
        after = _Folded(_UNFOLDED, None, (base, writes, items)) if writes else base
        self._after = (node, writes, mask | 1 << self.inst.index[node], after)
        return True

    def _scratch(self, base: _Folded) -> BaseModel:
        """A model validating single fields for ``FieldPlan.items`` (no validator of a
        planned model sees other fields, so which values it holds does not matter)."""
        assert base.model is not None
        self._scratch_model = copy_model(base.model)
        return self._scratch_model

    def _check_fields(self, plan: FieldPlan, validated: BaseModel, writes: dict[str, JSON],
                      folded: dict[str, JSON]) -> BaseModel:
        """Validate only the written fields of ``folded`` onto a copy of ``validated`` (the
        node's input); coerce last-value writes as the model does. The validated state
        after the node, for its descendants; ``ValidationError`` when a field does not fit."""
        checked = plan.copy(validated)
        for field in folded:
            if field in plan.appends and field in writes:
                plan.extend(checked, field, writes[field])
            elif field in writes:
                plan.assign(checked, field, folded[field])
        coerced = [f for f in writes if f not in self._merged]
        if not coerced:
            return checked
        dumped = checked.model_dump(mode="json", include=set(coerced))
        after = plan.copy(checked)
        for field in coerced:  # store last-value writes as the model coerced them ("3" -> 3)
            if field in dumped:
                writes[field] = folded[field] = dumped[field]
                # what descendants validate is the stored write, not the node's own value
                plan.assign(after, field, writes[field])
        return after

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
        if not writers:
            return None
        # bit arithmetic: constant work per write however many nodes wrote the field before
        unordered = writers & ~self.inst.ancestor_mask(node) & ~(1 << self.inst.index[node])
        if not unordered:
            return None
        low = unordered & -unordered
        return self.inst.order[low.bit_length() - 1]


def _ready(folded: _Folded) -> _Folded:
    """``folded`` with its JSON and model, folding what ``_Folded.appended`` left to do:
    the same fold and the same values ``_check_fields`` gives."""
    if folded.appended is None:
        return folded
    base, writes, items = folded.appended
    assert base.model is not None
    folded.json = json = {**base.json}
    for field, update in writes.items():   # what ``fold`` does with ``append``, which cannot fail here
        json[field] = [*(json.get(field) or ()), *update] if type(update) is list else append(json.get(field), update)
    model = copy_model(base.model)
    values = model.__dict__
    for field, new in items.items():
        values[field] = [*values[field], *new]
        model.__pydantic_fields_set__.add(field)
    folded.model = model
    folded.appended = None
    return folded


def view_of(state: BaseModel, view: type[BaseModel] | None) -> BaseModel:
    """A subgraph node's own state model, built from its parent's (already validated,
    same field types: see ``Graph.subgraph``)."""
    if view is None:
        return state
    values = {f: getattr(state, f) for f in view.model_fields if hasattr(state, f)}
    return view.model_construct(_fields_set=set(values), **values)

