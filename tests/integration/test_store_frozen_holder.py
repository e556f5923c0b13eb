"""A process frozen in the middle of a write on PostgreSQL (SIGSTOP, a VM paused, a long
pause of its own) holds the run's row locked: without a bound, the worker that takes
over its expired lease would wait for it for ever. The store's sessions end a
transaction left idle for ``IDLE_IN_TRANSACTION_MS``: the server drops the frozen one,
its locks go, the lease is taken; the frozen store, once thawed, finds its write failed
with a lost connection and its next one works. A server or role that sets its own
bound keeps it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, make_url

from runtime import SqlStore
from runtime.core.errors import LeaseLost
from runtime.store.sql import store as sql_store

from pg import Server
from test_store_contract import add_run

pytestmark = pytest.mark.slow


@pytest.fixture
def stores(pg_empty_url: str) -> Iterator[tuple[SqlStore, SqlStore]]:
    a, b = SqlStore(pg_empty_url), SqlStore(pg_empty_url)
    yield a, b
    a.close()
    b.close()


def hold_row(store: SqlStore, run_id: str, thaw: threading.Event, outcome: list[BaseException | None]) -> None:
    """A write transaction that locks ``run_id``'s row, then stops as a frozen process does."""
    writer = store._writer   # type: ignore[attr-defined]
    try:
        with writer._lock, writer._db.transaction(False) as cur:
            cur.execute("SELECT fence FROM runs WHERE id = %s FOR UPDATE", [run_id])
            outcome.append(None)   # locked
            thaw.wait()
            cur.execute("SELECT 1")
    except BaseException as e:
        outcome.append(e)
    else:
        outcome.append(None)


def test_a_lease_is_taken_from_a_holder_frozen_in_a_transaction(stores: tuple[SqlStore, SqlStore]) -> None:
    frozen, taker = stores
    run = add_run(frozen, "r1")
    thaw, outcome = threading.Event(), []
    holder = threading.Thread(target=hold_row, args=(frozen, "r1", thaw, outcome), daemon=True)
    holder.start()
    while not outcome:
        time.sleep(0.01)
    took: list[float] = []
    start = time.monotonic()
    acquire = threading.Thread(target=lambda: took.append(taker.acquire_lease("r1", "taker", 1e12, run.fence)
                                                           and time.monotonic() - start), daemon=True)
    acquire.start()
    acquire.join(sql_store.IDLE_IN_TRANSACTION_MS / 1000 + 10)
    thaw.set()   # lets the holder go if the lease is still waited for, so that the test ends
    holder.join(10)
    acquire.join(10)
    assert took, "the lease was not taken while the holder was frozen"
    assert took[0] < sql_store.IDLE_IN_TRANSACTION_MS / 1000 + 5
    assert taker.get_run("r1").lease_owner == "taker"
    # thawed, the frozen store's transaction failed as one whose connection was lost ...
    assert isinstance(outcome[-1], Exception), outcome
    # ... and its next write opens a new connection, and is fenced out
    with pytest.raises(LeaseLost):
        frozen.acquire_lease("r1", "frozen", 1e12, run.fence)
    assert frozen.get_run("r1").lease_owner == "taker"


def test_a_bound_the_server_sets_is_kept(pg_server: Server, pg_url: str) -> None:
    database = make_url(pg_url).database
    admin = create_engine(pg_server.admin_url, isolation_level="AUTOCOMMIT")

    def bound() -> str:
        store = SqlStore(pg_url)
        try:
            with store.engine.connect() as conn:
                setting: str = conn.exec_driver_sql("SHOW idle_in_transaction_session_timeout").scalar_one()
            return setting
        finally:
            store.close()
    try:
        assert bound() == f"{sql_store.IDLE_IN_TRANSACTION_MS // 1000}s"
        with admin.connect() as conn:
            conn.exec_driver_sql(f'ALTER DATABASE "{database}" SET idle_in_transaction_session_timeout = 60000')
        assert bound() == "1min"
    finally:
        admin.dispose()
