"""SQL tables (SQLModel) — one schema for SQLite and PostgreSQL.

Table rows stay here; the kernel only sees the records in ``runtime.core.records``
(``read.py`` turns rows into records, ``write.py`` records into rows).
Rows are appended, never rewritten, except a run's own row (status, heads,
lease) and an interrupt's answer; ``compensation_asks`` is a queue, its rows deleted as
workers take them up. Child tables point at ``runs.pk`` (an integer)
rather than repeating the run's text id in every row: it keeps the database small.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Column, Index, Table, UniqueConstraint
from sqlmodel import Field, SQLModel

#: the version a new database is created at; each entry of ``migrations.MIGRATIONS``
#: brings an older database one version closer to it (a test keeps the two in step)
SCHEMA_VERSION = 4

#: JSON kept as its text on every database: PostgreSQL's JSONB would give objects back with
#: their keys in its own order (and -0.0 as 0), so a run would read back values unlike the
#: ones it recorded, and its replay differ from it (schema 4)
Json = JSON()


def _json(nullable: bool = True) -> Any:
    return Field(default=None, sa_column=Column(Json, nullable=nullable))


class SchemaVersion(SQLModel, table=True):
    __tablename__ = "harness_schema"
    version: int = Field(primary_key=True)
    applied_at: float


class GraphRow(SQLModel, table=True):
    __tablename__ = "graphs"
    version: str = Field(primary_key=True)
    name: str
    description: Any = _json(nullable=False)


class RunRow(SQLModel, table=True):
    __tablename__ = "runs"
    __table_args__ = (Index("ix_runs_status", "status"), Index("ix_runs_thread", "thread_id"),
                      Index("ix_runs_parent", "parent_run_id"))
    pk: int | None = Field(default=None, primary_key=True)
    id: str = Field(unique=True)
    thread_id: str
    graph_name: str
    graph_version: str
    status: str
    kind: str
    parent_run_id: str | None = None
    base_checkpoint_id: str | None = None
    input: Any = _json(nullable=False)
    error: Any = _json()
    limits: Any = _json()
    usage: Any = _json()
    max_concurrency: int = 8
    head_seq: int = 0
    event_seq: int = 0
    fence: int = 0
    lease_owner: str | None = None
    lease_expires_at: float | None = None
    cancel_reason: str | None = None
    options: Any = _json()
    created_at: float
    updated_at: float


class CheckpointRow(SQLModel, table=True):
    __tablename__ = "checkpoints"
    __table_args__ = (UniqueConstraint("run_pk", "seq"),)
    pk: int | None = Field(default=None, primary_key=True)
    id: str = Field(unique=True)
    run_pk: int
    seq: int
    parent_id: str | None = None
    nodes: Any = _json()
    #: node statuses: all of them when ``full``, else only those that changed since seq-1
    states: Any = _json()
    full: bool = False
    snapshot: Any = _json()
    event_seq: int
    created_at: float
    source: str = "step"


class WriteRow(SQLModel, table=True):
    __tablename__ = "pending_writes"
    __table_args__ = (Index("ix_writes_run", "run_pk", "node"),)
    pk: int | None = Field(default=None, primary_key=True)
    run_pk: int
    checkpoint_seq: int
    node: str
    attempt: int
    kind: str
    value: Any = _json()
    created_at: float


class AttemptRow(SQLModel, table=True):
    __tablename__ = "node_attempts"
    __table_args__ = (Index("ix_attempts_run", "run_pk"),)
    pk: int | None = Field(default=None, primary_key=True)
    run_pk: int
    node: str
    attempt: int
    status: str
    started_at: float
    ended_at: float
    error_class: str | None = None
    error: str | None = None
    decision: str | None = None


class EffectRow(SQLModel, table=True):
    __tablename__ = "effect_journal"
    __table_args__ = (Index("ix_effects_run", "run_pk"),)
    pk: int | None = Field(default=None, primary_key=True)
    run_pk: int
    node: str
    name: str
    occurrence: int
    attempt: int
    key: str
    status: str
    request: Any = _json()
    result: Any = _json()
    error: str | None = None
    at: float
    source: str | None = None
    compensate: str | None = None


class InterruptRow(SQLModel, table=True):
    __tablename__ = "interrupts"
    __table_args__ = (Index("ix_interrupts_run", "run_pk"), Index("ix_interrupts_status", "status"))
    id: str = Field(primary_key=True)
    run_pk: int
    node: str
    slot: str
    kind: str
    payload: Any = _json()
    status: str
    response_schema: Any = _json()
    answer: Any = _json()
    created_at: float
    answered_at: float | None = None
    #: an answer another process left for the process driving the run: {answer, by, at}
    sent: Any = _json()


class EventRow(SQLModel, table=True):
    __tablename__ = "trace_events"
    __table_args__ = {"sqlite_with_rowid": False}
    run_pk: int = Field(primary_key=True)
    seq: int = Field(primary_key=True)
    at: float
    type: str
    node: str | None = None
    attempt: int | None = None
    data: Any = _json()


class CompensationAskRow(SQLModel, table=True):
    """A compensation left to a worker. A table a database of schema 3 gains when it is opened
    (``create_all``; once, by a role that may create tables, as a migration needs), with no
    migration: code that predates it leaves it alone."""

    __tablename__ = "compensation_asks"
    __table_args__ = (Index("ix_asks_at", "asked_at"),)
    run_pk: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    retry_in_doubt: bool = False
    asked_at: float


def _table(model: type[SQLModel]) -> Table:
    return model.__table__  # type: ignore[attr-defined, no-any-return]


#: the tables as SQLAlchemy Core objects (queries, ``create_all``, the writer's statements)
VERSIONS, GRAPHS, RUNS, CHECKPOINTS, WRITES, ATTEMPTS, EFFECTS, INTERRUPTS, EVENTS, ASKS = TABLES = tuple(
    _table(m) for m in (SchemaVersion, GraphRow, RunRow, CheckpointRow, WriteRow, AttemptRow, EffectRow,
                        InterruptRow, EventRow, CompensationAskRow))

#: (table, column) of every JSON column (schema 4 turns PostgreSQL's from JSONB into JSON)
JSON_COLUMNS: tuple[tuple[str, str], ...] = tuple(
    (t.name, c.name) for t in TABLES for c in t.columns if isinstance(c.type, JSON))
