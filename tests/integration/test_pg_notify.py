"""On PostgreSQL, a process hears at once what another leaves for it, instead of at its next
poll: a cancel for a run it drives (it reads cancels at its heartbeat, here 20 s), answers
to a question of such a run, and — for a worker — a run queued (it polls every 20 s here).
The message itself is read from the store as before; a notification only says to look."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from runtime import Graph, NodeContext, Runtime, RunStatus, SqlStore
from runtime.core.left import ANY, QUEUED, REQUEST

ROOT = Path(__file__).resolve().parents[2]
#: far longer than any wait below: a message found by polling would fail the test
SLOW = 20.0


class S(BaseModel):
    answer: str = ""
    done: bool = False


def graph() -> Graph:
    g = Graph("notified", state=S)

    @g.node()
    def ask(state: S, ctx: NodeContext) -> dict[str, Any]:
        return {"answer": str(ctx.interrupt({"question": "go?"}))}

    @g.node()
    async def busy(state: S) -> dict[str, Any]:   # keeps the run going while the question waits
        await asyncio.sleep(SLOW * 2)
        return {"done": True}

    return g


def heard_within(store: SqlStore, run_id: str, status: RunStatus, seconds: float) -> float:
    start = time.monotonic()
    while store.get_run(run_id).status != status:
        assert time.monotonic() - start < seconds, f"run {run_id} still {store.get_run(run_id).status.value}"
        time.sleep(0.02)
    return time.monotonic() - start


async def driven(url: str) -> tuple[Runtime, asyncio.Task[Any], str]:
    """A run driven in this Runtime (heartbeat SLOW), its question asked, its other node busy."""
    rt = Runtime(store=SqlStore(url), lease_ttl=SLOW * 3, heartbeat=SLOW)
    run = await rt.submit(graph(), {})
    task = asyncio.create_task(rt.resume(run.id))
    while not rt.store.interrupts(run.id):
        await asyncio.sleep(0.02)
    assert rt.store._listener is not None and rt.store._listener.connected.wait(5)
    return rt, task, run.id


def test_a_cancel_from_another_process_is_heard_at_once(pg_url: str) -> None:
    async def go() -> float:
        rt, task, run_id = await driven(pg_url)
        other = SqlStore(pg_url)
        try:
            other.request_cancel(run_id, "stop now")
            took = await asyncio.to_thread(heard_within, other, run_id, RunStatus.CANCELLED, SLOW / 4)
            await task
            return took
        finally:
            other.close()
            rt.close()
    assert asyncio.run(go()) < SLOW / 4


def test_answers_from_another_process_are_taken_at_once(pg_url: str) -> None:
    async def go() -> None:
        rt, task, run_id = await driven(pg_url)
        other = Runtime(store=SqlStore(pg_url))
        try:
            [question] = other.store.interrupts(run_id)
            start = time.monotonic()
            # the process driving it takes the answer; this call returns once it has
            await other.resume(run_id, answers={question.id: "yes"}, queue=True)
            assert time.monotonic() - start < SLOW / 4
            assert other.store.interrupt(question.id).answer == "yes"
            await rt.cancel(run_id)
            await task
        finally:
            other.close()
            rt.close()
    asyncio.run(go())


def test_the_listener_tells_each_kind_and_after_a_lost_connection_tells_every_listener_to_look(pg_url: str) -> None:
    store, other = SqlStore(pg_url), SqlStore(pg_url)
    heard: list[tuple[str, str]] = []
    try:
        unsubscribe = store.subscribe(lambda kind, run_id: heard.append((kind, run_id)))
        assert store._listener is not None and store._listener.connected.wait(5)
        run = asyncio.run(Runtime(store=other).submit(graph(), {}))   # queued: for the workers
        other.request_cancel(run.id, "no")
        deadline = time.monotonic() + 5
        while len(heard) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert heard == [(QUEUED, run.id), (REQUEST, run.id)]
        # its connection ended by the server: it listens again, and says some may be missed
        other.engine.dispose()
        with other.engine.begin() as conn:
            conn.exec_driver_sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN%%' "
                                 "AND datname = current_database() AND pid <> pg_backend_pid()")
        deadline = time.monotonic() + 10
        while (ANY, ANY) not in heard and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (ANY, ANY) in heard
        unsubscribe()
        heard.clear()
        other.request_cancel(run.id, "again")
        time.sleep(0.5)
        assert heard == []
    finally:
        store.close()
        other.close()


WORKER_GRAPH = textwrap.dedent('''
    import asyncio
    from pydantic import BaseModel
    from runtime import Graph

    class S(BaseModel):
        n: int = 0

    one = Graph("notified_one", state=S)

    @one.node()
    def step(state):
        return {"n": state.n + 1}

    long = Graph("notified_long", state=S)

    @long.node()
    async def wait(state):
        await asyncio.sleep(8)
        return {"n": 1}
''')


def start_worker(pg_url: str, folder: Path, *options: str) -> subprocess.Popen[str]:
    (folder / "notified_graphs.py").write_text(WORKER_GRAPH)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(folder)])}
    return subprocess.Popen([sys.executable, "-m", "server.cli", "--db", pg_url, "worker", "notified_graphs:one",
                             "notified_graphs:long", "--poll", str(SLOW), *options], cwd=folder, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")   # utime + stime


@contextmanager
def worker_beside(pg_url: str, folder: Path, *options: str) -> Iterator[tuple[subprocess.Popen[str], Any, SqlStore]]:
    """A ``harness worker`` polling every SLOW seconds, the graphs it drives imported here
    too, and a store to queue their runs in; the worker up and listening."""
    worker = start_worker(pg_url, folder, *options)
    sys.path.insert(0, str(folder))
    store = SqlStore(pg_url)
    try:
        import notified_graphs
        time.sleep(2)   # the worker is up, has looked once and found nothing, and listens
        yield worker, notified_graphs, store
    finally:
        store.close()
        sys.path.remove(str(folder))
        sys.modules.pop("notified_graphs", None)
        worker.kill()
        worker.communicate(timeout=30)


def test_a_stopping_worker_told_of_new_runs_waits_quietly_for_its_own(pg_url: str, tmp_path: Path) -> None:
    with worker_beside(pg_url, tmp_path) as (worker, graphs, store):
        long = asyncio.run(Runtime(store=store).submit(graphs.long, {}))
        heard_within(store, long.id, RunStatus.RUNNING, SLOW / 2)
        worker.send_signal(signal.SIGTERM)   # takes no more runs; its own goes on
        time.sleep(0.5)
        before = cpu_seconds(worker.pid)
        for _ in range(3):   # each one notified: the stopping worker must not spin on them
            asyncio.run(Runtime(store=store).submit(graphs.one, {}))
        time.sleep(2)
        assert cpu_seconds(worker.pid) - before < 0.5
        assert worker.poll() is None   # still waiting for its run


def test_a_worker_with_no_room_is_not_woken_by_new_runs_and_takes_them_once_it_has(
        pg_url: str, tmp_path: Path) -> None:
    with worker_beside(pg_url, tmp_path, "--max-concurrency", "1") as (worker, graphs, store):
        long = asyncio.run(Runtime(store=store).submit(graphs.long, {}))
        heard_within(store, long.id, RunStatus.RUNNING, SLOW / 2)
        time.sleep(0.5)
        before = cpu_seconds(worker.pid)
        queued = []
        for _ in range(30):   # each notified, apart: each a look of its own for a worker that heeds them
            queued.append(asyncio.run(Runtime(store=store).submit(graphs.one, {})).id)
            time.sleep(0.1)
        spent = cpu_seconds(worker.pid) - before
        print(f"worker CPU while full: {spent:.3f} s")
        assert spent < 0.06   # a look costs about 5 ms: 30 of them 0.15 s
        assert all(store.get_run(r).status == RunStatus.QUEUED for r in queued)
        # told while full, it looks once its run ends (8 s in), not at its next poll
        for r in queued:
            heard_within(store, r, RunStatus.SUCCEEDED, SLOW / 2)


# the dropped stores' pooled connections are closed by the garbage collector, which says so
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning", "ignore::ResourceWarning")
def test_a_store_dropped_without_close_stops_listening(pg_url: str) -> None:
    def listening() -> int:
        looking = SqlStore(pg_url)
        try:
            with looking.engine.connect() as conn:
                return int(conn.exec_driver_sql("SELECT count(*) FROM pg_stat_activity WHERE query LIKE "
                                                "'LISTEN%%' AND datname = current_database()").scalar_one())
        finally:
            looking.close()

    async def drive_and_drop() -> None:
        for _ in range(3):
            rt = Runtime(store=SqlStore(pg_url))
            await rt.start(graph_one(), {})
            assert rt.store._listener is not None and rt.store._listener.connected.wait(5)
    asyncio.run(drive_and_drop())
    gc.collect()   # the dropped stores go (a SQLAlchemy engine holds cycles of its own)
    deadline = time.monotonic() + 5
    while ((left := listening()) or alive()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left == 0 and alive() == []
    gc.collect()   # and their engines, which the listeners held till now: not left to a later test


def alive() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "harness-listen" and t.is_alive()]


def graph_one() -> Graph:
    g = Graph("notified_drop", state=S)
    g.add_node("a", lambda s: {"done": True})
    return g


def test_a_worker_takes_a_queued_run_at_once_though_it_polls_seldom(pg_url: str, tmp_path: Path) -> None:
    with worker_beside(pg_url, tmp_path) as (_, graphs, store):
        run = asyncio.run(Runtime(store=store).submit(graphs.one, {}))
        assert heard_within(store, run.id, RunStatus.SUCCEEDED, SLOW / 2) < SLOW / 2


def test_closing_a_store_that_listened_does_not_wait_for_its_listener(pg_url: str) -> None:
    """Every ``harness run``, ``resume`` or ``cancel`` on PostgreSQL closes such a store."""
    async def go() -> float:
        rt = Runtime(store=SqlStore(pg_url))
        await rt.start(graph_one(), {})
        listener = rt.store._listener
        assert listener is not None and listener.connected.wait(5)
        time.sleep(0.05)   # the thread waits for notifications now
        start = time.monotonic()
        rt.close()
        took = time.monotonic() - start
        assert not listener.connected.is_set() and alive() == []
        return took
    took = asyncio.run(go())
    print(f"closed in {took * 1000:.1f} ms")
    assert took < 0.1


def test_a_runtime_that_listened_leaves_no_cycles_once_closed(pg_url: str) -> None:
    """The listener holds the Runtime's ``heard``, not the other way round: once closed,
    the store and its listener are freed without the cyclic collector."""
    gc.collect()
    gc.garbage.clear()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        async def go() -> threading.Thread:
            rt = Runtime(store=SqlStore(pg_url))
            await rt.start(graph_one(), {})
            listener = rt.store._listener
            assert listener is not None and listener.connected.wait(5) and listener._thread is not None
            rt.close()
            return listener._thread
        thread = asyncio.run(go())
        thread.join(5)
        assert not thread.is_alive()
        gc.collect()
        left = {type(o).__qualname__ for o in gc.garbage}
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert not left & {"Listener", "Slots", "SqlStore"}   # (an engine has cycles of its own)
