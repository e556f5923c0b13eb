"""``harness watch RUN``: a run's recorded events, read from the store, until it
ends or pauses — the same sequence a live stream of the run yields; a run that no
process drives any more is said to be so, once."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import BaseModel

from runtime import Graph, NodeContext, Runtime, SqlStore
from server.cli import main


class S(BaseModel):
    n: int = 0


def graph(entered: asyncio.Event | None = None, go: asyncio.Event | None = None) -> Graph:
    """``a`` waits for ``go`` when given one, after setting ``entered``."""
    g = Graph("watched", state=S)

    @g.node()
    async def a(state: S, ctx: NodeContext) -> dict:
        ctx.emit({"progress": 1})
        if entered is not None and go is not None:
            entered.set()
            await go.wait()
        return {"n": 1}

    @g.node(after=["a"])
    async def ask(state: S, ctx: NodeContext) -> dict:
        await ctx.interrupt({"question": "ok?"})
        return {"n": 2}

    return g


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "w.db")


def streamed_run(db: str) -> tuple[str, list[dict]]:
    async def go() -> tuple[str, list[dict]]:
        rt = Runtime(store=SqlStore(f"sqlite:///{db}"))
        try:
            events = [ev async for ev in rt.stream(graph(), {})]
        finally:
            rt.close()
        return events[0].run_id, [ev.to_json() for ev in events if not ev.ephemeral]
    return asyncio.run(go())


def test_watch_prints_the_recorded_stream_as_json_lines(db: str, capsys: pytest.CaptureFixture[str]):
    run_id, live = streamed_run(db)
    code = main(["watch", run_id, "--db", db, "--json"])
    out = capsys.readouterr().out
    assert code == 0
    assert [json.loads(line) for line in out.splitlines()] == live


def event_lines(out: str) -> list[str]:
    """The lines of ``watch`` that are events (``#seq`` recorded, ``~seq`` ephemeral)."""
    return [line for line in out.splitlines() if line[:1] in "#~"]


def test_watch_prints_one_line_per_event_and_the_run_at_the_end(db: str, capsys: pytest.CaptureFixture[str]):
    run_id, live = streamed_run(db)
    code = main(["--db", db, "watch", run_id])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    assert len(event_lines("\n".join(lines))) == len(live)
    assert lines[0].startswith("#1") and "run.created" in lines[0]
    assert "custom a (attempt 1)" in "\n".join(lines) and "interrupted" in lines[len(live)]


def test_watching_a_paused_run_ends_with_its_question_and_how_to_answer_it(
        db: str, capsys: pytest.CaptureFixture[str]):
    run_id, live = streamed_run(db)
    code = main(["--db", db, "watch", run_id])
    after = capsys.readouterr().out.splitlines()[len(live) + 1:]
    assert code == 0 and len(after) == 2, after
    assert after[0].startswith("waiting: interrupt int_") and "from node 'ask'" in after[0]
    assert '{"question": "ok?"}' in after[0]
    assert after[1].strip() == f"answer with: harness resume {run_id} --response '<json>'"


def test_watching_an_unknown_run_is_one_line_and_exit_2(db: str, capsys: pytest.CaptureFixture[str]):
    code = main(["watch", "run_nope", "--db", db])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "run_nope" in err


# ------------------------------------------------------------------ a run nobody drives

POLL = 0.02


class Past:
    """A clock an hour behind: the leases its runtime writes expired long ago, which is
    what the store shows of a run whose process was killed and never came back."""

    def time(self) -> float:
        return time.time() - 3600


class Output:
    """What the watch has printed so far (it prints from another thread)."""

    def __init__(self, capsys: pytest.CaptureFixture[str]):
        self.capsys, self.out, self.err = capsys, "", ""

    def read(self) -> Output:
        got = self.capsys.readouterr()
        self.out += got.out
        self.err += got.err
        return self


async def until(output: Output, seen: Callable[[Output], bool], within: float = 1.5) -> None:
    stop = time.monotonic() + within
    while not seen(output.read()):
        assert time.monotonic() < stop, f"not printed within {within}s: {output.out!r} {output.err!r}"
        await asyncio.sleep(POLL)


async def watch_held_run(db: str, capsys: pytest.CaptureFixture[str], *, past_lease: bool, json_out: bool,
                         while_held: Callable[[Output], bool]) -> tuple[int, str, Output, list[dict]]:
    """Watch a run held RUNNING in node ``a`` until ``while_held`` holds of the output, then
    let it go on to its question: (exit code, run id, output, the run's recorded stream)."""
    entered, go = asyncio.Event(), asyncio.Event()
    rt = Runtime(store=SqlStore(f"sqlite:///{db}"), clock=Past() if past_lease else None)
    task = asyncio.create_task(rt.start(graph(entered, go), {}))
    output = Output(capsys)
    try:
        await asyncio.wait_for(entered.wait(), 5)
        run_id = (await rt.runs())[0].id
        argv = ["watch", run_id, "--db", db, "--poll", str(POLL), *(["--json"] if json_out else [])]
        watching = asyncio.ensure_future(asyncio.to_thread(main, argv))
        try:
            await until(output, lambda o: '"node.start"' in o.out or "node.start a" in o.out)
            await until(output, while_held)
        finally:
            # the run goes on to its question (as it would once a process recovered it), so
            # the watch ends even when the test failed: its thread cannot be stopped otherwise
            go.set()
            await asyncio.wait_for(task, 5)
            code = await asyncio.wait_for(watching, 5)
        recorded = [ev.to_json() async for ev in rt.follow(run_id, poll=POLL)]
    finally:
        go.set()
        rt.close()
    return code, run_id, output.read(), recorded


def polls_later(n: int = 10) -> Callable[[Output], bool]:
    """A condition that holds once ``n`` more polls have passed (the watch looked again)."""
    stop = time.monotonic() + n * POLL
    return lambda _: time.monotonic() >= stop


async def test_watching_a_run_whose_lease_expired_says_once_that_nothing_drives_it_and_goes_on(
        db: str, capsys: pytest.CaptureFixture[str]):
    said_at: list[float] = []

    def said_and_polled_again(o: Output) -> bool:
        if "no process is driving it" in o.err and not said_at:
            said_at.append(time.monotonic())
        return bool(said_at) and time.monotonic() > said_at[0] + 10 * POLL

    code, run_id, output, recorded = await watch_held_run(
        db, capsys, past_lease=True, json_out=False, while_held=said_and_polled_again)
    notices = [line for line in output.err.splitlines() if "no process is driving it" in line]
    assert code == 0 and len(notices) == 1, output.err
    assert run_id in notices[0] and "expired" in notices[0] and f"harness resume {run_id}" in notices[0]
    lines = output.out.splitlines()
    # it kept following: every event, then the paused run
    assert len(event_lines(output.out)) == len(recorded) and "interrupted" in lines[len(recorded)]


async def test_the_notice_is_a_json_line_of_its_own_type_with_json(db: str, capsys: pytest.CaptureFixture[str]):
    code, run_id, output, recorded = await watch_held_run(
        db, capsys, past_lease=True, json_out=True, while_held=lambda o: "watch.orphaned" in o.out)
    lines = [json.loads(line) for line in output.out.splitlines()]
    notices = [line for line in lines if line["type"] == "watch.orphaned"]
    assert code == 0 and len(notices) == 1 and output.err == ""
    notice = notices[0]
    assert notice["run_id"] == run_id and notice["ephemeral"] is True
    assert notice["data"]["resume"] == f"harness resume {run_id}"
    assert notice["data"]["lease_expires_at"] < time.time() and notice["data"]["lease_owner"]
    # after every event recorded until then; the stream around it is unchanged
    assert notice["seq"] == max(line["seq"] for line in lines[:lines.index(notice)])
    assert [line for line in lines if line is not notice] == recorded


async def test_watching_a_run_whose_lease_is_live_says_nothing_of_the_sort(
        db: str, capsys: pytest.CaptureFixture[str]):
    code, _, output, recorded = await watch_held_run(
        db, capsys, past_lease=False, json_out=False, while_held=polls_later())
    assert code == 0 and output.err == ""
    assert len(event_lines(output.out)) == len(recorded)
