"""SqlStore: SQLite (WAL, the embedded default) or PostgreSQL through SQLAlchemy Core.

Durability follows the output-commit rule: ordinary batches commit with
``synchronous=NORMAL`` (they survive a process crash; a power cut may lose the
last few, which is safe because nothing outside saw them), and batches marked
``durable`` — before an effect, when a run pauses or ends — are forced to disk.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic_core import from_json, to_json
from sqlalchemy import Engine, create_engine, event, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import ArgumentError, IntegrityError, OperationalError
from sqlmodel import SQLModel

from ...core.errors import InvalidRequest, LeaseLost, NotFound
from ...core.records import (
    Batch,
    Checkpoint,
    EffectStatus,
    Interrupt,
    InterruptKind,
    InterruptStatus,
    JournalEntry,
    NodeAttempt,
    PendingWrite,
    Run,
    RunKind,
    TraceEvent,
    WriteKind,
)
from ...core.states import NodeStatus, RunStatus
from .schema import (
    SCHEMA_VERSION,
    AttemptRow,
    CheckpointRow,
    EffectRow,
    EventRow,
    GraphRow,
    InterruptRow,
    RunRow,
    SchemaVersion,
    WriteRow,
)
from .write import Writer, dumps
from ...core.jsonvalues import JSON



R, C, W, A, E, I, T = (t.__table__ for t in (RunRow, CheckpointRow, WriteRow, AttemptRow,  # type: ignore[union-attr]
                                             EffectRow, InterruptRow, EventRow))
G = GraphRow.__table__  # type: ignore[attr-defined]

_CP_COLS = ("id", "run_pk", "seq", "parent_id", "nodes", "states", "full", "snapshot", "event_seq",
            "created_at", "source")
_WRITE_COLS = ("run_pk", "checkpoint_seq", "node", "attempt", "kind", "value", "created_at")
_ATTEMPT_COLS = ("run_pk", "node", "attempt", "status", "started_at", "ended_at", "error_class", "error",
                 "decision")
_EVENT_COLS = ("run_pk", "seq", "at", "type", "node", "attempt", "data")

#: ordered migrations: (version, statements); ``{json}`` is the dialect's JSON type.
#: A new database gets the current schema from create_all() and skips them all.
MIGRATIONS: list[tuple[int, list[str]]] = [
    (2, ["ALTER TABLE runs ADD COLUMN options {json}",
         "ALTER TABLE effect_journal ADD COLUMN compensate VARCHAR"]),
]


def _dumps(value: Any) -> str:
    return to_json(value).decode()


class SqlStore:
    durable = True

    def __init__(self, url: str = "sqlite:///harness.db", *, echo: bool = False):
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        kwargs: dict[str, Any] = {"echo": echo, "json_serializer": _dumps, "json_deserializer": from_json}
        if self.is_sqlite:
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
        else:
            kwargs["pool_pre_ping"] = True
        try:
            self.engine: Engine = create_engine(url, **kwargs)
        except ModuleNotFoundError as e:
            raise InvalidRequest(f"the database driver for {url.split(':', 1)[0]} is not installed "
                                 f"(missing module {e.name!r})") from None
        except ArgumentError as e:
            raise InvalidRequest(f"not a database URL: {url!r} ({e})") from None
        if self.is_sqlite:
            event.listen(self.engine, "connect", _sqlite_pragmas)
        self._lock = threading.RLock()
        self._pks: dict[str, int] = {}
        self._last_states: dict[str, tuple[int, Mapping[str, str]]] = {}
        self._migrate()
        self._writer = Writer(self.engine, [R, C, W, A, E, I, T])
        self._integrity_errors: tuple[type[BaseException], ...] = _integrity_errors(self.engine)

    # ------------------------------------------------------------------ setup

    def _migrate(self) -> None:
        # several processes may open a brand-new file at once: the losers of a
        # create-table race see "already exists" and simply try again
        for attempt in range(10):
            try:
                return self._migrate_once()
            except (OperationalError, IntegrityError) as e:
                if attempt == 9 or not any(w in str(e) for w in ("already exists", "locked", "UNIQUE")):
                    raise
                time.sleep(0.02 * (attempt + 1))

    def _migrate_once(self) -> None:
        SQLModel.metadata.create_all(self.engine, tables=[t.__table__ for t in (  # type: ignore[union-attr]
            SchemaVersion, GraphRow, RunRow, CheckpointRow, WriteRow, AttemptRow, EffectRow,
            InterruptRow, EventRow)])
        sv = SchemaVersion.__table__  # type: ignore[attr-defined]
        with self.engine.begin() as conn:
            current = conn.execute(select(sv.c.version).order_by(sv.c.version.desc())).scalar()
            if current is None:
                conn.execute(insert(sv).values(version=SCHEMA_VERSION, applied_at=time.time()))
                current = SCHEMA_VERSION
            if current > SCHEMA_VERSION:
                raise InvalidRequest(f"database schema {current} is newer than this version of "
                                     f"Shadow Harness understands ({SCHEMA_VERSION}); upgrade it")
            for version, statements in MIGRATIONS:
                if version > current:
                    json_type = "JSONB" if conn.dialect.name == "postgresql" else "JSON"
                    for stmt in statements:
                        conn.exec_driver_sql(stmt.format(json=json_type))
                    conn.execute(insert(sv).values(version=version, applied_at=time.time()))

    def close(self) -> None:
        self._writer.close()
        self.engine.dispose()

    # ------------------------------------------------------------------ writes

    def save_graph(self, description: Mapping[str, JSON]) -> None:
        with self.engine.begin() as conn:
            found = conn.execute(select(G.c.version).where(G.c.version == description["version"])).first()
            if found is None:
                try:
                    conn.execute(insert(G).values(version=description["version"], name=description["name"],
                                                  description=dict(description)))
                except IntegrityError:  # another process saved it first
                    pass
            elif description.get("ref"):
                conn.execute(update(G).where(G.c.version == description["version"])
                             .values(description=dict(description)))

    def graph_description(self, version: str) -> Mapping[str, JSON] | None:
        with self.engine.connect() as conn:
            return conn.execute(select(G.c.description).where(G.c.version == version)).scalar()

    def create_run(self, batch: Batch) -> None:
        self.create_runs([batch])

    def create_runs(self, batches: Sequence[Batch]) -> None:
        runs = [b.run for b in batches]
        if any(r is None for r in runs):
            raise InvalidRequest("create_run needs batch.run")
        with self._lock:
            try:
                with self._writer.transaction(any(b.durable for b in batches)) as cur:
                    for batch in batches:
                        self._insert_run(cur, batch)
            except self._integrity_errors as e:
                for r in runs:
                    self._forget(r.id)  # type: ignore[union-attr]  # rolled back: so must the caches be
                ids = ", ".join(r.id for r in runs)  # type: ignore[union-attr]
                if "runs.id" in str(e) or "runs_id" in str(e):
                    raise InvalidRequest(f"run {ids} already exists") from None
                raise InvalidRequest(f"run {ids}: batch rejected by the database: {e}") from None
            except BaseException:
                for r in runs:
                    self._forget(r.id)  # type: ignore[union-attr]
                raise

    def _insert_run(self, cur: Any, batch: Batch) -> None:
        run = batch.run
        assert run is not None
        if run.kind == RunKind.CONTINUATION:  # one per parent, checked under the write lock
            cur.execute(self._writer.sql("SELECT id FROM runs WHERE parent_run_id = ? AND kind = ?"),
                        [run.parent_run_id, RunKind.CONTINUATION.value])
            found = cur.fetchone()
            if found is not None:
                raise InvalidRequest(f"run {run.parent_run_id} was already continued by "
                                     f"{found[0]}; resume that run instead")
        pk = self._writer.insert_returning_pk(cur, "runs", {
            **_run_values(run), "id": run.id, "thread_id": run.thread_id,
            "graph_name": run.graph_name, "graph_version": run.graph_version,
            "kind": run.kind.value, "parent_run_id": run.parent_run_id,
            "base_checkpoint_id": run.base_checkpoint_id, "input": dict(run.input),
            "limits": dict(run.limits), "max_concurrency": run.max_concurrency,
            "options": dict(run.options), "created_at": run.created_at})
        self._pks[run.id] = pk
        self._write_children(cur, pk, batch)

    def _forget(self, run_id: str) -> None:
        self._pks.pop(run_id, None)
        self._last_states.pop(run_id, None)

    def commit(self, batch: Batch) -> None:
        with self._lock:
            try:
                with self._writer.transaction(batch.durable) as cur:
                    pk = self._pk_raw(cur, batch.run_id)
                    if batch.run is not None:
                        values = _run_values(batch.run)
                        cols = list(values)
                        params = [(_json_text(values[c]) if c in ("error", "usage") else values[c]) for c in cols]
                        sets = ", ".join(f"{c} = ?" for c in cols)
                        if batch.run.status != RunStatus.RUNNING:
                            sets += ", cancel_reason = NULL"
                        where, args = "pk = ?", [pk]
                        if batch.fence is not None:
                            where, args = "pk = ? AND fence = ?", [pk, batch.fence]
                        cur.execute(self._writer.sql(f"UPDATE runs SET {sets} WHERE {where}"), [*params, *args])
                        if cur.rowcount != 1:
                            raise LeaseLost(f"run {batch.run_id}: another process took it over "
                                            f"(fence {batch.fence} is stale)")
                    elif batch.fence is not None:
                        cur.execute(self._writer.sql("SELECT fence FROM runs WHERE pk = ?"), [pk])
                        if cur.fetchone()[0] != batch.fence:
                            raise LeaseLost(f"run {batch.run_id}: another process took it over "
                                            f"(fence {batch.fence} is stale)")
                    self._write_children(cur, pk, batch)
            except BaseException:
                self._last_states.pop(batch.run_id, None)
                raise

    def _write_children(self, cur: Any, pk: int, b: Batch) -> None:
        w = self._writer
        # the three per-step tables are built as tuples in column order: this is the hot path
        if b.checkpoints:
            w.insert_tuples(cur, "checkpoints", _CP_COLS, [self._checkpoint_row(cur, pk, cp) for cp in b.checkpoints])
        w.insert_tuples(cur, "pending_writes", _WRITE_COLS, [
            (pk, x.checkpoint_seq, x.node, x.attempt, x.kind, dumps(x.value), x.created_at) for x in b.writes])
        w.insert_tuples(cur, "node_attempts", _ATTEMPT_COLS, [
            (pk, a.node, a.attempt, a.status, a.started_at, a.ended_at, a.error_class, a.error, a.decision)
            for a in b.attempts])
        w.insert(cur, "effect_journal", [{
            "run_pk": self._pk_raw(cur, e.run_id), "node": e.node, "name": e.name, "occurrence": e.occurrence,
            "attempt": e.attempt, "key": e.key, "status": e.status.value, "request": e.request,
            "result": e.result, "error": e.error, "at": e.at, "source": e.source,
            "compensate": e.compensate} for e in b.effects])
        for i in b.interrupts:
            cur.execute(w.sql("UPDATE interrupts SET status = ?, answer = " + ("CAST(? AS JSONB)" if w.dialect == "postgresql" else "?")
                              + ", answered_at = ? WHERE id = ?"),
                        [i.status.value, _json_text(i.answer), i.answered_at, i.id])
            if cur.rowcount == 0:
                w.insert(cur, "interrupts", [{
                    "id": i.id, "run_pk": self._pk_raw(cur, i.run_id), "node": i.node, "slot": i.slot,
                    "kind": i.kind.value, "payload": i.payload, "status": i.status.value,
                    "response_schema": i.response_schema, "answer": i.answer, "created_at": i.created_at,
                    "answered_at": i.answered_at}])
        w.insert_tuples(cur, "trace_events", _EVENT_COLS, [
            (pk, e.seq, e.at, e.type, e.node, e.attempt, dumps(e.data) if e.data else None) for e in b.events])

    def _pk_raw(self, cur: Any, run_id: str) -> int:
        pk = self._pks.get(run_id)
        if pk is None:
            cur.execute(self._writer.sql("SELECT pk FROM runs WHERE id = ?"), [run_id])
            row = cur.fetchone()
            if row is None:
                raise NotFound(f"no run with id {run_id!r}")
            pk = self._pks[run_id] = row[0]
        return pk

    def _checkpoint_row(self, cur: Any, pk: int, cp: Checkpoint) -> tuple[Any, ...]:
        states = cp.node_states  # StrEnum values: they compare and serialise as plain strings
        last = self._last_states.get(cp.run_id)
        if last is None and cp.seq > 0:
            with self.engine.connect() as conn:
                prev = self._materialize(conn, pk, cp.seq - 1)
            last = (cp.seq - 1, prev) if prev is not None else None
        # full rows only where no delta base is known (a run's first checkpoint, a new
        # process): periodic full rows would grow with nodes × checkpoints
        full = last is None or last[0] != cp.seq - 1
        if full:
            stored = dict(states)
        elif cp.changed is not None:
            stored = {n: states[n] for n in cp.changed}
        else:
            stored = {n: s for n, s in states.items() if last[1].get(n) != s}  # type: ignore[index]
        self._last_states[cp.run_id] = (cp.seq, states)
        return (cp.id, pk, cp.seq, cp.parent_id, dumps(list(cp.nodes)), dumps(stored), full,
                None if cp.snapshot is None else dumps(dict(cp.snapshot)), cp.event_seq, cp.created_at, cp.source)

    def acquire_lease(self, run_id: str, owner: str, expires_at: float, expected_fence: int) -> Run:
        with self._lock, self._tx(True) as conn:
            pk = self._pk(conn, run_id)
            done = conn.execute(update(R).where(R.c.pk == pk, R.c.fence == expected_fence).values(
                lease_owner=owner, lease_expires_at=expires_at, fence=expected_fence + 1)).rowcount
            if done != 1:
                raise LeaseLost(f"run {run_id}: another process took the lease first")
            self._last_states.pop(run_id, None)
            return _run(conn.execute(select(R).where(R.c.pk == pk)).one())

    def request_cancel(self, run_id: str, reason: str) -> None:
        with self._tx(True) as conn:
            if conn.execute(update(R).where(R.c.id == run_id).values(cancel_reason=reason)).rowcount == 0:
                raise NotFound(f"no run with id {run_id!r}")

    def cancel_request(self, run_id: str) -> str | None:
        with self.engine.connect() as conn:
            return conn.execute(select(R.c.cancel_reason).where(R.c.id == run_id)).scalar()

    def _tx(self, durable: bool) -> Any:
        return _Transaction(self.engine, durable and self.is_sqlite)

    # ------------------------------------------------------------------ reads

    def _pk(self, conn: Connection, run_id: str) -> int:
        pk = self._pks.get(run_id)
        if pk is None:
            pk = conn.execute(select(R.c.pk).where(R.c.id == run_id)).scalar()
            if pk is None:
                raise NotFound(f"no run with id {run_id!r}")
            self._pks[run_id] = pk
        return pk

    def get_run(self, run_id: str) -> Run:
        with self.engine.connect() as conn:
            row = conn.execute(select(R).where(R.c.id == run_id)).first()
        if row is None:
            raise NotFound(f"no run with id {run_id!r}")
        return _run(row)

    def list_runs(self, status: RunStatus | None = None, thread_id: str | None = None,
                  limit: int = 100) -> list[Run]:
        stmt = select(R).order_by(R.c.pk.desc()).limit(limit)
        if status is not None:
            stmt = stmt.where(R.c.status == status.value)
        if thread_id is not None:
            stmt = stmt.where(R.c.thread_id == thread_id)
        with self.engine.connect() as conn:
            return [_run(r) for r in conn.execute(stmt)]

    def child_runs(self, run_id: str) -> list[Run]:
        with self.engine.connect() as conn:
            return [_run(r) for r in conn.execute(select(R).where(R.c.parent_run_id == run_id).order_by(R.c.pk))]

    def checkpoints(self, run_id: str) -> list[Checkpoint]:
        with self.engine.connect() as conn:
            pk = self._pk(conn, run_id)
            rows = conn.execute(select(C).where(C.c.run_pk == pk).order_by(C.c.seq)).all()
        out: list[Checkpoint] = []
        states: dict[str, str] = {}
        for row in rows:
            changed = None if not out else tuple(n for n, st in row.states.items() if states.get(n) != st)
            states = dict(row.states) if row.full else {**states, **row.states}
            out.append(_checkpoint(run_id, row, states, changed))
        return out

    def get_checkpoint(self, checkpoint_id: str) -> Checkpoint:
        with self.engine.connect() as conn:
            row = conn.execute(select(C).where(C.c.id == checkpoint_id)).first()
            if row is None:
                raise NotFound(f"no checkpoint with id {checkpoint_id!r}")
            run_id = conn.execute(select(R.c.id).where(R.c.pk == row.run_pk)).scalar_one()
            states = self._materialize(conn, row.run_pk, row.seq) or {}
        return _checkpoint(run_id, row, states)

    def find_checkpoint(self, run_id: str, at_or_before: int | None = None, *,
                        with_snapshot: bool = False) -> Checkpoint | None:
        with self.engine.connect() as conn:
            pk = self._pk(conn, run_id)
            stmt = select(C).where(C.c.run_pk == pk).order_by(C.c.seq.desc()).limit(1)
            if at_or_before is not None:
                stmt = stmt.where(C.c.seq <= at_or_before)
            if with_snapshot:
                stmt = stmt.where(C.c.snapshot.is_not(None))
            row = conn.execute(stmt).first()
            if row is None:
                return None
            states = self._materialize(conn, pk, row.seq) or {}
        return _checkpoint(run_id, row, states)

    def _materialize(self, conn: Connection, pk: int, seq: int) -> dict[str, str] | None:
        """Full node states at checkpoint ``seq``: the last full row at or before it plus deltas."""
        base = conn.execute(select(C.c.seq).where(C.c.run_pk == pk, C.c.seq <= seq, C.c.full.is_(True))
                            .order_by(C.c.seq.desc()).limit(1)).scalar()
        if base is None:
            return None
        states: dict[str, str] = {}
        for row in conn.execute(select(C.c.states).where(C.c.run_pk == pk, C.c.seq >= base, C.c.seq <= seq)
                                .order_by(C.c.seq)):
            states.update(row.states)
        return states

    def pending_writes(self, run_id: str) -> list[PendingWrite]:
        with self.engine.connect() as conn:
            pk = self._pk(conn, run_id)
            rows = conn.execute(select(W).where(W.c.run_pk == pk).order_by(W.c.pk)).all()
        return [PendingWrite(run_id, r.checkpoint_seq, r.node, r.attempt, WriteKind(r.kind), r.value, r.created_at)
                for r in rows]

    def node_writes(self, run_ids: Sequence[str]) -> dict[str, JSON]:
        out: dict[str, JSON] = {}
        with self.engine.connect() as conn:
            for rid in run_ids:
                pk = self._pk(conn, rid)
                for r in conn.execute(select(W.c.node, W.c.value).where(
                        W.c.run_pk == pk, W.c.kind == WriteKind.WRITES.value).order_by(W.c.pk)):
                    out.setdefault(r.node, r.value)
        return out

    def node_attempts(self, run_id: str) -> list[NodeAttempt]:
        with self.engine.connect() as conn:
            pk = self._pk(conn, run_id)
            rows = conn.execute(select(A).where(A.c.run_pk == pk).order_by(A.c.pk)).all()
        return [NodeAttempt(run_id, r.node, r.attempt, NodeStatus(r.status), r.started_at, r.ended_at,
                            r.error_class, r.error, r.decision) for r in rows]

    def journal(self, run_ids: Sequence[str]) -> list[JournalEntry]:
        out: list[JournalEntry] = []
        with self.engine.connect() as conn:
            for rid in run_ids:
                pk = self._pk(conn, rid)
                for r in conn.execute(select(E).where(E.c.run_pk == pk).order_by(E.c.pk)):
                    out.append(JournalEntry(rid, r.node, r.name, r.occurrence, r.attempt, r.key,
                                            EffectStatus(r.status), r.request, r.result, r.error, r.at, r.source,
                                            r.compensate))
        return out

    def interrupts(self, run_id: str | None = None,
                   status: InterruptStatus | None = None) -> list[Interrupt]:
        stmt = select(I, R.c.id.label("run_id")).join(R, R.c.pk == I.c.run_pk).order_by(I.c.created_at, I.c.id)
        if run_id is not None:
            stmt = stmt.where(R.c.id == run_id)
        if status is not None:
            stmt = stmt.where(I.c.status == status.value)
        with self.engine.connect() as conn:
            rows = conn.execute(stmt).all()
        return [Interrupt(r.id, r.run_id, r.node, r.slot, InterruptKind(r.kind), r.payload,
                          InterruptStatus(r.status), r.created_at, r.response_schema, r.answer, r.answered_at)
                for r in rows]

    def events(self, run_id: str, after_seq: int = 0) -> list[TraceEvent]:
        with self.engine.connect() as conn:
            pk = self._pk(conn, run_id)
            rows = conn.execute(select(T).where(T.c.run_pk == pk, T.c.seq > after_seq).order_by(T.c.seq)).all()
        return [TraceEvent(run_id, r.seq, r.at, r.type, r.node, r.attempt, r.data or {}) for r in rows]


class _Transaction:
    """``engine.begin()`` that forces this commit to disk when asked (SQLite)."""

    def __init__(self, engine: Engine, force: bool):
        self.engine, self.force = engine, force

    def __enter__(self) -> Connection:
        self.conn = self.engine.connect()
        if self.force:  # on the driver connection: a SQLAlchemy statement would open the transaction
            self.conn.connection.dbapi_connection.execute("PRAGMA synchronous=FULL")  # type: ignore[union-attr]
        self.tx = self.conn.begin()
        return self.conn

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc_type is None:
                self.tx.commit()
            else:
                self.tx.rollback()
        finally:
            if self.force:
                self.conn.connection.dbapi_connection.execute("PRAGMA synchronous=NORMAL")  # type: ignore[union-attr]
            self.conn.close()


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


def _run_values(run: Run) -> dict[str, Any]:
    return {"status": run.status.value, "error": dict(run.error) if run.error else None,
            "usage": dict(run.usage), "head_seq": run.head_seq, "event_seq": run.event_seq,
            "fence": run.fence, "lease_owner": run.lease_owner, "lease_expires_at": run.lease_expires_at,
            "updated_at": run.updated_at}


def _run(r: Any) -> Run:
    return Run(id=r.id, thread_id=r.thread_id, graph_name=r.graph_name, graph_version=r.graph_version,
               status=RunStatus(r.status), kind=RunKind(r.kind), input=r.input, created_at=r.created_at,
               updated_at=r.updated_at, parent_run_id=r.parent_run_id, base_checkpoint_id=r.base_checkpoint_id,
               error=r.error, limits=r.limits or {}, usage=r.usage or {}, max_concurrency=r.max_concurrency,
               head_seq=r.head_seq, event_seq=r.event_seq, fence=r.fence, lease_owner=r.lease_owner,
               lease_expires_at=r.lease_expires_at, options=r.options or {})


_STATUS = {s.value: s for s in NodeStatus}


def _checkpoint(run_id: str, r: Any, states: Mapping[str, str], changed: tuple[str, ...] | None = None) -> Checkpoint:
    return Checkpoint(id=r.id, run_id=run_id, seq=r.seq, parent_id=r.parent_id, nodes=tuple(r.nodes or ()),
                      node_states={n: _STATUS[s] for n, s in states.items()}, event_seq=r.event_seq,
                      created_at=r.created_at, source=r.source, snapshot=r.snapshot, changed=changed)


def _json_text(value: Any) -> str | None:
    return None if value is None else _dumps(value)


def _integrity_errors(engine: Engine) -> tuple[type[BaseException], ...]:
    """The driver's own IntegrityError (the write path bypasses SQLAlchemy's wrapping)."""
    module = engine.dialect.dbapi
    found = getattr(module, "IntegrityError", None)
    return (IntegrityError, found) if isinstance(found, type) else (IntegrityError,)
