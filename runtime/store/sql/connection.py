"""The write side's one connection, and what the store does when PostgreSQL drops one.

Every write is one transaction on this connection (``transaction``). It is its own,
out of the pool, so that its session settings never reach a reader. On PostgreSQL
``synchronous_commit`` is off for it, and a durable transaction commits with the
server's own setting (the output-commit rule, ADR 0001); on SQLite a durable one runs
under ``synchronous=FULL`` instead of ``NORMAL``.

A PostgreSQL connection can be lost: the server restarted, a proxy closed it, an
administrator terminated its backend. The transaction that meets the loss fails with
the driver's error and is not tried again here, since it may have been committed and
only the caller can tell (the engine reads the run's row back). The broken connection
is dropped, and the next transaction opens a new one with the same session settings.
A refusal that leaves the connection working (a constraint, a serialization failure,
a lock timeout) is rolled back and keeps it. A SQLite file's connection is not lost
this way, and is never replaced.

Reads take pooled connections, tested before use (``pool_pre_ping``); a read that
loses its connection midway is run once more on a new one (``read_again``): it
changed nothing, so trying it again is safe.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")


def read_again(read: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """``read``, run once more when its connection was lost (SQLAlchemy has then dropped
    every pooled connection opened before, so the second try connects anew)."""
    @functools.wraps(read)
    def reading(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return read(self, *args, **kwargs)
        except DBAPIError as e:
            if not e.connection_invalidated:
                raise
        return read(self, *args, **kwargs)
    return reading


class WriteConnection:
    """The connection the writer's transactions run on, opened again after a loss."""

    def __init__(self, engine: Engine):
        self._engine = engine
        self._sqlite = engine.dialect.name == "sqlite"
        #: the open connection; None once lost, until the next transaction opens another
        self._conn: Any = None
        #: how a durable transaction commits on PostgreSQL: the server's own synchronous_commit
        self._forced: str | None = None
        self._connect()

    def _connect(self) -> Any:
        conn = self._engine.raw_connection()
        conn.detach()
        if not self._sqlite:
            try:
                self._forced = _relax_commits(conn)
            except BaseException:
                _close_quietly(conn)
                raise
        self._conn = conn
        return conn

    @contextmanager
    def transaction(self, durable: bool) -> Iterator[Any]:
        """A cursor in a transaction that commits on exit, forced to disk when ``durable``.
        The caller holds the writer's lock: one transaction at a time."""
        conn = self._conn if self._conn is not None else self._connect()
        sqlite = self._sqlite
        if sqlite and durable:
            conn.execute("PRAGMA synchronous=FULL")  # force this commit to disk (output-commit rule)
        cur = conn.cursor()
        try:
            if sqlite:
                cur.execute("BEGIN IMMEDIATE")  # take the write lock now, not on first write
            elif durable and self._forced != "off":
                # a synchronous commit also flushes every commit before it (the WAL is in order)
                cur.execute("SELECT set_config('synchronous_commit', %s, true)", [self._forced])
            yield cur
            conn.commit()
        except BaseException as e:
            if self._lost(e, conn):
                self._drop(conn)   # nothing to roll back: the server ended the transaction with it
            else:
                try:
                    conn.rollback()
                except Exception:
                    if sqlite:
                        raise
                    # a connection that cannot even roll back is lost, whatever the first error
                    # said (a backend terminated amid a pipelined batch reports a pipeline error)
                    self._drop(conn)
            raise
        finally:
            cur.close()
            if sqlite and durable:
                conn.execute("PRAGMA synchronous=NORMAL")

    def _lost(self, error: BaseException, conn: Any) -> bool:
        """Whether ``error`` means the PostgreSQL connection is gone."""
        if self._sqlite or not isinstance(error, Exception):
            return False
        # the driver's own flag, then the dialect's test of the error
        return bool(getattr(conn.dbapi_connection, "broken", False)) or \
            self._engine.dialect.is_disconnect(cast(Any, error), conn.dbapi_connection, None)

    def _drop(self, conn: Any) -> None:
        """Forget a lost connection: the next transaction opens a new one."""
        self._conn = None
        _close_quietly(conn)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def _relax_commits(conn: Any) -> str:
    """Make ordinary commits on this PostgreSQL connection skip the wait for the disk;
    the server's own ``synchronous_commit``, which durable transactions keep."""
    cur = conn.cursor()
    try:
        cur.execute("SHOW synchronous_commit")
        forced = str(cur.fetchone()[0])
        cur.execute("SET synchronous_commit TO OFF")
        conn.commit()
    finally:
        cur.close()
    return forced


def _close_quietly(conn: Any) -> None:
    """Close a detached connection that may be broken: its socket, without the rollback a
    pool's close tries first (which fails, and logs, on a lost connection)."""
    try:
        conn.dbapi_connection.close()
    except Exception:
        pass   # unusable already: nothing more to free
