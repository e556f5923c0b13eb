"""The field-by-field state fold gives what the whole-state fold gives.

``StateFold`` validates only the fields a write touches and copies a kept validated
state for each node. Here it runs side by side with ``ReferenceFold``, the
straightforward fold: every node input is the whole folded state validated from JSON,
every write check folds and validates the whole state. Random DAGs, random launch and
completion orders, random writes (valid, mistyped, unknown fields, custom reducers,
reducers that fail, non-JSON values), random restarts from the kept writes; the node
code scribbles over every input it gets. Node inputs, stored writes, errors and head
states must be identical at every step.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import from_json, to_json

from runtime import ExecutableGraph, Graph, add, append, merge, reducer
from runtime.core.errors import InvalidWrites, WriteConflict
from runtime.engine.folding import StateFold
from runtime.graph.reducers import field_plan, fold

SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ---------------------------------------------------------------------------- state models


def extend_in_place(current: Any, update: Any) -> Any:
    """A custom reducer that changes its input: it must only ever get a copy."""
    current = current if current is not None else []
    current.extend(update if isinstance(update, list) else [update])
    return current


def concat(current: Any, update: Any) -> Any:
    return (current or "") + update   # TypeError for a non-string write: a reducer failure


class Sub(BaseModel):
    a: int = 0
    tags: list[str] = []


class Msg(BaseModel):
    model_config = ConfigDict(frozen=True)
    role: str = ""
    content: str = ""


class Rich(BaseModel):
    messages: Annotated[list[str], append] = []
    total: Annotated[int, add] = 0
    seen: Annotated[dict[str, int], merge] = {}
    answer: str = ""
    nums: list[int] = []
    grid: list[list[int]] = []
    sub: Sub = Sub()
    subs: Annotated[list[Sub], append] = []
    msgs: Annotated[list[Msg], append] = []
    last: Msg | None = None
    maybe: int | None = None
    when: datetime | None = None
    pair: tuple[int, str] = (0, "")
    bumped: Annotated[int, AfterValidator(lambda v: v + 1)] = 0   # validating twice differs from once
    anything: Any = None
    data: dict[str, Any] = {}
    kind: Literal["a", "b"] = "a"
    items: Annotated[list[str], reducer(extend_in_place)] = []
    text: Annotated[str, reducer(concat)] = ""


class Open(BaseModel):
    model_config = ConfigDict(extra="allow")
    n: int = 0
    log: Annotated[list[Any], append] = []
    total: Annotated[int, add] = 0


class Capped(BaseModel):
    """Two unordered nodes may each add within the bound and their join exceed it: that
    join's input does not validate."""

    total: Annotated[int, add, Field(le=2)] = 0
    log: Annotated[list[str], append] = []


class Checked(BaseModel):
    """Cross-field validation: the fold must validate whole states for this one."""

    lo: int = 0
    hi: int = 10
    log: Annotated[list[str], append] = []

    @model_validator(mode="after")
    def ordered(self) -> Checked:
        if self.lo > self.hi:
            raise ValueError("lo is above hi")
        return self


TEXT = st.text(alphabet="ab", max_size=3)
JSONS = st.recursive(st.none() | st.booleans() | st.integers(-3, 3) | TEXT,
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                     max_leaves=6)
SUBS = st.fixed_dictionaries({}, optional={"a": st.integers(-3, 3) | st.just("x"),
                                           "tags": st.lists(TEXT, max_size=2)})
MSGS = st.fixed_dictionaries({}, optional={"role": TEXT | st.just(1), "content": TEXT})

WRITES: dict[type[BaseModel], dict[str, st.SearchStrategy[Any]]] = {
    Rich: {
        "messages": st.lists(TEXT, max_size=3) | TEXT | st.integers(-3, 3) | st.none(),
        "total": st.integers(-5, 5) | st.sampled_from(["3", 1.5, 2.0, None]),
        "seen": st.dictionaries(TEXT, st.integers(-3, 3) | st.just("x"), max_size=2) | st.integers(),
        "answer": TEXT | st.integers(-3, 3),
        "nums": st.lists(st.integers(-3, 3) | st.sampled_from(["1", "x"]), max_size=3),
        "grid": st.lists(st.lists(st.integers(-3, 3) | st.just("x"), max_size=2), max_size=2),
        "sub": SUBS | st.just("bad"),
        "subs": st.lists(SUBS, max_size=2) | SUBS,
        "msgs": st.lists(MSGS, max_size=2) | MSGS,
        "last": st.none() | MSGS,
        "maybe": st.none() | st.integers(-3, 3) | st.just("x"),
        "when": st.sampled_from(["2024-01-02T03:04:05", "2024-01-02", "nope", 0, 1_700_000_000, None]),
        "pair": st.sampled_from([[1, "a"], [1], ["x", "y"], [2, 3], (4, "b")]),
        "bumped": st.integers(-3, 3) | st.just("5") | st.just("x"),
        "anything": JSONS,
        "data": st.dictionaries(TEXT, JSONS, max_size=2) | st.just([1]),
        "kind": st.sampled_from(["a", "b", "c"]),
        "items": st.lists(TEXT, max_size=2) | TEXT,
        "text": TEXT | st.integers(-3, 3),
    },
    Open: {
        "n": st.integers(-3, 3) | st.just("2") | st.just("x"),
        "log": st.lists(JSONS, max_size=2) | JSONS,
        "total": st.integers(-3, 3),
        "x": JSONS,            # extra fields: the model allows them
        "y": JSONS,
    },
    Capped: {
        "total": st.integers(1, 2),
        "log": st.lists(TEXT, max_size=2),
    },
    Checked: {
        "lo": st.integers(0, 12) | st.just("x"),
        "hi": st.integers(0, 12),
        "log": st.lists(TEXT, max_size=2),
    },
}


# ---------------------------------------------------------------------------- the reference


class ReferenceFold:
    """The straightforward fold and write check: whole states, every time."""

    def __init__(self, graph: ExecutableGraph, run_input: Mapping[str, Any], writes: Mapping[str, Any]):
        self.graph, self.run_input, self.writes = graph, dict(run_input), dict(writes)

    def _fold(self, nodes: set[str]) -> dict[str, Any]:
        return fold(self.run_input, [(n, self.writes[n]) for n in self.graph.order if n in nodes],
                    self.graph.reducers)

    def input_state(self, node: str) -> dict[str, Any]:
        return self._fold({n for n in self.writes if self.graph.is_ancestor(n, node)})

    def input_model(self, node: str) -> BaseModel:
        return self.graph.state_model.model_validate_json(to_json(self.input_state(node)))

    def head_state(self) -> dict[str, Any]:
        return self._fold(set(self.writes))

    def add(self, node: str, writes: Mapping[str, Any]) -> None:
        self.writes[node] = writes

    def check_writes(self, node: str, value: Any) -> tuple[dict[str, Any], int]:
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
        unknown = sorted(k for k in value if k not in model.model_fields)
        if unknown and model.model_config.get("extra") != "allow":
            raise InvalidWrites(f"node {node!r} wrote unknown state field(s) {', '.join(map(repr, unknown))}; "
                                f"fields are: {', '.join(model.model_fields)}")
        try:
            raw = to_json(dict(value))
        except Exception as e:
            raise InvalidWrites(f"writes of node {node!r} are not JSON-serialisable: {e}") from None
        writes: dict[str, Any] = from_json(raw)
        for field in writes:
            if not self.graph.reducer(field).conflicts:
                continue
            for other in self.graph.order:  # the first unordered writer in canonical order
                if (other != node and field in self.writes.get(other, {})
                        and not self.graph.is_ancestor(other, node)):
                    raise WriteConflict(field, other, node)
        base = self.input_state(node)
        try:
            folded = fold(base, [(node, writes)], self.graph.reducers)
        except Exception:
            for field, v in writes.items():
                try:
                    fold(base, [(node, {field: v})], self.graph.reducers)
                except Exception as e:
                    raise InvalidWrites(f"node {node!r} field {field!r}: reducer "
                                        f"{self.graph.reducer(field).name!r} failed: {type(e).__name__}: {e}") from None
            raise
        try:
            checked = model.model_validate(folded)
        except ValidationError as e:
            err = e.errors()[0]
            field = ".".join(map(str, err["loc"]))
            raise InvalidWrites(f"node {node!r} wrote an invalid value for field {field!r}: {err['msg']}") from None
        dumped = checked.model_dump(mode="json")
        for field in writes:
            if self.graph.reducer(field).conflicts and field in dumped:
                writes[field] = dumped[field]
        return writes, len(raw)


# ---------------------------------------------------------------------------- the walk


def scribble(value: Any) -> None:
    """What careless node code does: change everything it can reach, in place."""
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            scribble(getattr(value, name))
            if not value.model_config.get("frozen"):
                setattr(value, name, "scribbled")   # no validate_assignment: anything goes
        for v in (value.model_extra or {}).values():
            scribble(v)
        if value.model_extra is not None:
            value.model_extra["scribbled"] = True
    elif isinstance(value, list):
        for v in value:
            scribble(v)
        value.append("scribbled")
    elif isinstance(value, dict):
        for v in value.values():
            scribble(v)
        value["scribbled"] = True
    elif isinstance(value, set):
        value.add("scribbled")


def outcome(call: Any) -> tuple[str, Any]:
    try:
        return "ok", call()
    except (InvalidWrites, WriteConflict, ValidationError) as e:
        return type(e).__name__, str(e)


def same_model(fast: BaseModel, ref: BaseModel) -> None:
    assert type(fast) is type(ref)
    assert repr(fast) == repr(ref)   # repr tells 1 from 1.0 and a tuple from a list
    assert fast.model_fields_set == ref.model_fields_set
    assert fast.model_dump(exclude_unset=True) == ref.model_dump(exclude_unset=True)


@st.composite
def dags(draw: st.DrawFn) -> dict[str, tuple[str, ...]]:
    """Random DAG as name -> dependencies, names drawn so the canonical order differs
    from the order of generation."""
    names = draw(st.lists(st.text(alphabet="pqrstuvw", min_size=1, max_size=2), min_size=1, max_size=9,
                          unique=True))
    return {name: tuple(names[j] for j in draw(st.lists(st.integers(0, i - 1), unique=True, max_size=min(i, 3))))
            if i else () for i, name in enumerate(names)}


def node_value(draw: st.DrawFn, model: type[BaseModel]) -> Any:
    kind = draw(st.sampled_from(["writes"] * 8 + ["none", "model", "not a dict", "not json", "unknown"]))
    if kind == "none":
        return None
    if kind == "model":
        return model()
    if kind == "not a dict":
        return draw(st.sampled_from([3, [1], "x"]))
    strategies = WRITES[model]
    fields = draw(st.lists(st.sampled_from(sorted(strategies)), unique=True, max_size=3))
    value = {f: draw(strategies[f]) for f in fields}
    if kind == "not json":
        value["answer"] = object()
    if kind == "unknown":
        value["nope"] = 1
    return value


def walk(model: type[BaseModel], data: st.DataObject) -> None:
    deps = data.draw(dags(), label="dag")
    g = Graph("fold", state=model)
    for name, after in deps.items():
        g.add_node(name, lambda state: None, after=list(after))
    graph = g.compile()
    run_input = model().model_dump(mode="json")
    if data.draw(st.booleans(), label="drawn input values"):
        # a run that starts from a state of any values (a thread's turn starts from the last
        # one's): its input is validated as the root of every fold, valid or not
        strategies = {f: w for f, w in WRITES[model].items() if f in model.model_fields}
        for field in data.draw(st.lists(st.sampled_from(sorted(strategies)), unique=True, max_size=4),
                               label="input fields"):
            run_input[field] = data.draw(strategies[field], label=f"input {field}")
    if model is Open and data.draw(st.booleans(), label="extra field in the input"):
        run_input["x"] = [1, {"k": "v"}]
    fast, ref = StateFold(graph, run_input, {}), ReferenceFold(graph, run_input, {})
    status = dict.fromkeys(graph.order, "pending")
    for _ in range(3 * len(graph.order) + 2):
        launchable = [n for n in graph.order if status[n] == "pending"
                      and all(status[d] in ("succeeded", "failed") for d in deps[n])]
        running = [n for n in graph.order if status[n] == "running"]
        actions = ["launch"] * bool(launchable) + ["finish"] * bool(running) + ["restart"]
        action = data.draw(st.sampled_from(actions), label="action")
        if action == "launch":
            node = data.draw(st.sampled_from(launchable), label="launch")
            assert to_json(fast.input_state(node)) == to_json(ref.input_state(node))
            got, want = outcome(lambda: fast.input_model(node)), outcome(lambda: ref.input_model(node))
            assert got[0] == want[0]
            if got[0] == "ok":
                same_model(got[1], want[1])
                scribble(got[1])
            else:
                assert got == want
            status[node] = "running" if got[0] == "ok" else "failed"
        elif action == "finish":
            node = data.draw(st.sampled_from(running), label="finish")
            value = node_value(data.draw, model)
            got, want = outcome(lambda: fast.check_writes(node, value)), outcome(lambda: ref.check_writes(node, value))
            assert got == want
            if got[0] == "ok":
                assert to_json(got[1][0]) == to_json(want[1][0])   # types too: 3 is not 3.0
                fast.add(node, got[1][0])
                ref.add(node, want[1][0])
            scribble(value)   # the node's own objects: it may keep changing them
            status[node] = "succeeded" if got[0] == "ok" else "failed"
        else:   # a resumed run folds the kept writes again
            fast = StateFold(graph, run_input, dict(ref.writes))
        assert to_json(fast.head_state()) == to_json(ref.head_state())


def test_the_test_models_take_the_paths_they_are_meant_to():
    plan = field_plan(Rich)
    assert plan is not None and field_plan(Open) is not None and field_plan(Capped) is not None
    assert field_plan(Checked) is None
    assert {f for f, _ in plan.copies} == {"messages", "seen", "nums", "grid", "msgs", "items"}
    assert set(plan.revalidate) == {"sub", "subs", "bumped"} and set(plan.refresh) == {"anything", "data"}
    assert plan.appends == {"messages", "subs", "msgs"}


@SETTINGS
@given(data=st.data())
def test_field_by_field_fold_matches_the_whole_state_fold(data: st.DataObject):
    walk(Rich, data)


@SETTINGS
@given(data=st.data())
def test_field_by_field_fold_matches_with_extra_fields(data: st.DataObject):
    walk(Open, data)


@settings(SETTINGS, max_examples=60)
@given(data=st.data())
def test_field_by_field_fold_matches_when_a_join_input_does_not_validate(data: st.DataObject):
    walk(Capped, data)


@settings(SETTINGS, max_examples=40)
@given(data=st.data())
def test_a_model_with_cross_field_validation_folds_whole_states_alike(data: st.DataObject):
    walk(Checked, data)


# ---------------------------------------------------------------- writes to append fields only
# (checked item by item, the state after them folded when read): item validators that are
# not idempotent, nested models with extra fields, ``Any`` items, dicts of lists, extra fields

class Inner(BaseModel):
    model_config = ConfigDict(extra="allow")
    a: int = 0
    tags: list[str] = []


class Items(BaseModel):
    model_config = ConfigDict(extra="allow")
    log: Annotated[list[Annotated[int, AfterValidator(lambda v: v + 1)]], append] = []
    objs: Annotated[list[Inner], append] = []
    anys: Annotated[list[Any], append] = []
    dd: Annotated[list[dict[str, list[int]]], append] = []
    n: int = 0


INNER = st.fixed_dictionaries({}, optional={"a": st.integers(-3, 3) | st.just("2") | st.just("x"),
                                            "tags": st.lists(TEXT, max_size=2), "z": JSONS})
WRITES[Items] = {
    "log": st.lists(st.integers(-3, 3) | st.just("3") | st.just("x"), max_size=3) | st.integers(-3, 3),
    "objs": st.lists(INNER, max_size=2) | INNER,
    "anys": st.lists(JSONS, max_size=2) | JSONS,
    "dd": st.lists(st.dictionaries(TEXT, st.lists(st.integers(-2, 2) | st.just("1"), max_size=2), max_size=2),
                   max_size=2),
    "n": st.integers(-3, 3) | st.just("2"),
    "x": JSONS,
}


def test_the_model_takes_the_append_path():
    plan = field_plan(Items)
    assert plan is not None and plan.appends == {"log", "objs", "anys", "dd"}


@settings(SETTINGS, max_examples=300)
@given(data=st.data())
def test_append_only_writes_fold_as_the_whole_state_fold(data: st.DataObject):
    walk(Items, data)


# ---------------------------------------------------------------------------- append folds


_JSONISH = st.one_of(st.integers(), st.text(max_size=3), st.none(), st.lists(st.integers(), max_size=3))


@SETTINGS
@given(base=st.one_of(st.none(), st.lists(_JSONISH, max_size=4)),
       updates=st.lists(st.one_of(_JSONISH, st.lists(_JSONISH, max_size=3)), max_size=30))
def test_many_appends_fold_as_one_at_a_time_and_change_no_input(base: Any, updates: list[Any]):
    """A fold extends the list it made in place (a map's many items would copy it once
    each): the result is what appending one write at a time gives, and neither the base
    nor any write is changed."""
    start = {"xs": base} if base is not None else {}
    writes = [(f"n{i}", {"xs": u}) for i, u in enumerate(updates)]
    before = to_json([start, writes])
    expected: Any = base
    for u in updates:
        expected = append(expected, u)
    folded = fold(start, writes, {"xs": append})
    assert folded.get("xs") == (expected if updates else base)
    assert to_json([start, writes]) == before
    if updates and base is not None:
        assert folded["xs"] is not base
