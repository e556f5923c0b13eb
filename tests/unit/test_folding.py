"""The state a node reads: built per write, not per state size, and still its own.

Which state models validate field by field (``field_plan``), what a write check
validates, and, through the runtime, that node code changing its input in place
changes nothing anyone else sees.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any

import pytest
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    computed_field,
    field_serializer,
    field_validator,
    model_validator,
)

from runtime import Graph, RunStatus, Runtime, append, merge
from runtime.engine.folding import StateFold
from runtime.graph.reducers import field_plan

# ---------------------------------------------------------------------------- which models


class Sub(BaseModel):
    a: int = 0


class WithModelValidator(BaseModel):
    lo: int = 0
    hi: int = 1

    @model_validator(mode="after")
    def ordered(self) -> WithModelValidator:
        return self


class WithInfoValidator(BaseModel):
    x: int = 0
    y: int = 0

    @field_validator("y")
    @classmethod
    def above_x(cls, y: int, info: Any) -> int:   # reads another field: info.data
        return y


class WithAlias(BaseModel):
    x: int = Field(0, alias="X")


class Strict(BaseModel):
    model_config = ConfigDict(strict=True)
    x: int = 0


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)
    x: int = 0


class WithPrivate(BaseModel):
    x: int = 0
    _seen: list[int] = PrivateAttr(default_factory=list)


class WithComputed(BaseModel):
    x: int = 0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def double(self) -> int:
        return 2 * self.x


class WithInfoSerializer(BaseModel):
    x: int = 0

    @field_serializer("x")
    def shown(self, x: int, info: Any) -> int:
        return x


class WithModelUnion(BaseModel):
    x: int | Sub = 0   # a smart union may choose differently from Python and from JSON


class WithDecimal(BaseModel):
    x: Decimal = Decimal(0)   # a float becomes another Decimal from Python than from JSON text


class WithTypedExtras(BaseModel):
    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, int] = Field(init=False)
    x: int = 0


@pytest.mark.parametrize("model", [WithModelValidator, WithInfoValidator, WithAlias, Strict, Frozen, WithPrivate,
                                   WithComputed, WithInfoSerializer, WithModelUnion, WithDecimal, WithTypedExtras],
                         ids=lambda m: m.__name__)
def test_a_model_whose_validation_is_not_per_field_is_validated_whole(model: type[BaseModel]):
    assert field_plan(model) is None


class Plain(BaseModel):
    log: Annotated[list[str], append] = []
    seen: Annotated[dict[str, int], merge] = {}
    answer: str = ""
    sub: Sub = Sub()


def test_a_plain_model_validates_per_field_sharing_only_immutable_values():
    plan = field_plan(Plain)
    assert plan is not None
    assert {f for f, _ in plan.copies} == {"log", "seen"} and plan.revalidate == ("sub",)
    assert plan.appends == {"log"}   # "answer" is a str: shared, never copied


# ---------------------------------------------------------------------------- what a write check validates

CHECKED: list[str] = []


def counted(value: str) -> str:
    CHECKED.append(value)
    return value


class Counted(BaseModel):
    log: Annotated[list[Annotated[str, AfterValidator(counted)]], append] = []


def test_a_write_check_validates_the_appended_items_not_the_whole_list():
    g = Graph("counted", state=Counted)
    prev: list[str] = []
    for i in range(40):
        g.add_node(f"n{i:02d}", lambda state: None, after=prev)
        prev = [f"n{i:02d}"]
    graph = g.compile()
    fold = StateFold(graph, {"log": []}, {})
    CHECKED.clear()
    for i, node in enumerate(graph.order):
        writes, _ = fold.check_writes(node, {"log": [f"item {i}"]})
        fold.add(node, writes)
    assert CHECKED == [f"item {i}" for i in range(40)]   # once each, not 1 + 2 + ... + 40 times
    assert fold.head_state() == {"log": [f"item {i}" for i in range(40)]}


# ---------------------------------------------------------------------------- through the runtime


class Notes(BaseModel):
    log: Annotated[list[str], append] = []
    tags: Annotated[dict[str, list[str]], merge] = {}
    sub: Sub = Sub()
    data: dict[str, Any] = {}
    n: int = 0


def meddle(state: Notes) -> None:
    """Node code that changes everything it was given, in place."""
    state.log.append("meddled")
    state.log[0:0] = ["front"]
    for v in state.tags.values():
        v.append("meddled")
    state.tags["meddled"] = ["x"]
    state.sub.a = 999
    state.data.setdefault("inner", {})["meddled"] = True
    state.n = -1


async def test_nodes_that_change_their_input_in_place_change_nothing_others_see(rt: Runtime):
    seen: dict[str, dict[str, Any]] = {}
    g = Graph("meddlers", state=Notes)

    def step(name: str):
        def fn(state: Notes) -> dict[str, Any]:
            seen[name] = state.model_dump()
            meddle(state)
            out: dict[str, Any] = {"log": [name], "tags": {name: [name]}}
            if name == "a":
                out["n"] = state.n + 100   # its own copy, meddled: -1 + 100
            return out
        return fn

    g.add_node("a", step("a"))
    g.add_node("b", step("b"), after=["a"], when=lambda s: (meddle(s), True)[1])
    g.add_node("c", step("c"), after=["a"])
    g.add_node("d", step("d"), after=["b", "c"])
    graph = g.compile()
    run = await rt.start(graph, {"data": {"inner": {"k": 1}}, "n": 0})
    assert run.status == RunStatus.SUCCEEDED, run.error
    base = {"sub": {"a": 0}, "data": {"inner": {"k": 1}}}
    assert seen["a"] == {"log": [], "tags": {}, "n": 0, **base}
    after_a = {"log": ["a"], "tags": {"a": ["a"]}, "n": 99, **base}
    assert seen["b"] == after_a and seen["c"] == after_a
    middle = [n for n in graph.order if n in ("b", "c")]
    assert seen["d"] == {"log": ["a", *middle], "tags": {n: [n] for n in ("a", *middle)}, "n": 99, **base}
    final = (await rt.state_at((await rt.history(run.id))[-1].id)).model_dump()
    assert final == {"log": ["a", *middle, "d"], "tags": {n: [n] for n in ("a", *middle, "d")}, "n": 99, **base}


class Bumped(BaseModel):
    n: Annotated[int, AfterValidator(lambda v: v + 1)] = 0


async def test_descendants_validate_the_stored_write_not_the_node_own_value(rt: Runtime):
    seen: list[int] = []
    g = Graph("bumped", state=Bumped)
    g.add_node("a", lambda state: {"n": 1})
    g.add_node("b", lambda state: seen.append(state.n), after=["a"])
    run = await rt.start(g, {})
    # "a" wrote 1, stored as validated (2); "b" reads that stored write validated again (3)
    assert [w.value for w in await rt.pending_writes(run.id) if w.node == "a"] == [{"n": 2}]
    assert seen == [3]
