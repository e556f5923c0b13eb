"""A state model with aliases: a run keeps its state by field name, so a model that takes
only its aliases would lose the run's input and every write (the run succeeding on
defaults). Such a model is refused when the graph compiles, naming the field and the
fix; with ``validate_by_name=True`` it runs as any other, on every store."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import pytest
from pydantic import AliasChoices, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from runtime import Graph, GraphError, Runtime, SqlStore, append


class Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel)
    user_name: str = "anon"
    turn_count: int = 0


class CamelByName(Camel):
    model_config = ConfigDict(alias_generator=to_camel, validate_by_name=True)


class Note(BaseModel):
    body_text: str = Field("", alias="bodyText")


class Notes(BaseModel):
    notes: Annotated[list[Note], append] = []


def chat(state: type[BaseModel]) -> Graph:
    g = Graph("aliased_chat", state=state)

    @g.node()
    def b(s):
        return {"user_name": "bob", "turn_count": s.turn_count + 1}

    @g.node(after=["b"])
    def c(s):
        return {"turn_count": s.turn_count + 10}

    return g


def test_a_state_model_that_takes_only_its_aliases_is_refused_naming_the_field_and_the_fix():
    with pytest.raises(GraphError) as e:
        chat(Camel).compile()
    text = str(e.value)
    assert "field 'user_name' of Camel has the alias 'userName' (and 1 more)" in text
    assert "validate_by_name=True" in text


class TakesNames(BaseModel):
    full_name: str = Field("", validation_alias=AliasChoices("full_name", "fullName"))
    nick: str = Field("", alias="nickName", validation_alias="nick")


def test_a_model_whose_validation_takes_the_field_names_runs():
    g = Graph("named_aliases", state=TakesNames)
    g.add_node("a", lambda s: {"full_name": s.full_name + "!", "nick": s.nick + "?"})

    async def go() -> None:
        rt = Runtime()
        run = await rt.start(g, {"full_name": "Ada", "nick": "ada"})
        state = await rt.state_at((await rt.history(run.id))[-1].id)
        assert (state.full_name, state.nick) == ("Ada!", "ada?")
    asyncio.run(go())


def test_a_nested_model_with_aliases_is_refused_at_its_path():
    g = Graph("aliased_notes", state=Notes)
    g.add_node("a", lambda s: {"notes": [{"body_text": "hi"}]})
    with pytest.raises(GraphError) as e:
        g.compile()
    assert "state Notes.notes" in str(e.value) and "'body_text' of Note has the alias 'bodyText'" in str(e.value)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_model_with_aliases_that_validates_by_name_keeps_input_and_writes(kind: str, tmp_path: Path):
    async def go() -> None:
        rt = Runtime() if kind == "memory" else Runtime(store=SqlStore(f"sqlite:///{tmp_path / 'a.db'}"))
        try:
            run = await rt.start(chat(CamelByName), {"user_name": "al", "turn_count": 5})
            cps = await rt.history(run.id)
            state = await rt.state_at(cps[-1].id)
            assert (state.user_name, state.turn_count) == ("bob", 16)
            fork = await rt.fork(cps[1].id, patch={"turn_count": 100})
            assert (await rt.state_at((await rt.history(fork.id))[-1].id)).turn_count == 110
        finally:
            rt.close()
    asyncio.run(go())


@pytest.mark.parametrize("name", ["a\x00b", " ", "g" * 5000])
def test_a_graph_name_a_store_cannot_hold_is_refused(name: str):
    g = Graph(name)
    g.add_node("a", lambda s: None)
    with pytest.raises(GraphError, match="a graph's name must"):
        g.compile()
