"""A field's reducer is part of a graph's structure: it decides every state folded from the
recorded writes. Changing one gives a new version, so history recorded under the old
reducer is read with it, and a run of the old version is not continued by the new code.
Runs recorded before versions named reducers keep being found by their code, as long as
its reducers are the ones their stored description names."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from runtime import Graph, InvalidRequest, Runtime, append
from runtime.graph import ExecutableGraph
from runtime.store.memory import MemoryStore


def _plain() -> type[BaseModel]:
    class Log(BaseModel):
        log: list[str] = []
    return Log


def _appended() -> type[BaseModel]:
    class Log(BaseModel):   # the same model, its field's reducer changed
        log: Annotated[list[str], append] = []
    return Log


Plain, Appended = _plain(), _appended()


def logging_graph(state: type[BaseModel], *, ask: bool = False) -> ExecutableGraph:
    g = Graph("reducer_versions", state=state)

    @g.node()
    def a(s: Any) -> dict[str, Any]:
        return {"log": ["a"]}

    @g.node(after=["a"])
    def b(s: Any, ctx: Any) -> dict[str, Any]:
        if ask:
            ctx.interrupt({"q": "go on?"})
        return {"log": ["b"]}

    @g.node(after=["b"])
    def c(s: Any) -> dict[str, Any]:
        return {"log": ["c"]}

    return g.compile()


def recorded_before_reducers_counted(graph: ExecutableGraph) -> ExecutableGraph:
    """``graph`` as a Runtime that did not count reducers in versions would have named it."""
    object.__setattr__(graph, "version", graph.legacy_version)
    return graph


def test_a_reducer_changes_the_version_and_no_version_is_another_graphs_legacy_one() -> None:
    plain, appended = logging_graph(Plain), logging_graph(Appended)
    assert plain.version != appended.version
    assert plain.legacy_version == appended.legacy_version   # before, both were this one
    assert plain.legacy_version not in (plain.version, appended.version)


async def test_history_recorded_under_the_old_reducer_is_read_with_it() -> None:
    store = MemoryStore()
    old = Runtime(store=store)
    run = await old.start(logging_graph(Plain), {})
    new = Runtime(store=store)
    new.register(logging_graph(Appended))   # the new code deployed
    states = [(await new.state_at(cp.id)).log for cp in await new.history(run.id)]
    assert states == [[], ["a"], ["b"], ["c"]]   # as recorded, not ['a', 'b'] after b


@pytest.mark.parametrize("recorded, now", [(Appended, Appended), (Plain, Plain)], ids=["append", "last_value"])
async def test_a_run_recorded_before_reducers_counted_goes_on_with_the_same_code(
        recorded: type[BaseModel], now: type[BaseModel]) -> None:
    store = MemoryStore()
    before = Runtime(store=store)
    run = await before.start(recorded_before_reducers_counted(logging_graph(recorded, ask=True)), {})
    assert run.graph_version == logging_graph(now).legacy_version
    same = Runtime(store=store)
    same.register(logging_graph(now, ask=True))
    done = await same.resume(run.id, True)
    assert done.status.value == "succeeded", done.error
    want = ["a", "b", "c"] if recorded is Appended else ["c"]
    assert (await same.state_at((await same.history(done.id))[-1].id)).log == want
    # a fork of it runs the same structure: under the version its source has, as an export says
    fork = await same.fork((await same.history(run.id))[1].id)
    assert fork.graph_version == run.graph_version and fork.status.value == "interrupted"
    document = await same.export_thread(run.id)
    elsewhere = Runtime(store=MemoryStore())
    elsewhere.register(logging_graph(now, ask=True))
    assert len(await elsewhere.import_thread(document)) == 2   # the run (resumed in place) and its fork


@pytest.mark.parametrize("recorded, now", [(Plain, Appended), (Appended, Plain)],
                         ids=["append added", "append dropped"])
async def test_a_run_recorded_before_reducers_counted_is_not_continued_by_code_whose_reducer_changed(
        recorded: type[BaseModel], now: type[BaseModel]) -> None:
    store = MemoryStore()
    before = Runtime(store=store)
    run = await before.start(recorded_before_reducers_counted(logging_graph(recorded, ask=True)), {})
    changed = Runtime(store=store)
    new = logging_graph(now, ask=True)
    assert new.legacy_version == run.graph_version != new.version
    changed.register(new)
    with pytest.raises(Exception, match="not registered"):
        await changed.resume(run.id, True)
    with pytest.raises(InvalidRequest, match="was made by graph version"):
        await changed.resume(run.id, True, graph=new)
    assert [r.id for r in await changed.runs()] == [run.id]


@pytest.mark.parametrize("recorded, now", [(Plain, Appended), (Appended, Plain)],
                         ids=["append added", "append dropped"])
async def test_history_recorded_before_reducers_counted_is_read_as_recorded(
        recorded: type[BaseModel], now: type[BaseModel]) -> None:
    store = MemoryStore()
    run = await Runtime(store=store).start(recorded_before_reducers_counted(logging_graph(recorded)), {})
    changed = Runtime(store=store)
    changed.register(logging_graph(now))
    want = [[], ["a"], ["a", "b"], ["a", "b", "c"]] if recorded is Appended else [[], ["a"], ["b"], ["c"]]
    assert [(await changed.state_at(cp.id)).log for cp in await changed.history(run.id)] == want


async def test_an_imported_legacy_run_goes_on_in_the_process_that_imported_it() -> None:
    """The import looks the code up before it stores the version's description: that first
    answer must not stick."""
    before = Runtime(store=MemoryStore())
    run = await before.start(recorded_before_reducers_counted(logging_graph(Appended, ask=True)), {})
    document = await before.export_thread(run.id)
    here = Runtime(store=MemoryStore())
    here.register(logging_graph(Appended, ask=True))
    await here.import_thread(document)
    done = await here.resume(run.id, True)
    assert done.status.value == "succeeded", done.error


async def test_graphs_sharing_a_legacy_version_are_told_apart_by_their_reducers() -> None:
    store = MemoryStore()
    run = await Runtime(store=store).start(recorded_before_reducers_counted(logging_graph(Plain, ask=True)), {})
    both = Runtime(store=store)
    both.register(logging_graph(Plain, ask=True))
    both.register(logging_graph(Appended, ask=True))   # registered last: it must not hide the other
    done = await both.resume(run.id, True)
    assert done.status.value == "succeeded", done.error
    assert (await both.state_at((await both.history(done.id))[-1].id)).log == ["c"]


async def test_a_description_written_before_descriptions_named_reducers_cannot_tell_and_is_taken_as_the_same() -> None:
    store = MemoryStore()
    run = await Runtime(store=store).start(recorded_before_reducers_counted(logging_graph(Appended, ask=True)), {})
    store._graphs[run.graph_version].pop("reducers")   # as such a store holds it
    later = Runtime(store=store)
    later.register(logging_graph(Appended, ask=True))
    assert (await later.resume(run.id, True)).status.value == "succeeded"
