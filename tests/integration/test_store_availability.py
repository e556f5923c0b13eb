"""Which errors of a SQL store a worker waits out (the database unreachable for now) and
which it reports (a refusal for good), with the real PostgreSQL server and driver."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

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


def open_store_within(url: str, seconds: float) -> BaseException:
    """What opening a store on ``url`` raised, failing the test if it took longer than
    ``seconds`` (run aside: without a bound it would wait as long as the network does)."""
    from runtime import SqlStore

    found: list[BaseException] = []

    def go() -> None:
        try:
            SqlStore(url).close()
        except BaseException as e:   # noqa: BLE001 - handed to the test
            found.append(e)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"opening a store on {url} still waits after {seconds} s"
    assert found, f"a store opened on {url}"
    return found[0]


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port whose connections are taken but never answered: a host that drops packets,
    or a half-open network, as a database client sees them."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    yield listener.getsockname()[1]
    listener.close()


def test_a_server_that_never_answers_is_an_outage_after_the_connect_timeout(
        silent_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from runtime.store.sql import store

    monkeypatch.setitem(store.PG_CONNECT_DEFAULTS, "connect_timeout", 2)
    started = time.monotonic()
    error = open_store_within(f"postgresql+psycopg://harness@127.0.0.1:{silent_port}/db", 15)
    assert unavailable(error) and "timeout" in str(error)
    assert time.monotonic() - started >= 1.5   # the timeout was waited, not a refusal


def test_a_connect_timeout_in_the_url_is_the_one_used(silent_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from runtime.store.sql import store

    monkeypatch.setitem(store.PG_CONNECT_DEFAULTS, "connect_timeout", 600)
    error = open_store_within(f"postgres://harness@127.0.0.1:{silent_port}/db?connect_timeout=2", 15)
    assert unavailable(error)
    assert store.pg_connect_args("postgresql://h/db?Connect_Timeout=3&sslmode=disable").keys() == \
        store.PG_CONNECT_DEFAULTS.keys() - {"connect_timeout"}
