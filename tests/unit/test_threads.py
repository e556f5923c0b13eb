"""Conversation threads: ``start(graph, input, thread_id=T)`` after a finished run of T
is a new turn that starts from T's latest state with the input applied through the
reducers; storage per turn grows with what the turn wrote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, ConfigDict, model_validator

from runtime import (
    CheckpointSource,
    Graph,
    InvalidRequest,
    MemoryStore,
    NodeContext,
    NotFound,
    RunKind,
    Runtime,
    RunStatus,
    SqlStore,
    append,
    reducer,
)


class Chat(BaseModel):
    messages: Annotated[list[str], append] = []
    user: str = "anon"
    turns: int = 0


def chat_graph() -> Graph:
    g = Graph("chat", state=Chat)

    @g.node()
    def reply(state: Chat) -> dict:
        last = state.messages[-1]
        return {"messages": [f"echo[{len(state.messages)}] {last}"], "turns": state.turns + 1}

    return g


async def test_a_second_start_on_a_thread_continues_from_its_state(rt: Runtime):
    g = chat_graph()
    first = await rt.start(g, {"messages": ["hi"], "user": "ada"}, thread_id="t1")
    second = await rt.start(g, {"messages": ["how are you?"]}, thread_id="t1")
    assert second.status == RunStatus.SUCCEEDED
    state = await rt.thread_state("t1")
    assert state.messages == ["hi", "echo[1] hi", "how are you?", "echo[3] how are you?"]
    # a field the turn did not give keeps its value: defaults never overwrite the thread
    assert state.user == "ada" and state.turns == 2
    assert (second.kind, second.parent_run_id, second.thread_id) == (RunKind.MAIN, first.id, "t1")
    assert second.base_checkpoint_id == (await rt.history(first.id))[-1].id


async def test_a_turn_stores_only_its_input(rt: Runtime):
    g = chat_graph()
    await rt.start(g, {"messages": ["hi"], "user": "ada"}, thread_id="t1")
    second = await rt.start(g, {"messages": ["again"]}, thread_id="t1")
    assert dict(second.input) == {"messages": ["again"]}
    first_cp = (await rt.history(second.id))[0]
    assert first_cp.source == CheckpointSource.TURN and first_cp.snapshot is None
    assert (await rt.state_at(first_cp.id)).messages == ["hi", "echo[1] hi", "again"]


async def test_runs_of_a_thread_are_listed_newest_first(rt: Runtime):
    g = chat_graph()
    ids = [(await rt.start(g, {"messages": [str(i)]}, thread_id="t")).id for i in range(3)]
    await rt.start(g, {"messages": ["elsewhere"]}, thread_id="other")
    assert [r.id for r in await rt.runs(thread_id="t")] == ids[::-1]


async def test_a_new_turn_waits_for_a_paused_run_of_the_thread(rt: Runtime):
    g = Graph("ask", state=Chat)

    @g.node()
    async def ask(state: Chat, ctx: NodeContext) -> dict:
        return {"messages": [str(await ctx.interrupt({"q": "name?"}))]}

    paused = await rt.start(g, {"messages": ["hi"]}, thread_id="t")
    with pytest.raises(InvalidRequest, match=f"{paused.id} is interrupted"):
        await rt.start(g, {"messages": ["next"]}, thread_id="t")
    assert [r.id for r in await rt.runs(thread_id="t")] == [paused.id]
    await rt.resume(paused.id, "ada")
    newer = Graph("ask", state=Chat)   # a new version of the thread's graph is fine
    newer.add_node("reply", lambda s: {"messages": [f"echo {s.messages[-1]}"]})
    nxt = await rt.start(newer, {"messages": ["next"]}, thread_id="t")
    assert (await rt.thread_state("t")).messages == ["hi", "ada", "next", "echo next"]
    assert nxt.parent_run_id == paused.id


async def test_a_new_turn_beside_a_running_one_says_resume_recovers_it_if_its_process_stopped(rt: Runtime):
    import asyncio

    gate = asyncio.Event()
    g = Graph("slow", state=Chat)

    @g.node()
    async def think(state: Chat) -> dict:
        await gate.wait()
        return {"messages": ["done"]}

    first = asyncio.create_task(rt.start(g, {"messages": ["hi"]}, thread_id="busy"))
    while not await rt.runs(thread_id="busy"):
        await asyncio.sleep(0.01)
    with pytest.raises(InvalidRequest, match="is running; wait for it, or resume it if its process stopped"):
        await rt.start(g, {"messages": ["next"]}, thread_id="busy")
    gate.set()
    assert (await first).status == RunStatus.SUCCEEDED


async def test_a_turn_after_a_failed_turn_starts_from_what_it_finished(rt: Runtime):
    g = Graph("flaky", state=Chat)

    @g.node()
    def a(state: Chat) -> dict:
        return {"messages": ["a"]}

    @g.node(after=["a"])
    def b(state: Chat) -> dict:
        if state.messages[-2] == "boom":   # this turn's message
            raise ValueError("boom")
        return {"messages": ["b"]}

    failed = await rt.start(g, {"messages": ["boom"]}, thread_id="t")
    assert failed.status == RunStatus.FAILED
    await rt.start(g, {"messages": ["fine"]}, thread_id="t")
    assert (await rt.thread_state("t")).messages == ["boom", "a", "fine", "a", "b"]


async def test_a_turn_need_not_give_a_required_field_the_thread_has(rt: Runtime):
    class Session(BaseModel):
        user: str   # required: given by the first turn only
        messages: Annotated[list[str], append] = []

    g = Graph("session", state=Session)
    g.add_node("reply", lambda s: {"messages": [f"hello {s.user}"]})
    await rt.start(g, {"user": "ada", "messages": ["hi"]}, thread_id="t")
    second = await rt.start(g, {"messages": ["again"]}, thread_id="t")
    assert second.status == RunStatus.SUCCEEDED and dict(second.input) == {"messages": ["again"]}
    assert (await rt.thread_state("t")).messages == ["hi", "hello ada", "again", "hello ada"]
    with pytest.raises(InvalidRequest, match="user: Field required"):   # a new thread still needs it
        await rt.start(g, {"messages": ["hi"]}, thread_id="new")


async def test_an_input_that_does_not_fit_the_threads_state_is_refused(rt: Runtime):
    await rt.start(chat_graph(), {"messages": ["hi"]}, thread_id="t")
    with pytest.raises(InvalidRequest, match="turns"):
        await rt.start(chat_graph(), {"turns": "many"}, thread_id="t")
    assert len(await rt.runs(thread_id="t")) == 1


async def test_a_turn_is_validated_with_the_threads_values_not_the_defaults(rt: Runtime):
    """A model validator comparing fields sees the thread's value of a field the turn
    leaves out, not its default: the state the turn gives is what must fit."""
    class Range(BaseModel):
        low: int = 0
        high: int = 0

        @model_validator(mode="after")
        def ordered(self) -> "Range":
            if self.low > self.high:
                raise ValueError("low must not exceed high")
            return self

    g = Graph("range", state=Range)
    g.add_node("noop", lambda s: None)
    await rt.start(g, {"high": 5}, thread_id="t")
    assert (await rt.start(g, {"low": 3}, thread_id="t")).status == RunStatus.SUCCEEDED
    assert (await rt.thread_state("t")).model_dump() == {"low": 3, "high": 5}
    with pytest.raises(InvalidRequest, match="low must not exceed high"):   # still checked
        await rt.start(g, {"low": 9}, thread_id="t")
    assert len(await rt.runs(thread_id="t")) == 2


async def test_a_turn_input_a_custom_reducer_refuses_is_an_invalid_request(rt: Runtime):
    def capped(current: Any, update: Any) -> Any:
        out = [*(current or []), *update]
        if len(out) > 2:
            raise ValueError("the history is full")
        return out

    class Capped(BaseModel):
        messages: Annotated[list[str], reducer(capped)] = []

    g = Graph("capped", state=Capped)
    g.add_node("noop", lambda s: None)
    await rt.start(g, {"messages": ["a"]}, thread_id="t")
    with pytest.raises(InvalidRequest, match="reducer raised ValueError: the history is full"):
        await rt.start(g, {"messages": ["b", "c"]}, thread_id="t")
    assert (await rt.thread_state("t")).messages == ["a"] and len(await rt.runs(thread_id="t")) == 1


async def test_the_state_of_an_unknown_thread_is_not_found(rt: Runtime):
    with pytest.raises(NotFound):
        await rt.thread_state("nope")


async def test_fork_and_replay_inside_a_later_turn_start_from_the_threads_state(rt: Runtime):
    g = chat_graph()
    await rt.start(g, {"messages": ["hi"]}, thread_id="t")
    second = await rt.start(g, {"messages": ["two"]}, thread_id="t")
    first_cp = (await rt.history(second.id))[0]
    fork = await rt.fork(first_cp.id)
    assert fork.status == RunStatus.SUCCEEDED
    fork_state = await rt.state_at((await rt.history(fork.id))[-1].id)
    assert fork_state.messages == ["hi", "echo[1] hi", "two", "echo[3] two"]
    report = await rt.replay(second.id)
    assert report.same


async def test_a_replay_continued_after_it_failed_is_not_what_the_next_turn_follows(rt: Runtime):
    """A replay compares a turn with the past; resumed, its continuation does too: the thread
    goes on from its latest turn, and numbers the next one after it."""
    flaky = {"on": False}
    g = Graph("chat", state=Chat)

    @g.node()
    def reply(state: Chat) -> dict:
        if flaky["on"]:
            raise RuntimeError("model unavailable")
        return {"messages": [f"echo {state.messages[-1]}"]}

    first = await rt.start(g, {"messages": ["hi"]}, thread_id="r")
    await rt.start(g, {"messages": ["two"]}, thread_id="r")
    flaky["on"] = True
    replay = await rt.replay(first.id)
    flaky["on"] = False
    assert (await rt.get_run(replay.run_id)).status == RunStatus.FAILED
    continued = await rt.resume(replay.run_id)
    assert (continued.kind, continued.status) == (RunKind.CONTINUATION, RunStatus.SUCCEEDED)
    assert (await rt.thread_state("r")).messages == ["hi", "echo hi", "two", "echo two"]
    third = await rt.start(g, {"messages": ["three"]}, thread_id="r")
    assert third.options["turn"] == 3
    assert (await rt.thread_state("r")).messages == ["hi", "echo hi", "two", "echo two", "three", "echo three"]


async def test_a_thread_is_read_back_by_another_runtime(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 't.db'}"
    rt = Runtime(store=SqlStore(url))
    for word in ("a", "b", "c"):
        await rt.start(chat_graph(), {"messages": [word]}, thread_id="t")
    rt.close()
    other = Runtime(store=SqlStore(url), graphs=[chat_graph()])
    try:   # nothing remembered in memory: every state is rebuilt from the store
        assert (await other.thread_state("t")).messages == ["a", "echo[1] a", "b", "echo[3] b", "c", "echo[5] c"]
        await other.start(chat_graph(), {"messages": ["d"]}, thread_id="t")
        assert (await other.thread_state("t")).turns == 4
    finally:
        other.close()


async def test_a_200_turn_thread_sees_every_turn_and_storage_grows_linearly(tmp_path: Path):
    path = tmp_path / "chat.db"
    message = "x" * 200
    sizes = []
    for half in range(2):
        rt = Runtime(store=SqlStore(f"sqlite:///{path}"), graphs=[chat_graph()])
        try:
            for turn in range(100 * half + 1, 100 * half + 101):
                run = await rt.start(chat_graph(), {"messages": [f"{turn} {message}"]}, thread_id="long")
                assert run.status == RunStatus.SUCCEEDED
        finally:
            rt.close()
        sizes.append(path.stat().st_size)
    rt = Runtime(store=SqlStore(f"sqlite:///{path}"), graphs=[chat_graph()])
    try:
        state = await rt.thread_state("long")
    finally:
        rt.close()
    assert state.turns == 200 and len(state.messages) == 400
    assert state.messages[-1] == f"echo[399] 200 {message}"
    # the second hundred turns cost about what the first did (a snapshot per turn: ~3×)
    assert sizes[1] - sizes[0] <= 1.5 * sizes[0]


async def test_a_thread_of_turns_exports_and_imports_into_another_store(rt: Runtime, tmp_path: Path):
    for word in ("a", "b", "c"):
        last = await rt.start(chat_graph(), {"messages": [word]}, thread_id="t")
    doc = await rt.export_thread(last.id)
    other = Runtime(store=SqlStore(f"sqlite:///{tmp_path / 'other.db'}"), graphs=[chat_graph()])
    try:
        imported = await other.import_thread(doc)
        assert len(imported) == 3
        assert (await other.thread_state("t")).messages == ["a", "echo[1] a", "b", "echo[3] b", "c", "echo[5] c"]
        await other.start(chat_graph(), {"messages": ["d"]}, thread_id="t")
        assert (await other.thread_state("t")).turns == 4
    finally:
        other.close()


async def test_a_thread_is_not_imported_into_a_store_that_has_a_thread_of_that_id(rt: Runtime, other_store):
    last = await rt.start(chat_graph(), {"messages": ["from here"]}, thread_id="t")
    other = Runtime(store=other_store, graphs=[chat_graph()])
    try:
        await other.start(chat_graph(), {"messages": ["from there"]}, thread_id="t")
        with pytest.raises(InvalidRequest, match="thread t already exists in this store"):
            await other.import_thread(await rt.export_thread(last.id))
        assert len(await other.runs(thread_id="t")) == 1
        assert (await other.thread_state("t")).messages == ["from there", "echo[1] from there"]
    finally:
        other.close()


async def test_an_imported_thread_id_is_held_to_the_rule_of_a_started_one(rt: Runtime, other_store):
    """A document may name a thread id no ``start`` would take (too long to index): refused
    by name, and nothing is written."""
    last = await rt.start(chat_graph(), {"messages": ["hi"]}, thread_id="t")
    doc = await rt.export_thread(last.id)

    def renamed(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: ("t" * 501 if k == "thread_id" else renamed(v)) for k, v in value.items()}
        return [renamed(v) for v in value] if isinstance(value, list) else value

    other = Runtime(store=other_store, graphs=[chat_graph()])
    try:
        with pytest.raises(InvalidRequest, match="thread_id: must be a non-empty string of at most 500 characters"):
            await other.import_thread(renamed(doc))
        assert await other.runs() == []
    finally:
        other.close()


async def test_a_store_accepts_only_one_next_turn_per_run(rt: Runtime):
    """Two processes starting a turn at once both read the same latest run: the store
    lets one of them follow it, never both (no turn silently drops out of the thread)."""
    from runtime.core.records import Batch

    await rt.start(chat_graph(), {"messages": ["hi"]}, thread_id="t")
    second = await rt.start(chat_graph(), {"messages": ["two"]}, thread_id="t")
    rival = second.evolve(id="run_rival")
    with pytest.raises(InvalidRequest, match=f"already followed by turn {second.id}"):
        rt.store.create_run(Batch(run_id=rival.id, run=rival))
    assert len(await rt.runs(thread_id="t")) == 2


async def test_resuming_a_failed_turn_that_a_later_turn_followed_is_refused(rt: Runtime):
    g = Graph("flaky", state=Chat)

    @g.node()
    def a(state: Chat) -> dict:
        if state.messages[-1] == "boom":
            raise ValueError("boom")
        return {"messages": ["ok"]}

    failed = await rt.start(g, {"messages": ["boom"]}, thread_id="t")
    later = await rt.start(g, {"messages": ["fine"]}, thread_id="t")
    with pytest.raises(InvalidRequest, match=f"followed by turn {later.id}.*fork it instead"):
        await rt.resume(failed.id)
    assert (await rt.thread_state("t")).messages == ["boom", "fine", "ok"]


async def test_a_turn_must_run_the_threads_graph(rt: Runtime):
    await rt.start(chat_graph(), {"messages": ["hi"]}, thread_id="t")
    other = Graph("counter", state=Chat)
    other.add_node("a", lambda s: None)
    with pytest.raises(InvalidRequest, match="runs graph 'chat'"):
        await rt.start(other, {}, thread_id="t")


@pytest.mark.parametrize("thread_id", ["", "  ", 5, ["x"]])
async def test_a_thread_id_must_be_a_non_empty_string(rt: Runtime, thread_id):
    with pytest.raises(InvalidRequest, match="thread_id"):
        await rt.start(chat_graph(), {"messages": ["hi"]}, thread_id=thread_id)
    assert await rt.runs() == []


async def test_turn_numbers_continue_through_a_continuation(rt: Runtime):
    g = Graph("flaky", state=Chat)
    fail = {"on": True}

    @g.node()
    def a(state: Chat) -> dict:
        if fail["on"]:
            raise ValueError("boom")
        return {"messages": ["ok"]}

    await rt.start(g, {"messages": ["1"]}, thread_id="t")          # turn 1 fails
    fail["on"] = False
    cont = await rt.resume((await rt.runs(thread_id="t"))[0].id)   # its continuation succeeds
    nxt = await rt.start(g, {"messages": ["2"]}, thread_id="t")
    assert nxt.parent_run_id == cont.id and nxt.options["turn"] == 2


async def test_a_threads_states_are_read_where_its_graph_code_is_not(tmp_path: Path):
    """Delta checkpoints are rebuilt from the stored description (built-in reducers)."""
    url = f"sqlite:///{tmp_path / 't.db'}"
    rt = Runtime(store=SqlStore(url))
    for word in ("a", "b", "c"):   # turn 3 ends without a full snapshot
        last = await rt.start(chat_graph(), {"messages": [word]}, thread_id="t")
    rt.close()
    assert (await _history_snapshots(url, last.id)) == [False, False]
    elsewhere = Runtime(store=SqlStore(url))   # no graphs registered, none importable
    try:
        state = await elsewhere.thread_state("t")
        assert state.messages == ["a", "echo[1] a", "b", "echo[3] b", "c", "echo[5] c"]  # type: ignore[attr-defined]
        cps = await elsewhere.history(last.id)
        assert (await elsewhere.state_at(cps[0].id)).messages[-1] == "c"  # type: ignore[attr-defined]
        assert [c.path for c in await elsewhere.diff(cps[0].id, cps[-1].id)] == [("messages", 5), ("turns",)]
    finally:
        elsewhere.close()


async def _history_snapshots(url: str, run_id: str) -> list[bool]:
    rt = Runtime(store=SqlStore(url))
    try:
        return [cp.snapshot is not None for cp in await rt.history(run_id)]
    finally:
        rt.close()


async def test_a_thread_whose_later_turns_leave_out_a_required_field_imports(rt: Runtime, other_store):
    """A later turn's input lacks the required field the first turn gave: the import's
    check of its writes must not call that field missing (the thread's state has it)."""
    class Session(BaseModel):
        user: str
        messages: Annotated[list[str], append] = []

    def session() -> Graph:
        g = Graph("session", state=Session)
        g.add_node("reply", lambda s: {"messages": [f"hello {s.user}"]})
        return g

    await rt.start(session(), {"user": "ada", "messages": ["hi"]}, thread_id="t")
    last = await rt.start(session(), {"messages": ["again"]}, thread_id="t")
    other = Runtime(store=other_store, graphs=[session()])
    try:
        assert len(await other.import_thread(await rt.export_thread(last.id))) == 2
        assert (await other.thread_state("t")).messages == ["hi", "hello ada", "again", "hello ada"]
        # what a turn's node writes is still checked
        doc = await rt.export_thread(last.id)
        turn = next(r for r in doc["runs"] if r["run"]["id"] == last.id)   # type: ignore[index, union-attr]
        turn["pending_writes"][0]["value"] = {"messages": [1.5]}
        with pytest.raises(InvalidRequest, match=r"messages\.\d: Input should be a valid string") as e:
            await Runtime(store=MemoryStore(), graphs=[session()]).import_thread(doc)
        assert "user" not in str(e.value)
    finally:
        other.close()


async def _chat_turns(rt: Runtime, words: list[str], thread_id: str = "t") -> list[Any]:
    return [await rt.start(chat_graph(), {"messages": [w]}, thread_id=thread_id) for w in words]


async def test_the_turn_after_a_fork_of_turn_k_is_turn_k_plus_1(rt: Runtime):
    *_, third = await _chat_turns(rt, ["a", "b", "c"])
    await _chat_turns(rt, ["d"])
    fork = await rt.fork((await rt.history(third.id))[-1].id)   # continues turn 3
    after_fork = (await _chat_turns(rt, ["e"]))[0]
    assert after_fork.parent_run_id == fork.id and after_fork.options["turn"] == 4
    # a fork of a fork, and a replay (which the next turn does not follow), keep the turn
    refork = await rt.fork((await rt.history(fork.id))[-1].id)
    await rt.replay(after_fork.id)
    nxt = (await _chat_turns(rt, ["f"]))[0]
    assert nxt.parent_run_id == refork.id and nxt.options["turn"] == 4
    assert (await _chat_turns(rt, ["g"]))[0].options["turn"] == 5


async def test_the_snapshot_schedule_after_a_fork_follows_the_turn_numbers(rt: Runtime):
    *_, third = await _chat_turns(rt, ["a", "b", "c"])
    await rt.fork((await rt.history(third.id))[-1].id)
    later = await _chat_turns(rt, ["d", "e", "f", "g", "h"])
    numbers = [r.options["turn"] for r in later]
    ends = [(await rt.history(r.id))[-1].snapshot is not None for r in later]
    assert numbers == [4, 5, 6, 7, 8]
    assert ends == [True, False, False, False, True]   # turns 1, 2, 4, 8, … snapshot at their end


async def test_a_thread_with_forks_stores_its_turns_snapshots_linearly(rt: Runtime):
    """Every fourth turn is forked and the thread goes on from the fork: the turns'
    full snapshots still add up to about twice the final state."""
    message = "x" * 200
    for turn in range(1, 65):
        last = (await _chat_turns(rt, [f"{turn} {message}"]))[0]
        if turn % 4 == 0:
            await rt.fork((await rt.history(last.id))[-1].id)
    turns = [r for r in await rt.runs(thread_id="t", limit=1000) if r.kind == RunKind.MAIN]
    assert len(turns) == 64
    stored = 0
    for r in turns:
        stored += sum(len(json.dumps(cp.snapshot)) for cp in await rt.history(r.id) if cp.snapshot is not None)
    final = len(json.dumps((await rt.thread_state("t")).model_dump(mode="json")))
    assert stored <= 3 * final


async def test_an_imported_thread_numbers_the_turn_after_a_fork_as_it_was_numbered(rt: Runtime, tmp_path: Path):
    *_, third = await _chat_turns(rt, ["a", "b", "c"])
    fork = await rt.fork((await rt.history(third.id))[-1].id)
    doc = await rt.export_thread(fork.id)
    other = Runtime(store=SqlStore(f"sqlite:///{tmp_path / 'other.db'}"), graphs=[chat_graph()])
    try:
        await other.import_thread(doc)
        assert (await other.start(chat_graph(), {"messages": ["d"]}, thread_id="t")).options["turn"] == 4
    finally:
        other.close()


class NotesV1(BaseModel):
    notes: Annotated[list[str], append] = []
    draft: str = ""


class NotesV2(BaseModel):
    """Version 2 of the notes graph's state: ``draft`` was removed."""

    notes: Annotated[list[str], append] = []


class NotesV2Strict(NotesV2):
    model_config = ConfigDict(extra="forbid")


class NotesOpen(BaseModel):
    """Version 2 that keeps whatever it does not know."""

    model_config = ConfigDict(extra="allow")
    notes: Annotated[list[str], append] = []


def notes_graph(state: type[BaseModel]) -> Graph:
    g = Graph("notes", state=state)

    @g.node()
    def take(state: Any) -> dict[str, Any]:
        return {"notes": [f"seen {len(state.notes)}"]}

    return g


@pytest.mark.parametrize("v2", [NotesV2, NotesV2Strict])
async def test_a_field_the_new_graph_version_removed_is_dropped_from_the_thread(rt: Runtime, v2: type[BaseModel]):
    await rt.start(notes_graph(NotesV1), {"notes": ["a"], "draft": "unsent"}, thread_id="t")
    turn = await rt.start(notes_graph(v2), {"notes": ["b"]}, thread_id="t")
    assert turn.status == RunStatus.SUCCEEDED
    assert turn.options["dropped_fields"] == ["draft"]   # the turn says what it left behind
    assert (await rt.thread_state("t")).model_dump() == {"notes": ["a", "seen 1", "b", "seen 3"]}
    cps = await rt.history(turn.id)
    assert "draft" not in cps[-1].snapshot and "draft" not in (await rt.state_at(cps[0].id)).model_dump()
    again = await rt.start(notes_graph(v2), {"notes": ["c"]}, thread_id="t")
    assert "dropped_fields" not in again.options   # dropped once, by the turn that left it


async def test_a_dropped_field_stays_dropped_where_the_graph_code_is_not(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 't.db'}"
    rt = Runtime(store=SqlStore(url))
    try:
        await rt.start(notes_graph(NotesV1), {"notes": ["a"], "draft": "unsent"}, thread_id="t")
        turn = await rt.start(notes_graph(NotesV2), {"notes": ["b"]}, thread_id="t")
    finally:
        rt.close()
    elsewhere = Runtime(store=SqlStore(url))   # no graphs: states are rebuilt from the store
    try:
        first = (await elsewhere.history(turn.id))[0]
        assert (await elsewhere.state_at(first.id)).model_dump() == {"notes": ["a", "seen 1", "b"]}
    finally:
        elsewhere.close()


async def test_a_state_model_that_allows_extra_fields_keeps_them_across_versions(rt: Runtime):
    await rt.start(notes_graph(NotesV1), {"notes": ["a"], "draft": "unsent"}, thread_id="t")
    turn = await rt.start(notes_graph(NotesOpen), {"notes": ["b"]}, thread_id="t")
    assert turn.status == RunStatus.SUCCEEDED and "dropped_fields" not in turn.options
    assert (await rt.thread_state("t")).model_dump() == {"notes": ["a", "seen 1", "b", "seen 3"], "draft": "unsent"}


async def test_a_thread_whose_turn_dropped_a_field_exports_and_imports(rt: Runtime, other_store):
    await rt.start(notes_graph(NotesV1), {"notes": ["a"], "draft": "unsent"}, thread_id="t")
    await rt.start(notes_graph(NotesV2Strict), {"notes": ["b"]}, thread_id="t")
    last = await rt.start(notes_graph(NotesV2Strict), {"notes": ["c"]}, thread_id="t")   # no full snapshot
    doc = await rt.export_thread(last.id)
    other = Runtime(store=other_store, graphs=[notes_graph(NotesV1), notes_graph(NotesV2Strict)])
    await other.import_thread(doc)
    assert (await other.thread_state("t")).model_dump() == {"notes": ["a", "seen 1", "b", "seen 3", "c", "seen 5"]}


async def test_a_thread_value_the_new_version_refuses_is_not_blamed_on_the_input(rt: Runtime):
    """A new version that changed a field's type refuses the thread's value of it: the
    error says the value is the thread's (to replace in the input), not the input's."""
    class Counted(BaseModel):
        notes: Annotated[list[str], append] = []
        count: int = 0

    class CountedV2(BaseModel):
        notes: Annotated[list[str], append] = []
        count: str = ""    # was an int
        lang: str          # new, required

    await rt.start(notes_graph(Counted), {"notes": ["a"], "count": 3}, thread_id="t")
    with pytest.raises(InvalidRequest) as e:
        await rt.start(notes_graph(CountedV2), {"notes": ["b"]}, thread_id="t")
    message = str(e.value)
    assert message.startswith("the thread's state with this input does not fit CountedV2: ")
    assert "lang: Field required" in message
    assert "(the thread's value of count, not the input's: give count to replace it)" in message
    with pytest.raises(InvalidRequest, match="^input does not fit CountedV2: count: Input should be a valid string$"):
        await rt.start(notes_graph(CountedV2), {"count": 4, "lang": "en"}, thread_id="t")
    assert len(await rt.runs(thread_id="t")) == 1
    turn = await rt.start(notes_graph(CountedV2), {"count": "four", "lang": "en"}, thread_id="t")
    assert turn.status == RunStatus.SUCCEEDED
