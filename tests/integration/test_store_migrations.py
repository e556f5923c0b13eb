"""The migration list brings an older database to the layout a new one gets, in place, once.

``SCHEMA_V1`` is the SQLite layout version 1 wrote, frozen here as it was. A column
added to ``schema.py`` without a migration makes a migrated database differ from
a new one, and the layout test below fails.

Setting up is one transaction under a lock: a migration that fails part-way leaves
the database as it was, and processes opening an old database at the same moment
migrate it once. The PostgreSQL tests take ``pg_url`` (``tests/conftest.py``): a new
database on the server at ``HARNESS_TEST_PG_URL`` (by default the local one), or a
skip saying why when that server cannot be reached.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from runtime.core.errors import InvalidRequest
from runtime.core.records import Batch, EffectStatus
from runtime.core.states import RunStatus
from runtime.store.sql import SqlStore
from runtime.store.sql.migrations import MIGRATIONS
from runtime.store.sql.schema import JSON_COLUMNS, SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[2]

SCHEMA_V1 = """
CREATE TABLE harness_schema (version INTEGER NOT NULL, applied_at FLOAT NOT NULL, PRIMARY KEY (version));
CREATE TABLE graphs (version VARCHAR NOT NULL, name VARCHAR NOT NULL, description JSON NOT NULL,
    PRIMARY KEY (version));
CREATE TABLE runs (pk INTEGER NOT NULL, id VARCHAR NOT NULL, thread_id VARCHAR NOT NULL,
    graph_name VARCHAR NOT NULL, graph_version VARCHAR NOT NULL, status VARCHAR NOT NULL, kind VARCHAR NOT NULL,
    parent_run_id VARCHAR, base_checkpoint_id VARCHAR, input JSON NOT NULL, error JSON, limits JSON, usage JSON,
    max_concurrency INTEGER NOT NULL, head_seq INTEGER NOT NULL, event_seq INTEGER NOT NULL,
    fence INTEGER NOT NULL, lease_owner VARCHAR, lease_expires_at FLOAT, cancel_reason VARCHAR,
    created_at FLOAT NOT NULL, updated_at FLOAT NOT NULL, PRIMARY KEY (pk), UNIQUE (id));
CREATE INDEX ix_runs_status ON runs (status);
CREATE INDEX ix_runs_thread ON runs (thread_id);
CREATE INDEX ix_runs_parent ON runs (parent_run_id);
CREATE TABLE checkpoints (pk INTEGER NOT NULL, id VARCHAR NOT NULL, run_pk INTEGER NOT NULL,
    seq INTEGER NOT NULL, parent_id VARCHAR, nodes JSON, states JSON, "full" BOOLEAN NOT NULL, snapshot JSON,
    event_seq INTEGER NOT NULL, created_at FLOAT NOT NULL, source VARCHAR NOT NULL, PRIMARY KEY (pk),
    UNIQUE (run_pk, seq), UNIQUE (id));
CREATE TABLE pending_writes (pk INTEGER NOT NULL, run_pk INTEGER NOT NULL, checkpoint_seq INTEGER NOT NULL,
    node VARCHAR NOT NULL, attempt INTEGER NOT NULL, kind VARCHAR NOT NULL, value JSON,
    created_at FLOAT NOT NULL, PRIMARY KEY (pk));
CREATE INDEX ix_writes_run ON pending_writes (run_pk, node);
CREATE TABLE node_attempts (pk INTEGER NOT NULL, run_pk INTEGER NOT NULL, node VARCHAR NOT NULL,
    attempt INTEGER NOT NULL, status VARCHAR NOT NULL, started_at FLOAT NOT NULL, ended_at FLOAT NOT NULL,
    error_class VARCHAR, error VARCHAR, decision VARCHAR, PRIMARY KEY (pk));
CREATE INDEX ix_attempts_run ON node_attempts (run_pk);
CREATE TABLE effect_journal (pk INTEGER NOT NULL, run_pk INTEGER NOT NULL, node VARCHAR NOT NULL,
    name VARCHAR NOT NULL, occurrence INTEGER NOT NULL, attempt INTEGER NOT NULL, "key" VARCHAR NOT NULL,
    status VARCHAR NOT NULL, request JSON, result JSON, error VARCHAR, at FLOAT NOT NULL, source VARCHAR,
    PRIMARY KEY (pk));
CREATE INDEX ix_effects_run ON effect_journal (run_pk);
CREATE TABLE interrupts (id VARCHAR NOT NULL, run_pk INTEGER NOT NULL, node VARCHAR NOT NULL,
    slot VARCHAR NOT NULL, kind VARCHAR NOT NULL, payload JSON, status VARCHAR NOT NULL, response_schema JSON,
    answer JSON, created_at FLOAT NOT NULL, answered_at FLOAT, PRIMARY KEY (id));
CREATE INDEX ix_interrupts_run ON interrupts (run_pk);
CREATE INDEX ix_interrupts_status ON interrupts (status);
CREATE TABLE trace_events (run_pk INTEGER NOT NULL, seq INTEGER NOT NULL, at FLOAT NOT NULL,
    type VARCHAR NOT NULL, node VARCHAR, attempt INTEGER, data JSON, PRIMARY KEY (run_pk, seq)) WITHOUT ROWID;
INSERT INTO harness_schema (version, applied_at) VALUES (1, 1700000000.0);
INSERT INTO runs (pk, id, thread_id, graph_name, graph_version, status, kind, input, limits, usage,
    max_concurrency, head_seq, event_seq, fence, created_at, updated_at)
    VALUES (1, 'r1', 't1', 'g', 'v1', 'succeeded', 'main', '{"q": 1}', '{}', '{}', 8, 0, 0, 1,
            1700000000.0, 1700000001.0);
INSERT INTO effect_journal (run_pk, node, name, occurrence, attempt, "key", status, request, at)
    VALUES (1, 'n1', 'pay', 0, 1, 'k1', 'succeeded', '{"amount": 10}', 1700000000.5);
"""


def version_1_database(path: Path) -> str:
    """A database as version 1 left it (one finished run with one effect); its URL."""
    with sqlite3.connect(path) as conn:
        conn.executescript(SCHEMA_V1)
    conn.close()
    return f"sqlite:///{path}"


def open_and_close(url: str) -> None:
    SqlStore(url).close()


def layout(path: Path) -> dict[str, set[tuple[object, ...]]]:
    """Each table's columns (name, type, not null, primary key) and each index, by name."""
    with sqlite3.connect(path) as conn:
        tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        out = {t: {(c[1], c[2], c[3], c[5]) for c in conn.execute(f'PRAGMA table_info("{t}")')} for t in tables}
        out["indexes"] = set(conn.execute("SELECT name, tbl_name FROM sqlite_master WHERE type = 'index'"))
    conn.close()
    return out


def versions(path: Path) -> list[int]:
    with sqlite3.connect(path) as conn:
        found = [v for (v,) in conn.execute("SELECT version FROM harness_schema ORDER BY version")]
    conn.close()
    return found


def test_migrations_are_in_order_one_version_apart_up_to_the_schema_version() -> None:
    assert [m.version for m in MIGRATIONS] == list(range(2, SCHEMA_VERSION + 1))


def test_a_version_1_database_is_migrated_to_the_layout_of_a_new_one(tmp_path: Path) -> None:
    open_and_close(version_1_database(tmp_path / "old.db"))
    open_and_close(f"sqlite:///{tmp_path / 'new.db'}")
    assert layout(tmp_path / "old.db") == layout(tmp_path / "new.db")


def test_a_version_1_database_records_each_version_it_was_migrated_through(tmp_path: Path) -> None:
    open_and_close(version_1_database(tmp_path / "old.db"))
    assert versions(tmp_path / "old.db") == list(range(1, SCHEMA_VERSION + 1))


def test_a_migrated_database_is_not_migrated_again_when_reopened(tmp_path: Path) -> None:
    url = version_1_database(tmp_path / "old.db")
    open_and_close(url)
    open_and_close(url)
    assert versions(tmp_path / "old.db") == list(range(1, SCHEMA_VERSION + 1))


def test_rows_written_by_version_1_read_back_after_migration(tmp_path: Path) -> None:
    store = SqlStore(version_1_database(tmp_path / "old.db"))
    try:
        run = store.get_run("r1")
        assert (run.status, run.input, run.options) == (RunStatus.SUCCEEDED, {"q": 1}, {})
        [entry] = store.journal(["r1"])
        assert (entry.status, entry.request, entry.compensate) == (EffectStatus.SUCCEEDED, {"amount": 10}, None)
    finally:
        store.close()


# --------------------------------------------------------------------------- atomicity

def version_1_database_with_compensate(path: Path) -> str:
    """A version-1 database that already has ``effect_journal.compensate``: the second
    statement of migration 2 fails there, after the first one has run."""
    url = version_1_database(path)
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE effect_journal ADD COLUMN compensate VARCHAR")
    conn.close()
    return url


def test_a_failing_migration_raises_an_error_naming_the_statement_and_the_version(tmp_path: Path) -> None:
    url = version_1_database_with_compensate(tmp_path / "old.db")
    with pytest.raises(InvalidRequest, match=r"schema 2.*ADD COLUMN compensate.*duplicate column.*still at schema 1"):
        open_and_close(url)


def test_a_failing_migration_leaves_the_database_exactly_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    url = version_1_database_with_compensate(path)
    before = layout(path)
    with pytest.raises(InvalidRequest):
        open_and_close(url)
    assert (layout(path), versions(path)) == (before, [1])


def test_a_database_whose_migration_failed_migrates_once_the_obstacle_is_removed(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    url = version_1_database_with_compensate(path)
    with pytest.raises(InvalidRequest):
        open_and_close(url)
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE effect_journal DROP COLUMN compensate")
    conn.close()
    open_and_close(url)
    open_and_close(f"sqlite:///{tmp_path / 'new.db'}")
    assert (layout(path), versions(path)) == (layout(tmp_path / "new.db"), list(range(1, SCHEMA_VERSION + 1)))


# --------------------------------------------------------------------------- two processes

#: opens the store given as argv[1] once it has said it is about to
OPENER = "import sys; from runtime.store.sql import SqlStore; print('ready', flush=True); SqlStore(sys.argv[1]).close()"


def open_in_processes_at_once(url: str, hold: Callable[[], Callable[[], None]], n: int = 2) -> list[str]:
    """Open ``url`` in ``n`` fresh processes that all start together; the failures' stderr.

    ``hold()`` takes a lock on the database that any migration has to wait for and
    gives the function that releases it. Each process starts opening while it is held,
    so every one of them gets as far as the lock and then they race from the same
    instant instead of one having finished before the next begins.
    """
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    release = hold()
    procs = [subprocess.Popen([sys.executable, "-c", OPENER, url], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(n)]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline() == "ready\n"
        time.sleep(0.5)  # from "ready" to the lock is a few milliseconds
    except BaseException:
        for p in procs:
            p.kill()
            p.communicate()
        raise
    finally:
        release()
    results = [p.communicate(timeout=120) for p in procs]
    return [err for p, (_, err) in zip(procs, results) if p.returncode != 0]


def hold_sqlite_write_lock(path: Path) -> Callable[[], Callable[[], None]]:
    def hold() -> Callable[[], None]:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")  # as the store sets it: readers go on under the lock
        conn.execute("BEGIN IMMEDIATE")

        def release() -> None:
            conn.execute("ROLLBACK")
            conn.close()
        return release
    return hold


@pytest.mark.slow
def test_two_processes_opening_a_version_1_database_at_once_both_succeed_and_migrate_it_once(
        tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    url = version_1_database(path)
    assert open_in_processes_at_once(url, hold_sqlite_write_lock(path)) == []
    open_and_close(f"sqlite:///{tmp_path / 'new.db'}")
    assert (layout(path), versions(path)) == (layout(tmp_path / "new.db"), list(range(1, SCHEMA_VERSION + 1)))


# --------------------------------------------------------------------------- PostgreSQL

def pg_execute(url: str, *statements: str) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        for stmt in statements:
            conn.execute(text(stmt))
    engine.dispose()


def pg_layout(url: str) -> dict[str, set[tuple[object, ...]]]:
    """Each table's columns (name, type, nullable) and each index, by name."""
    engine = create_engine(url)
    with engine.connect() as conn:
        columns = conn.execute(text("SELECT table_name, column_name, data_type, is_nullable "
                                    "FROM information_schema.columns WHERE table_schema = 'public'"))
        out: dict[str, set[tuple[object, ...]]] = {}
        for table, *column in columns:
            out.setdefault(table, set()).add(tuple(column))
        indexes = conn.execute(text("SELECT indexname, tablename FROM pg_indexes WHERE schemaname = 'public'"))
        out["indexes"] = {tuple(row) for row in indexes}
    engine.dispose()
    return out


def pg_versions(url: str) -> list[int]:
    engine = create_engine(url)
    with engine.connect() as conn:
        found = list(conn.execute(text("SELECT version FROM harness_schema ORDER BY version")).scalars())
    engine.dispose()
    return found


#: what a version-1 PostgreSQL database lacked: the columns migrations 2 and 3 add
PG_UNDO_TO_V1 = ("ALTER TABLE runs DROP COLUMN options", "ALTER TABLE effect_journal DROP COLUMN compensate",
                 "ALTER TABLE interrupts DROP COLUMN sent",
                 "DELETE FROM harness_schema", "INSERT INTO harness_schema VALUES (1, 1700000000.0)")

PG_V1_ROWS = (
    "INSERT INTO runs (id, thread_id, graph_name, graph_version, status, kind, input, limits, usage, "
    "max_concurrency, head_seq, event_seq, fence, created_at, updated_at) VALUES ('r1', 't1', 'g', 'v1', "
    "'succeeded', 'main', '{\"q\": 1}', '{}', '{}', 8, 0, 0, 1, 1700000000.0, 1700000001.0)",
    "INSERT INTO effect_journal (run_pk, node, name, occurrence, attempt, key, status, request, at) "
    "SELECT pk, 'n1', 'pay', 0, 1, 'k1', 'succeeded', '{\"amount\": 10}', 1700000000.5 FROM runs",
)


def version_1_pg_database(url: str) -> dict[str, set[tuple[object, ...]]]:
    """Turn the empty database at ``url`` into one as version 1 left it (one finished
    run with one effect); the layout a new database gets, to compare with."""
    open_and_close(url)
    new = pg_layout(url)
    pg_execute(url, *PG_UNDO_TO_V1, *PG_V1_ROWS)
    return new


def test_a_version_1_postgresql_database_is_migrated_to_the_layout_of_a_new_one(pg_url: str) -> None:
    new = version_1_pg_database(pg_url)
    open_and_close(pg_url)
    assert pg_layout(pg_url) == new


def test_a_version_1_postgresql_database_records_each_version_it_was_migrated_through(pg_url: str) -> None:
    version_1_pg_database(pg_url)
    open_and_close(pg_url)
    open_and_close(pg_url)
    assert pg_versions(pg_url) == list(range(1, SCHEMA_VERSION + 1))


def test_rows_written_by_version_1_read_back_after_migration_on_postgresql(pg_url: str) -> None:
    version_1_pg_database(pg_url)
    store = SqlStore(pg_url)
    try:
        run = store.get_run("r1")
        assert (run.status, run.input, run.options) == (RunStatus.SUCCEEDED, {"q": 1}, {})
        [entry] = store.journal(["r1"])
        assert (entry.status, entry.request, entry.compensate) == (EffectStatus.SUCCEEDED, {"amount": 10}, None)
    finally:
        store.close()


def version_3_pg_database(url: str) -> dict[str, set[tuple[object, ...]]]:
    """Turn the empty database at ``url`` into one as version 3 left it: JSONB columns, a run
    whose input JSONB keeps with its keys in its own order; the layout a new database gets."""
    open_and_close(url)
    new = pg_layout(url)
    pg_execute(url, *(f'ALTER TABLE {t} ALTER COLUMN "{c}" TYPE JSONB USING "{c}"::jsonb' for t, c in JSON_COLUMNS),
               "DELETE FROM harness_schema", "INSERT INTO harness_schema VALUES (3, 1700000000.0)",
               PG_V1_ROWS[0].replace("'{\"q\": 1}'", "'{\"zeta\": 1, \"a\": {\"mm\": 2, \"b\": 3}}'"))
    return new


def test_a_version_3_postgresql_database_gets_json_columns_that_keep_what_is_written(pg_url: str) -> None:
    """Schema 4: JSONB gave objects back with their keys in its own order, so a value read
    back (an effect's result, a state) was not the one recorded."""
    new = version_3_pg_database(pg_url)
    assert pg_layout(pg_url) != new
    store = SqlStore(pg_url)
    try:
        assert pg_layout(pg_url) == new and pg_versions(pg_url) == [3, 4]
        # what JSONB had already reordered stays as it was given back then: the same value
        assert store.get_run("r1").input == {"zeta": 1, "a": {"mm": 2, "b": 3}}
        store.create_run(Batch(run_id="r2", run=store.get_run("r1").evolve(
            id="r2", thread_id="r2", input={"zeta": 1, "a": {"mm": 2, "b": 3}}, status=RunStatus.RUNNING)))
        assert list(store.get_run("r2").input) == ["zeta", "a"]
        assert list(store.get_run("r2").input["a"]) == ["mm", "b"]
    finally:
        store.close()


def test_a_failing_migration_leaves_a_postgresql_database_exactly_as_it_was(pg_url: str) -> None:
    version_1_pg_database(pg_url)
    pg_execute(pg_url, "ALTER TABLE effect_journal ADD COLUMN compensate VARCHAR")
    before = pg_layout(pg_url)
    with pytest.raises(InvalidRequest, match="compensate"):
        open_and_close(pg_url)
    assert (pg_layout(pg_url), pg_versions(pg_url)) == (before, [1])


def hold_pg_schema_table(url: str) -> Callable[[], Callable[[], None]]:
    def hold() -> Callable[[], None]:
        engine = create_engine(url)
        conn = engine.connect()
        conn.exec_driver_sql("LOCK TABLE harness_schema IN ACCESS EXCLUSIVE MODE")  # no one reads the version

        def release() -> None:
            conn.rollback()
            conn.close()
            engine.dispose()
        return release
    return hold


@pytest.mark.slow
def test_two_processes_opening_a_version_1_postgresql_database_at_once_both_succeed_and_migrate_it_once(
        pg_url: str) -> None:
    new = version_1_pg_database(pg_url)
    assert open_in_processes_at_once(pg_url, hold_pg_schema_table(pg_url)) == []
    assert (pg_layout(pg_url), pg_versions(pg_url)) == (new, list(range(1, SCHEMA_VERSION + 1)))
