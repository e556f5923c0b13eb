"""Schema migrations: an ordered list in code, applied when a store opens its database.

A new database gets the current tables from ``create_all`` and is recorded at
``SCHEMA_VERSION`` without running any migration. An older one runs, in order,
every migration newer than the highest version in ``harness_schema``, and each
adds its version there. A database newer than this code is refused rather than
written with a layout it does not know.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import Engine, insert, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlmodel import SQLModel

from ...core.errors import InvalidRequest
from .schema import SCHEMA_VERSION, TABLES, VERSIONS


@dataclass(frozen=True)
class Migration:
    """What brings a database from ``version - 1`` to ``version``."""

    version: int
    #: plain SQL for every dialect; ``{json}`` stands for the dialect's JSON type
    statements: tuple[str, ...]


#: oldest first; the last one's version is SCHEMA_VERSION
MIGRATIONS: tuple[Migration, ...] = (
    Migration(2, ("ALTER TABLE runs ADD COLUMN options {json}",              # fork/replay settings
                  "ALTER TABLE effect_journal ADD COLUMN compensate VARCHAR")),  # compensation refs
)

_ATTEMPTS = 10


def setup(engine: Engine) -> None:
    """Create missing tables and migrate the database to ``SCHEMA_VERSION``."""
    # several processes may open a brand-new file at once: the losers of a
    # create-table race see "already exists" and simply try again
    for attempt in range(_ATTEMPTS):
        try:
            return _setup_once(engine)
        except (OperationalError, IntegrityError) as e:
            if attempt == _ATTEMPTS - 1 or not any(w in str(e) for w in ("already exists", "locked", "UNIQUE")):
                raise
            time.sleep(0.02 * (attempt + 1))


def _setup_once(engine: Engine) -> None:
    SQLModel.metadata.create_all(engine, tables=list(TABLES))
    with engine.begin() as conn:
        current = conn.execute(select(VERSIONS.c.version).order_by(VERSIONS.c.version.desc())).scalar()
        if current is None:
            _record(conn, SCHEMA_VERSION)
            current = SCHEMA_VERSION
        if current > SCHEMA_VERSION:
            raise InvalidRequest(f"database schema {current} is newer than this version of "
                                 f"Shadow Harness understands ({SCHEMA_VERSION}); upgrade it")
        json_type = "JSONB" if conn.dialect.name == "postgresql" else "JSON"
        for migration in MIGRATIONS:
            if migration.version > current:
                for stmt in migration.statements:
                    conn.exec_driver_sql(stmt.format(json=json_type))
                _record(conn, migration.version)


def _record(conn: Connection, version: int) -> None:
    conn.execute(insert(VERSIONS).values(version=version, applied_at=time.time()))
