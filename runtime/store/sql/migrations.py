"""Schema migrations: an ordered list in code, applied when a store opens its database.

A new database gets the current tables from ``create_all`` and is recorded at
``SCHEMA_VERSION`` without running any migration. An older one runs, in order,
every migration newer than the highest version in ``harness_schema``, and each
adds its version there. A database newer than this code is refused rather than
written with a layout it does not know.

All of it — creating tables, reading the version, every statement of the pending
migrations and their version rows — is one transaction that holds the setup lock
from its first statement: a migration that fails leaves the database as it was, and
a second process opening the same database waits, then finds it migrated. On
SQLite the driver would otherwise commit each ``ALTER TABLE`` on its own (it only
opens transactions before data changes), so the transaction is begun by hand with
``BEGIN IMMEDIATE``, which also takes the write lock. PostgreSQL's DDL is
transactional; a transaction-scoped advisory lock keeps two setups from racing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import Engine, insert, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlmodel import SQLModel

from ...core.errors import InvalidRequest
from .schema import JSON_COLUMNS, SCHEMA_VERSION, TABLES, VERSIONS


@dataclass(frozen=True)
class Migration:
    """What brings a database from ``version - 1`` to ``version``."""

    version: int
    #: plain SQL; ``{json}`` stands for the JSON type
    statements: tuple[str, ...]
    #: the only dialect whose databases need the statements (the others just record the version)
    dialect: str | None = None


#: oldest first; the last one's version is SCHEMA_VERSION
MIGRATIONS: tuple[Migration, ...] = (
    Migration(2, ("ALTER TABLE runs ADD COLUMN options {json}",              # fork/replay settings
                  "ALTER TABLE effect_journal ADD COLUMN compensate VARCHAR")),  # compensation refs
    Migration(3, ("ALTER TABLE interrupts ADD COLUMN sent {json}",)),    # answers to running runs
    # JSONB gave objects back with their keys reordered: JSON keeps the text as written
    Migration(4, tuple(f'ALTER TABLE {t} ALTER COLUMN "{c}" TYPE JSON USING "{c}"::json' for t, c in JSON_COLUMNS),
              dialect="postgresql"),
)

_ATTEMPTS = 10
#: key of the PostgreSQL advisory lock that serializes setups of one database
_PG_SETUP_LOCK = 0x5348_6172_6E65_7373


def setup(engine: Engine) -> None:
    """Create missing tables and migrate the database to ``SCHEMA_VERSION``."""
    # setups of one database wait on each other's lock, so none sees another's half;
    # only a wait that outlasts the driver's timeout ("database is locked") is tried again
    for attempt in range(_ATTEMPTS):
        try:
            return _setup_once(engine)
        except OperationalError as e:
            if attempt == _ATTEMPTS - 1 or "locked" not in str(e):
                raise
            time.sleep(0.02 * (attempt + 1))


def _setup_once(engine: Engine) -> None:
    with engine.begin() as conn:
        _lock(conn)
        SQLModel.metadata.create_all(conn, tables=list(TABLES))
        current = conn.execute(select(VERSIONS.c.version).order_by(VERSIONS.c.version.desc())).scalar()
        if current is None:
            _record(conn, SCHEMA_VERSION)
            current = SCHEMA_VERSION
        if current > SCHEMA_VERSION:
            raise InvalidRequest(f"database schema {current} is newer than this version of "
                                 f"Shadow Harness understands ({SCHEMA_VERSION}); upgrade it")
        for migration in MIGRATIONS:
            if migration.version > current:
                _apply(conn, migration, current)


def _lock(conn: Connection) -> None:
    """Begin the setup's transaction holding the lock other setups wait on."""
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    elif conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_SETUP_LOCK})")


def _apply(conn: Connection, migration: Migration, found: int) -> None:
    """Run ``migration``'s statements and record its version, in the caller's transaction."""
    statements = migration.statements if migration.dialect in (None, conn.dialect.name) else ()
    for stmt in statements:
        sql = stmt.format(json="JSON")
        try:
            conn.exec_driver_sql(sql)
        except DBAPIError as e:
            raise InvalidRequest(
                f"cannot migrate the database to schema {migration.version}: {sql!r} failed "
                f"({e.orig}); nothing was changed, the database is still at schema {found}") from e
    _record(conn, migration.version)


def _record(conn: Connection, version: int) -> None:
    conn.execute(insert(VERSIONS).values(version=version, applied_at=time.time()))
