"""Field-level diffs of JSON-like values: concrete cases and properties of diff/apply."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.travel.diff import Change, apply, diff, summary


def json_equal(x: Any, y: Any) -> bool:
    """Reference equality the diff promises: ``==`` except that a bool is never a number."""
    if isinstance(x, bool) or isinstance(y, bool):
        return type(x) is type(y) and x == y
    if type(x) is dict and type(y) is dict:
        return x.keys() == y.keys() and all(json_equal(x[k], y[k]) for k in x)
    if type(x) is list and type(y) is list:
        return len(x) == len(y) and all(map(json_equal, x, y))
    if type(x) in (dict, list) or type(y) in (dict, list):
        return False
    return bool(x == y)


def at(value: Any, path: tuple[str | int, ...]) -> Any:
    for key in path:
        value = value[key]
    return value


# ---------------------------------------------------------------------------- concrete cases


def test_equal_values_have_no_changes():
    value = {"a": [1, {"b": None}], "c": "x", "d": 1.5, "e": True}
    assert diff(value, value) == []
    assert diff(value, copy.deepcopy(value)) == []
    assert diff(None, None) == []
    assert diff([], []) == []


def test_nested_added_removed_changed():
    a = {"user": {"name": "ann", "age": 30, "tags": ["x"]}, "gone": 1}
    b = {"user": {"name": "ann", "age": 31, "tags": ["x"], "email": "a@x"}, "new": [1]}
    assert diff(a, b) == [
        Change(("user", "age"), "changed", old=30, new=31),
        Change(("user", "email"), "added", new="a@x"),
        Change(("gone",), "removed", old=1),
        Change(("new",), "added", new=[1]),
    ]
    assert apply(a, diff(a, b)) == b


def test_dict_order_is_keys_of_a_then_new_keys_of_b():
    a = {"z": 1, "a": 1, "m": 1}
    b = {"q": 2, "m": 2, "b": 2, "z": 2}
    assert [c.path[0] for c in diff(a, b)] == ["z", "a", "m", "q", "b"]


def test_list_append_is_one_added_change():
    a = {"items": [{"id": i, "v": "x"} for i in range(10_000)]}
    b = {"items": [*a["items"], {"id": 10_000, "v": "x"}]}
    assert diff(a, b) == [Change(("items", 10_000), "added", new={"id": 10_000, "v": "x"})]


def test_list_item_change_and_append():
    a = {"items": [{"id": i, "v": "x"} for i in range(100)]}
    b = copy.deepcopy(a)
    b["items"][-1]["v"] = "y"
    b["items"].append({"id": 100, "v": "x"})
    changes = diff(a, b)
    assert changes == [Change(("items", 99, "v"), "changed", old="x", new="y"),
                       Change(("items", 100), "added", new={"id": 100, "v": "x"})]
    assert apply(a, changes) == b


def test_list_shrink_removes_from_the_highest_index_down():
    changes = diff([0, 1, 2, 3], [0, 9])
    assert changes == [Change((1,), "changed", old=1, new=9),
                       Change((3,), "removed", old=3),
                       Change((2,), "removed", old=2)]
    assert apply([0, 1, 2, 3], changes) == [0, 9]


def test_type_changes_are_one_change():
    assert diff({"a": {"b": 1}}, {"a": [1]}) == [Change(("a",), "changed", old={"b": 1}, new=[1])]
    assert diff({"a": "1"}, {"a": 1}) == [Change(("a",), "changed", old="1", new=1)]
    assert diff([None], [{}]) == [Change((0,), "changed", old=None, new={})]


def test_root_change():
    assert diff(1, 2) == [Change((), "changed", old=1, new=2)]
    assert diff({"a": 1}, [1]) == [Change((), "changed", old={"a": 1}, new=[1])]
    assert apply(1, diff(1, 2)) == 2


def test_bool_is_not_a_number_but_int_equals_float():
    assert diff(True, 1) == [Change((), "changed", old=True, new=1)]
    assert diff(0, False) == [Change((), "changed", old=0, new=False)]
    assert diff(1.0, True) == [Change((), "changed", old=1.0, new=True)]
    # hidden inside containers that == calls equal
    assert diff({"a": [True, 1]}, {"a": [1, True]}) == [
        Change(("a", 0), "changed", old=True, new=1),
        Change(("a", 1), "changed", old=1, new=True),
    ]
    assert type(apply({"a": [True]}, diff({"a": [True]}, {"a": [1]}))["a"][0]) is int
    assert diff(1, 1.0) == []
    assert diff({"a": [1, -0.0]}, {"a": [1.0, 0]}) == []


def test_dotted():
    def dotted(*path: str | int) -> str:
        return Change(path, "changed").dotted()

    assert dotted("items", 3, "price") == "items[3].price"
    assert dotted("a", "b") == "a.b"
    assert dotted() == "(root)"
    assert dotted(0, 1) == "[0][1]"
    assert dotted("a", "x.y", "") == 'a["x.y"][""]'


def test_to_json_shape():
    assert Change(("a", 0), "added", new=[1]).to_json() == {"path": ["a", 0], "op": "added",
                                                            "new": [1]}
    assert Change(("a",), "removed", old=None).to_json() == {"path": ["a"], "op": "removed",
                                                             "old": None}
    assert Change((), "changed", old=1, new=None).to_json() == {"path": [], "op": "changed",
                                                                "old": 1, "new": None}


def test_change_is_frozen_and_checks_op():
    change = Change(("a",), "added", new=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        change.op = "removed"  # type: ignore[misc]
    with pytest.raises(ValueError, match="unknown change op"):
        Change(("a",), "moved")


def test_summary():
    changes = diff({"a": 1, "b": [1, 2], "c": 0}, {"a": 2, "b": [1], "d": 0})
    assert summary(changes) == {"added": 1, "removed": 2, "changed": 1}
    assert summary([]) == {"added": 0, "removed": 0, "changed": 0}


def test_apply_copies_instead_of_mutating_or_aliasing():
    a = {"keep": {"k": [1]}, "list": [{"x": 1}], "d": {"e": 1}}
    snapshot = copy.deepcopy(a)
    b: dict[str, Any] = {"keep": {"k": [1]}, "list": [{"x": 2}, {"y": [3]}],
                         "d": {"e": 1, "f": {"g": 1}}}
    result = apply(a, diff(a, b))
    assert a == snapshot
    assert result == b
    # inserted values are copies: changing the result leaves b (and the changes) alone
    result["list"][1]["y"].append(4)
    result["d"]["f"]["g"] = 2
    assert b["list"][1] == {"y": [3]} and b["d"]["f"] == {"g": 1}


def test_apply_rejects_changes_that_do_not_fit():
    with pytest.raises(ValueError, match="root"):
        apply(1, [Change((), "added", new=1)])
    with pytest.raises(ValueError, match=r"a\.b"):
        apply({"a": 1}, [Change(("a", "b"), "changed", old=1, new=2)])
    with pytest.raises(ValueError, match="out of range"):
        apply([1], [Change((-1,), "removed", old=1)])
    with pytest.raises(ValueError, match="out of range"):
        apply([1], [Change((3,), "added", new=1)])
    with pytest.raises(ValueError, match="KeyError"):
        apply({}, [Change(("a",), "removed", old=1)])


def nested(depth: int, leaf: Any, kind: str) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


@pytest.mark.parametrize("kind", ["list", "dict"])
def test_deep_nesting_does_not_hit_the_recursion_limit(kind: str):
    depth = 2_000
    a, b = nested(depth, 0, kind), nested(depth, 1, kind)
    assert diff(a, nested(depth, 0, kind)) == []  # equal but too deep for a C comparison
    changes = diff(a, b)
    assert len(changes) == 1
    assert len(changes[0].path) == depth
    assert (changes[0].op, changes[0].old, changes[0].new) == ("changed", 0, 1)
    result = apply(a, changes)
    assert diff(result, b) == []
    assert at(a, changes[0].path) == 0  # a untouched
    assert diff(0, a)[0].new is a and diff(apply(0, diff(0, a)), a) == []


# ---------------------------------------------------------------------------- properties

KEYS = st.sampled_from(["a", "b", "c", "x.y", ""])
NUMBERS = st.integers(-2, 2) | st.sampled_from([0.0, -0.0, 1.0, 2.5]) | st.floats(allow_nan=False)
STRINGS = st.sampled_from(["", "a", "b"])


@dataclasses.dataclass(frozen=True)
class Kind:
    """Random JSON values, and the types a number may be swapped for without changing ``==``."""

    values: st.SearchStrategy[Any]
    number_types: tuple[type, ...]


def json_values(scalars: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        scalars,
        lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children,
                                                                         max_size=4),
        max_leaves=12,
    )


WITH_BOOLS = Kind(json_values(st.none() | st.booleans() | NUMBERS | STRINGS), (bool, int, float))
WITHOUT_BOOLS = Kind(json_values(st.none() | NUMBERS | STRINGS), (int, float))


def retyped(draw: st.DrawFn, kind: Kind, value: Any) -> Any:
    """The same number as another type (``==`` to it): True -> 1, 0 -> False, 1 -> 1.0."""
    if type(value) not in kind.number_types or (type(value) is float
                                                and not value.is_integer()):
        return value  # not a number, or a float no other type can equal (also inf)
    options = [t(value) for t in kind.number_types if t is not type(value) and t(value) == value]
    return draw(st.sampled_from(options)) if options else value


def mutate(draw: st.DrawFn, kind: Kind, value: Any) -> Any:
    """A value like ``value``: some items replaced, retyped, dropped or added, the rest equal."""
    roll = draw(st.integers(0, 6))
    if roll == 0:
        return draw(kind.values)
    if type(value) is dict:
        out = {k: mutate(draw, kind, v) for k, v in value.items() if draw(st.integers(0, 3))}
        out.update((k, v) for k, v in draw(st.dictionaries(KEYS, kind.values, max_size=2)).items()
                   if k not in out)
        return out
    if type(value) is list:
        items = [mutate(draw, kind, v) for v in value]
        if roll == 2:
            return items[:draw(st.integers(0, len(items)))]
        return items + draw(st.lists(kind.values, max_size=2)) if roll == 3 else items
    return retyped(draw, kind, value) if roll == 1 else value


def retype_some(draw: st.DrawFn, kind: Kind, value: Any) -> Any:
    """``value`` with some numbers swapped for ``==`` ones of another type; nothing else."""
    if type(value) is dict:
        return {k: retype_some(draw, kind, v) for k, v in value.items()}
    if type(value) is list:
        return [retype_some(draw, kind, v) for v in value]
    return retyped(draw, kind, value) if draw(st.booleans()) else value


def pairs(kind: Kind) -> st.SearchStrategy[tuple[Any, Any]]:
    """Pairs of values that are alike but for a few edits, differ only in number types, or
    are unrelated."""
    @st.composite
    def edited(draw: st.DrawFn) -> tuple[Any, Any]:
        a = draw(kind.values)
        return a, mutate(draw, kind, a)

    @st.composite
    def retyped_pair(draw: st.DrawFn) -> tuple[Any, Any]:
        a = draw(kind.values)
        return a, retype_some(draw, kind, a)

    return edited() | retyped_pair() | st.tuples(kind.values, kind.values)


@given(pairs(WITH_BOOLS))
def test_apply_of_diff_gives_b_and_leaves_inputs_alone(pair: tuple[Any, Any]):
    a, b = pair
    a_before, b_before = copy.deepcopy(a), copy.deepcopy(b)
    changes = diff(a, b)
    result = apply(a, changes)
    assert json_equal(result, b)
    assert diff(result, b) == []
    assert json_equal(a, a_before) and json_equal(b, b_before)


@given(pairs(WITH_BOOLS))
def test_diff_is_empty_exactly_for_json_equal_values(pair: tuple[Any, Any]):
    a, b = pair
    assert (diff(a, b) == []) == json_equal(a, b)
    assert diff(a, a) == [] and diff(a, copy.deepcopy(a)) == []


@given(pairs(WITHOUT_BOOLS))
def test_without_bools_diff_is_empty_exactly_when_equal(pair: tuple[Any, Any]):
    a, b = pair
    assert (diff(a, b) == []) == (a == b)


@given(pairs(WITH_BOOLS))
def test_changes_point_at_the_values_they_report(pair: tuple[Any, Any]):
    a, b = pair
    changes = diff(a, b)
    for change in changes:
        if change.op != "added":
            assert at(a, change.path) is change.old
        if change.op != "removed":
            assert at(b, change.path) is change.new
        if change.op == "changed":
            assert not json_equal(change.old, change.new)
        assert set(change.to_json()) == {"path", "op"} | (
            {"old"} if change.op != "added" else set()) | (
            {"new"} if change.op != "removed" else set())
    assert sum(summary(changes).values()) == len(changes)
