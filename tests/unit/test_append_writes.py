"""Writes to ``append`` fields only (a map item's result, a loop's message) are checked
item by item and folded when read: through the runtime they store, fold, validate and
stay isolated exactly as writes checked against the whole state do."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel

from runtime import Graph, MemoryStore, RunStatus, Runtime, append


class M(BaseModel):
    items: list[int] = []
    results: Annotated[list[int], append] = []
    total: int = 0


async def test_map_items_appending_strings_store_them_raw_and_validate_them_in_item_order() -> None:
    g = Graph("coerce", M)
    g.add_node("plan", lambda s: {"items": [0, 1, 2, 3]})

    async def work(s: M, item: int) -> dict[str, Any]:
        await asyncio.sleep(0.001 * ((3 - item) % 4))   # finish out of order
        return {"results": [str(item * 10)]}

    g.add_node("work", work, after=["plan"], map_over="items")
    g.add_node("red", lambda s: {"total": sum(s.results)}, after=["work"])
    rt = Runtime(store=MemoryStore())
    run = await rt.start(g, {"items": [], "results": [], "total": 0})
    assert run.status == RunStatus.SUCCEEDED, run.error
    writes = {w.node: w.value for w in await rt.pending_writes(run.id)}
    assert [writes[f"work[{i}]"] for i in range(4)] == [{"results": [str(i * 10)]} for i in range(4)]
    final = await rt.state_at((await rt.history(run.id))[-1].id)
    assert final.results == [0, 10, 20, 30] and final.total == 60


async def test_an_invalid_appended_item_is_named_as_before() -> None:
    g = Graph("bad", M)
    g.add_node("a", lambda s: {"results": [1, "x"]})
    rt = Runtime(store=MemoryStore())
    run = await rt.start(g, {"items": [], "results": [], "total": 0})
    assert run.status == RunStatus.FAILED
    assert run.error is not None and run.error["message"] == (
        "InvalidWrites: node 'a' wrote an invalid value for field 'results.1': "
        "Input should be a valid integer, unable to parse string as an integer")


class Item(BaseModel):
    a: int = 0
    tags: list[str] = []


class N(BaseModel):
    log: Annotated[list[Item], append] = []
    raw: Annotated[list[Any], append] = []
    dd: Annotated[list[dict[str, int]], append] = []
    ll: Annotated[list[list[int]], append] = []
    bumped: Annotated[list[Annotated[int, AfterValidator(lambda v: v + 1)]], append] = []


async def test_nodes_changing_appended_items_in_place_change_nothing_others_see() -> None:
    seen: dict[str, dict[str, Any]] = {}

    def a(s: N) -> dict[str, Any]:
        return {"log": [{"a": 1, "tags": ["x"]}], "raw": [{"k": [1]}], "dd": [{"k": 1}], "ll": [[1]],
                "bumped": [1]}

    def meddler(name: str) -> Any:
        def fn(s: N) -> dict[str, Any]:
            seen[name] = s.model_dump(mode="json")
            s.log[0].a = 99
            s.log[0].tags.append("m")
            s.raw[0]["k"].append(2)
            s.dd[0]["k"] = 5
            s.ll[0].append(7)
            s.bumped.append(0)
            return {"log": [{"a": 2}], "bumped": [10]} if name == "b" else {"raw": [1]}
        return fn

    g = Graph("meddle", N)
    g.add_node("a", a)
    g.add_node("b", meddler("b"), after=["a"])
    g.add_node("c", meddler("c"), after=["a"])
    g.add_node("d", lambda s: seen.__setitem__("d", s.model_dump(mode="json")), after=["b", "c"])
    rt = Runtime(store=MemoryStore())
    run = await rt.start(g, {"log": [], "raw": [], "dd": [], "ll": [], "bumped": []})
    assert run.status == RunStatus.SUCCEEDED, run.error
    after_a = {"log": [{"a": 1, "tags": ["x"]}], "raw": [{"k": [1]}], "dd": [{"k": 1}], "ll": [[1]], "bumped": [2]}
    assert seen["b"] == seen["c"] == after_a
    assert seen["d"] == {"log": [{"a": 1, "tags": ["x"]}, {"a": 2, "tags": []}], "raw": [{"k": [1]}, 1],
                         "dd": [{"k": 1}], "ll": [[1]], "bumped": [2, 11]}
    final = await rt.state_at((await rt.history(run.id))[-1].id)
    assert final.model_dump(mode="json") == seen["d"]
    assert {w.node: w.value for w in await rt.pending_writes(run.id)}["a"] == {
        "log": [{"a": 1, "tags": ["x"]}], "raw": [{"k": [1]}], "dd": [{"k": 1}], "ll": [[1]], "bumped": [1]}


class Broken(Mapping[str, Any]):
    """A Mapping that lists a key it cannot give."""

    def __iter__(self) -> Iterator[str]:
        return iter(["results"])

    def __len__(self) -> int:
        return 1

    def __getitem__(self, key: str) -> Any:
        raise KeyError(key)


async def test_a_mapping_that_cannot_be_read_fails_its_node() -> None:
    # a mapping whose items cannot be read fails its node and names why; the run goes on recording
    g = Graph("broken", M)
    g.add_node("a", lambda s: Broken())
    rt = Runtime(store=MemoryStore())
    run = await asyncio.wait_for(rt.start(g, {"items": [], "results": [], "total": 0}), 10)
    assert run.status == RunStatus.FAILED
    assert run.error is not None
    assert run.error["message"] == ("InvalidWrites: node 'a' returned a mapping whose items cannot be read: "
                                    "KeyError: 'results'")
