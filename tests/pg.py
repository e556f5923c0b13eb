"""PostgreSQL databases for tests, on the server at ``HARNESS_TEST_PG_URL`` (default: the local one).

A test gets either a database of its own (``Server.fresh_database``: created for it,
dropped with ``FORCE`` after it; for tests that change the schema) or the session's
shared database emptied for it (``SharedDatabase.empty``: every table's rows deleted
and every other connection to it closed first; creating and dropping a database
per test would add about half a second to each). When the server cannot be
reached, every test that asks for PostgreSQL is skipped with the reason, and the
server is asked only once per session. Under pytest-xdist each worker is a session
of its own: its own connection to the server and its own shared database.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine, make_url
from sqlalchemy.exc import DBAPIError, OperationalError

from runtime.store.sql import SqlStore
from runtime.store.sql.schema import TABLES, VERSIONS

#: a database on the server to connect to while creating and dropping the tests' own
PG_ADMIN_URL = os.environ.get("HARNESS_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")

#: the pytest-xdist worker ("gw0", "gw1", ...; "main" without xdist). Every database name
#: carries it besides its random part, so each worker's shared database is its own (one
#: worker emptying it, and closing every connection to it, never reaches another's tests)
#: and a database left behind by a killed run says which worker made it.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")


class Unreachable(Exception):
    """The server (or its driver) is not there; the message says why, for the skip."""


class Server:
    """The PostgreSQL server the tests create their databases on."""

    def __init__(self, admin_url: str = PG_ADMIN_URL):
        try:
            import psycopg  # noqa: F401 - only to say so when it is missing
        except ModuleNotFoundError:
            raise Unreachable("the PostgreSQL tests need the psycopg driver (pip install 'psycopg[binary]')") from None
        self.admin_url = admin_url
        self.admin: Engine = create_engine(admin_url, isolation_level="AUTOCOMMIT",
                                           connect_args={"connect_timeout": 3})
        try:
            with self.admin.connect() as conn:
                conn.exec_driver_sql("SELECT 1")
        except OperationalError as e:
            self.admin.dispose()
            raise Unreachable(f"PostgreSQL is unreachable at {admin_url} "
                              f"(set HARNESS_TEST_PG_URL): {e.orig}") from None

    def url(self, database: str) -> str:
        return make_url(self.admin_url).set(database=database).render_as_string(hide_password=False)

    def create(self, prefix: str, *, icu_locale: str | None = None) -> str:
        """A new, empty database named ``<prefix>_<worker>_<random>``; its URL. With ``icu_locale``
        its text sorts by that ICU locale where the server has ICU, else as the server's default."""
        name = f"{prefix}_{WORKER}_{uuid.uuid4().hex[:12]}"
        with self.admin.connect() as conn:
            if icu_locale is not None:
                try:
                    conn.exec_driver_sql(f'CREATE DATABASE "{name}" TEMPLATE template0 '
                                         f"LOCALE_PROVIDER icu ICU_LOCALE '{icu_locale}'")
                    return self.url(name)
                except DBAPIError:
                    pass  # a server without ICU (or before PostgreSQL 15)
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop(self, url: str) -> None:
        """Drop the database at ``url``, closing whatever connections are still open to it."""
        with self.admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)')

    @contextmanager
    def fresh_database(self, prefix: str = "harness_test") -> Iterator[str]:
        """The URL of a new, empty database, dropped afterwards."""
        url = self.create(prefix)
        try:
            yield url
        finally:
            self.drop(url)

    def close(self) -> None:
        self.admin.dispose()


class SharedDatabase:
    """One database for a whole session, with the store's tables, emptied before each test.

    Its text sorts by English rules ("a" < "B" < "b"), not by code point as in SQLite
    and the server's usual C locale: a query that sorts by text without saying how
    gives another order here than on the other stores, and a test can see it.
    """

    def __init__(self, server: Server, prefix: str = "harness_shared"):
        self.server = server
        self.url = server.create(prefix, icu_locale="en")
        SqlStore(self.url).close()  # create the tables once
        self._engine = create_engine(self.url)

    def empty(self) -> str:
        """Delete every row and close every other connection to the database; its URL.

        Closing the others first means no store a test left open (and no transaction
        it left holding locks) reaches into the next test, as with a new database.
        """
        with self._engine.begin() as conn:
            conn.exec_driver_sql("SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
                                 "WHERE datname = current_database() AND pid <> pg_backend_pid()")
            for table in TABLES:
                if table is not VERSIONS:  # the version row stays, as a new store would write it
                    conn.exec_driver_sql(f"DELETE FROM {table.name}")
        return self.url

    def close(self) -> None:
        self._engine.dispose()
        self.server.drop(self.url)
