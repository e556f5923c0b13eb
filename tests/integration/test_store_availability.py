"""Which errors of a SQL store a worker waits out (the database unreachable for now) and
which it reports (a refusal for good), with the real PostgreSQL server and driver."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy import create_engine, make_url

from runtime.store.sql.availability import unavailable

from pg import Server


def connect_error(url: str) -> BaseException:
    engine = create_engine(url)
    try:
        with engine.connect():
            pass
    except Exception as e:
        return e
    finally:
        engine.dispose()
    raise AssertionError(f"{url} connected")


def test_nothing_listening_is_an_outage_to_wait_out(pg_server: Server) -> None:
    url = make_url(pg_server.admin_url).set(port=1, drivername="postgresql+psycopg")
    assert unavailable(connect_error(url.render_as_string(hide_password=False)))


@pytest.mark.parametrize("change", [{"database": "no_such_database_here"}, {"username": "no_such_role_here"}])
def test_a_missing_database_or_role_is_a_refusal_to_report(pg_server: Server, change: dict[str, str]) -> None:
    url = make_url(pg_server.admin_url).set(drivername="postgresql+psycopg", **change)
    error = connect_error(url.render_as_string(hide_password=False))
    assert isinstance(getattr(error, "orig", error), psycopg.OperationalError)
    assert not unavailable(error)


def test_what_a_store_calls_unreachable_is_what_a_run_waits_out(pg_server: Server) -> None:
    from runtime import MemoryStore, SqlStore

    url = make_url(pg_server.admin_url).set(port=1, drivername="postgresql+psycopg")
    for store in (MemoryStore(), SqlStore):
        assert store.unreachable(ConnectionRefusedError("connection refused"))
        assert not store.unreachable(OSError("disk full")) and not store.unreachable(ValueError("a bug"))
    assert SqlStore.unreachable(connect_error(url.render_as_string(hide_password=False)))
