"""A PostgreSQL store whose connections are terminated (``pg_terminate_backend``, as a
server restart or a proxy's idle timeout would drop them) goes on working.

The write that meets the lost connection fails with the driver's error and is not
tried again by the store (it may have been committed: the engine decides); the next
write opens a new connection with the store's session settings. A read that loses its
connection midway runs once more on a new one. A run whose connection is lost between
its steps ends normally, its effect made once, and the debugger keeps reading.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from local_client import TestClient
from pydantic import BaseModel
from sqlalchemy import Engine, create_engine, event, make_url

from runtime import EndNotRecorded, Graph, InvalidRequest, NodeContext, Runtime, RunStatus, SqlStore
from runtime.core.records import Batch, TraceEvent
from server.web.app import create_app

from pg import Server
from test_store_contract import add_run, ev

#: the name the store's connections give the server, by which the test finds them
STORE_APP = "store_under_test"


class Killer:
    """What the server or a proxy does to the store's connections, from a connection to
    another database (the shared database's own connections are left alone)."""

    def __init__(self, admin_url: str, database: str):
        self.engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
        self.database = database

    def kill(self) -> int:
        """Terminate every connection of the store, waiting until each is gone; how many."""
        with self.engine.connect() as conn:
            killed: int = conn.exec_driver_sql(
                "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "
                "WHERE datname = %s AND application_name = %s", (self.database, STORE_APP)).scalar_one()
        return killed

    def refuse_connections(self, refuse: bool) -> None:
        with self.engine.connect() as conn:
            conn.exec_driver_sql(f'ALTER DATABASE "{self.database}" WITH ALLOW_CONNECTIONS {str(not refuse).lower()}')


@pytest.fixture
def url(pg_empty_url: str) -> str:
    return make_url(pg_empty_url).update_query_dict({"application_name": STORE_APP}).render_as_string(
        hide_password=False)


@pytest.fixture
def killer(pg_server: Server, url: str) -> Iterator[Killer]:
    k = Killer(pg_server.admin_url, str(make_url(url).database))
    yield k
    k.refuse_connections(False)
    k.engine.dispose()


@pytest.fixture
def store(url: str) -> Iterator[SqlStore]:
    s = SqlStore(url)
    yield s
    s.close()


def writer_session(store: SqlStore) -> tuple[int, str]:
    """The backend pid and ``synchronous_commit`` of the store's write connection."""
    conn = store._writer._db._conn   # type: ignore[attr-defined]
    with conn.cursor() as cur:
        cur.execute("SELECT pg_backend_pid(), current_setting('synchronous_commit')")
        pid, setting = cur.fetchone()
    conn.commit()
    return pid, setting


def test_reads_work_after_the_stores_connections_were_terminated(store: SqlStore, killer: Killer) -> None:
    add_run(store, "r1")
    store.list_runs()   # a pooled read connection, as well as the write one
    assert killer.kill() >= 2
    assert store.get_run("r1").id == "r1"
    assert [r.id for r in store.list_runs()] == ["r1"]
    assert store.cancel_request("r1") is None


def test_the_cancel_poll_is_answered_after_the_stores_connections_were_terminated(
        store: SqlStore, killer: Killer) -> None:
    """Asked by running runs at heartbeat pace, on the driver's connection: first after the kill."""
    add_run(store, "r1")
    store.request_cancel("r1", "enough")
    assert store.cancel_request("r1") == "enough"   # a pooled read connection, as well as the write one
    assert killer.kill() >= 2
    assert store.cancel_request("r1") == "enough"

    # and a connection lost past the pool's ping, as the poll's own statement runs
    lost: list[int] = []

    def terminate_first(dbapi_conn: Any, record: Any, proxy: Any) -> None:
        if not lost:
            lost.append(dbapi_conn.info.backend_pid)
            with killer.engine.connect() as other:
                other.exec_driver_sql("SELECT pg_terminate_backend(%s, 5000)", (lost[0],))

    event.listen(store.engine.pool, "checkout", terminate_first)
    try:
        assert store.cancel_request("r1") == "enough"
    finally:
        event.remove(store.engine.pool, "checkout", terminate_first)
    assert lost


def test_a_read_whose_connection_is_lost_midway_runs_once_more_on_a_new_one(
        store: SqlStore, killer: Killer) -> None:
    add_run(store, "r1")
    lost: list[int] = []

    def terminate_first(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not lost and "FROM runs" in statement:   # past the pool's ping: the query itself meets it
            pid = conn.connection.dbapi_connection.info.backend_pid
            with killer.engine.connect() as other:
                other.exec_driver_sql("SELECT pg_terminate_backend(%s, 5000)", (pid,))
            lost.append(pid)

    event.listen(store.engine, "before_cursor_execute", terminate_first)
    try:
        assert store.get_run("r1").id == "r1"
    finally:
        event.remove(store.engine, "before_cursor_execute", terminate_first)
    assert len(lost) == 1


def test_the_write_meeting_a_lost_connection_fails_and_the_next_one_uses_a_new_connection(
        store: SqlStore, killer: Killer) -> None:
    add_run(store, "r1")
    before, _ = writer_session(store)
    killer.kill()
    with pytest.raises(psycopg.OperationalError):   # not tried again: its outcome is the caller's to check
        store.commit(Batch(run_id="r1", fence=1, events=[ev("r1", 2)]))
    assert [e.seq for e in store.events("r1")] == [1]
    store.commit(Batch(run_id="r1", fence=1, events=[ev("r1", 2)]))
    store.commit(Batch(run_id="r1", fence=1, events=[ev("r1", 3)], durable=True))
    assert [e.seq for e in store.events("r1")] == [1, 2, 3]
    after, setting = writer_session(store)
    assert after != before and setting == "off"   # a new connection, with the store's session settings


def test_a_refusal_that_leaves_the_connection_working_keeps_it(store: SqlStore) -> None:
    add_run(store, "r1")
    before = writer_session(store)
    with pytest.raises(InvalidRequest, match="already exists"):
        add_run(store, "r1")
    assert writer_session(store) == before


def test_a_store_whose_connections_were_terminated_closes_quietly(
        url: str, killer: Killer, caplog: pytest.LogCaptureFixture) -> None:
    store = SqlStore(url)
    add_run(store, "r1")
    killer.kill()
    with pytest.raises(psycopg.OperationalError):
        store.commit(Batch(run_id="r1", fence=1, events=[TraceEvent("r1", 2, 1.0, "run.note")]))
    store.close()
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]


# --------------------------------------------------------------------------- through the Runtime


class Order(BaseModel):
    receipt: str = ""
    sent: bool = False
    done: bool = False


def order_graph(charges: list[str], kill: Any, at: str) -> Graph:
    """pay (an effect) -> notify -> finish; the store's connections are terminated in ``at``."""
    g = Graph(f"order_{at}", state=Order)

    @g.node()
    async def pay(state: Order, ctx: NodeContext) -> dict[str, Any]:
        def charge() -> str:
            charges.append("charge")
            if at == "effect":
                kill()
            return f"receipt-{len(charges)}"
        return {"receipt": await ctx.effect("charge", charge)}

    @g.node(after=["pay"])
    async def notify(state: Order, ctx: NodeContext) -> dict[str, Any]:
        if at == "notify":
            kill()
        return {"sent": True}

    @g.node(after=["notify"])
    def finish(state: Order) -> dict[str, Any]:
        if at == "finish":
            kill()
        return {"done": True}

    return g


@pytest.mark.parametrize("at", ["effect", "notify", "finish"])
async def test_a_run_whose_connection_is_lost_between_steps_ends_normally_with_its_effect_made_once(
        store: SqlStore, killer: Killer, at: str) -> None:
    charges: list[str] = []
    killed: list[int] = []

    def kill() -> None:
        if not killed:
            killed.append(killer.kill())

    rt = Runtime(store=store)
    try:
        run = await rt.start(order_graph(charges, kill, at), {})
        assert killed and killed[0] >= 1
        assert run.status == RunStatus.SUCCEEDED, run.error
        assert charges == ["charge"]
        stored = store.get_run(run.id)
        assert stored.status == RunStatus.SUCCEEDED and stored.lease_owner is None
        seqs = [e.seq for e in store.events(run.id)]
        assert seqs == list(range(1, len(seqs) + 1))   # nothing written twice, nothing missing
        assert [e.status.value for e in store.journal([run.id])] == ["started", "succeeded"]
        assert (await rt.state_at((await rt.history(run.id))[-1].id)).model_dump() == \
            {"receipt": "receipt-1", "sent": True, "done": True}
    finally:
        rt.close()


async def test_a_run_whose_end_cannot_be_recorded_is_finished_by_a_resume_in_the_same_runtime(
        store: SqlStore, killer: Killer) -> None:
    """The database goes away as the run ends (its connections terminated, new ones
    refused, as while a server restarts): the run ends with ``EndNotRecorded``. Once the
    database is back, a resume in the same Runtime records the end, the effect made once."""
    charges: list[str] = []
    class GoingAway:
        """The real store, whose database goes away just before the commit ending a run."""

        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        def commit(self, batch: Batch) -> None:
            if batch.run is not None and batch.run.status != RunStatus.RUNNING and not charges[1:]:
                charges.append("gone")
                killer.refuse_connections(True)
                killer.kill()
            store.commit(batch)

    rt = Runtime(store=GoingAway(), lease_ttl=3600.0)   # type: ignore[arg-type]
    try:
        with pytest.raises(EndNotRecorded) as raised:
            await rt.start(order_graph(charges, lambda: None, "nowhere"), {})
        killer.refuse_connections(False)
        run_id = raised.value.run_id
        assert isinstance(raised.value.__cause__, psycopg.OperationalError)
        assert store.get_run(run_id).status == RunStatus.RUNNING
        ended = await rt.resume(run_id)
        assert ended.status == RunStatus.SUCCEEDED
        assert charges == ["charge", "gone"]   # the effect once, the database gone once
        assert store.get_run(run_id).status == RunStatus.SUCCEEDED
        assert [e.status.value for e in store.journal([run_id])] == ["started", "succeeded"]
    finally:
        rt.close()


async def test_a_run_goes_on_while_the_database_restarts_and_records_everything_once_it_is_back(
        store: SqlStore, killer: Killer) -> None:
    """Right after the effect's call the database goes away for about 1.5 s (its connections
    terminated, new ones refused): the run keeps the effect's outcome and its steps until the
    database is back, then ends normally, the effect made once and nothing written twice."""
    charges: list[str] = []
    back: list[threading.Timer] = []

    def restart() -> None:
        if not back:
            killer.refuse_connections(True)
            killer.kill()
            back.append(threading.Timer(1.5, killer.refuse_connections, (False,)))
            back[0].start()

    rt = Runtime(store=store)
    try:
        run = await rt.start(order_graph(charges, restart, "effect"), {})
        back[0].join()
        assert run.status == RunStatus.SUCCEEDED, run.error
        assert charges == ["charge"]
        assert [e.status.value for e in store.journal([run.id])] == ["started", "succeeded"]
        seqs = [e.seq for e in store.events(run.id)]
        assert seqs == list(range(1, len(seqs) + 1))
        assert (await rt.state_at((await rt.history(run.id))[-1].id)).model_dump() == \
            {"receipt": "receipt-1", "sent": True, "done": True}
    finally:
        for timer in back:
            timer.join()
        rt.close()


# --------------------------------------------------------------------------- the debugger


async def test_the_debugger_reads_after_the_stores_connections_were_terminated(
        store: SqlStore, killer: Killer) -> None:
    charges: list[str] = []
    rt = Runtime(store=store)
    try:
        run = await rt.start(order_graph(charges, lambda: None, "nowhere"), {})
        with TestClient(create_app(rt)) as client:
            assert client.get(f"/api/runs/{run.id}").status_code == 200
            killer.kill()
            page = client.get(f"/runs/{run.id}")
            assert page.status_code == 200 and run.id in page.text
            api = client.get(f"/api/runs/{run.id}")
            assert api.status_code == 200 and api.json()["run"]["status"] == "succeeded"
    finally:
        rt.close()
