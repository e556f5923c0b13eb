"""The write side of SqlStore: one DBAPI connection, fixed SQL, many rows per statement.

Writes are the hot path (every run step commits a batch), so they skip the
SQLAlchemy execution layer and send statements built once from the table
definitions in ``schema.py`` (``statements.py``); reads keep using SQLAlchemy Core
(``read.py``).
Every write is one transaction on this connection, taken under a lock, and a
batch for a leased run is refused unless its fencing token is still the run's.

A check and the write that depends on it must not be split by another process's
write. SQLite's ``BEGIN IMMEDIATE`` takes the database's write lock first. On
PostgreSQL (READ COMMITTED) the run's row is locked instead: by the fenced
``UPDATE`` of a batch with a run row, by ``SELECT ... FOR UPDATE`` before a batch
without one and before creating a run that has a parent (on the parent's row). A
lease taken meanwhile then waits for the batch, and one of two continuations sees
the other.

Durability follows the output-commit rule (ADR 0001): an ordinary batch commits
without waiting for the disk, a ``durable`` one is forced, and with it everything
committed before it (``connection.WriteConnection``, which also opens a new
PostgreSQL connection after one was lost). The caches here stay valid through such a
loss: a run's key never changes, and a batch that fails drops what it cached.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

from pydantic_core import from_json
from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError

from ...core.errors import InvalidRequest, LeaseLost, NotFound
from ...core.jsonvalues import JSON as JSONValue
from ...core.left import QUEUED, REQUEST
from ...core.records import Batch, Checkpoint, Run, RunKind
from ...core.states import NodeStatus, RunStatus
from .connection import WriteConnection
from .notify import notify_sql
from .read import Reader, run_record
from .schema import TABLES, VERSIONS
from .statements import NO_INT, NO_TEXT, Statements, dumps, pg_dumps, pg_text, same


#: the tables whose rows the hot path builds as tuples, in this column order
_TUPLE_COLUMNS = {
    "checkpoints": ("id", "run_pk", "seq", "parent_id", "nodes", "states", "full", "snapshot", "event_seq",
                    "created_at", "source"),
    "pending_writes": ("run_pk", "checkpoint_seq", "node", "attempt", "kind", "value", "created_at"),
    "node_attempts": ("run_pk", "node", "attempt", "status", "started_at", "ended_at", "error_class", "error",
                      "decision"),
    "trace_events": ("run_pk", "seq", "at", "type", "node", "attempt", "data"),
}
#: the columns of a run's row that change as it runs (``_run_state``), and those of them holding JSON
_RUN_STATE = ("status", "error", "usage", "limits", "head_seq", "event_seq", "fence", "lease_owner",
              "lease_expires_at", "updated_at")
_RUN_STATE_JSON = ("error", "usage", "limits")


class Writer:
    """The store's one write connection; every method is one transaction on it."""

    def __init__(self, engine: Engine, reader: Reader):
        self.dialect = engine.dialect.name
        sqlite = self.dialect == "sqlite"
        #: the JSON text and the free-text values as this database can store them
        self._dumps, self._text = (dumps, same) if sqlite else (pg_dumps, pg_text)
        self._db = WriteConnection(engine)
        #: what a check-then-write adds to its SELECT (SQLite's BEGIN IMMEDIATE locks it all)
        self._for_update = "" if sqlite else " FOR UPDATE"
        self._stmts = {t.name: Statements(t, engine.dialect, self._dumps, stand_ins=t.name in _TUPLE_COLUMNS)
                       for t in TABLES if t is not VERSIONS}
        # the hot path's None in a text or JSON column and in an integer one, its booleans by value (``NO_TEXT``)
        self._no_text: int | None = NO_TEXT if sqlite else None
        self._no_int: str | None = NO_INT if sqlite else None
        self._flag: tuple[int, int] | tuple[bool, bool] = (0, 1) if sqlite else (False, True)
        for table, columns in _TUPLE_COLUMNS.items():
            if self._stmts[table].columns != columns:
                raise AssertionError(f"{table}: columns {self._stmts[table].columns} != {columns}")
        self._lock = threading.RLock()
        self._reader = reader
        self._pks = reader.pks
        #: run id -> (seq, node states) of the last checkpoint written: the base of the next delta
        self._last_states: dict[str, tuple[int, Mapping[str, str]]] = {}
        self._integrity_errors = _integrity_errors(engine)
        # statements of the hot path, built once (``?`` turned into the driver's style)
        json = "?" if sqlite else "CAST(? AS JSON)"
        def run_set(columns: Sequence[str]) -> str:
            return ", ".join(f"{c} = {json if c in _RUN_STATE_JSON else '?'}" for c in columns)
        #: by (stopped, fenced, status left out): a status the row has already is not set again,
        #: or SQLite rewrites its index entry (a page written) at every commit of a running run
        self._update_run = {(stopped, fenced, same): self._sql(
            f"UPDATE runs SET {run_set(_RUN_STATE[1:] if same else _RUN_STATE)}"
            f"{', cancel_reason = NULL' if stopped else ''} WHERE pk = ?{' AND fence = ?' if fenced else ''}")
            for stopped in (False, True) for fenced in (False, True) for same in (False, True)}
        #: run id -> the fence under which this writer last stored the run as RUNNING
        self._running: dict[str, int] = {}
        # an answer recorded takes the place of one left for it (``send_answers``)
        self._answer = self._sql(f"UPDATE interrupts SET status = ?, answer = {json}, answered_at = ?, sent = NULL "
                                 f"WHERE id = ?")
        self._send = self._sql(f"UPDATE interrupts SET sent = {json} WHERE id = ? AND run_pk = ? "
                               f"AND status = 'pending' AND sent IS NULL")
        self._describe = self._sql(f"UPDATE graphs SET description = {json} WHERE version = ?")

    def _sql(self, text: str) -> str:
        """Statements are written with ``?``; this gives them the driver's parameter style."""
        return text if self.dialect == "sqlite" else text.replace("?", "%s")

    def close(self) -> None:
        self._db.close()

    def _notify(self, cur: Any, kind: str, run_id: str) -> None:
        """Tell the processes listening (PostgreSQL) once this transaction commits."""
        if self.dialect == "postgresql":
            cur.execute(notify_sql(kind), [run_id])

    # ------------------------------------------------------------------ runs and batches

    def create_runs(self, batches: Sequence[Batch]) -> None:
        runs = [b.run for b in batches if b.run is not None]
        if len(runs) != len(batches):
            raise InvalidRequest("create_run needs batch.run")
        with self._lock:
            try:
                with self._db.transaction(any(b.durable for b in batches)) as cur:
                    for batch, run in zip(batches, runs):
                        self._insert_run(cur, run, batch)
                        if run.status == RunStatus.QUEUED:
                            self._notify(cur, QUEUED, run.id)
            except self._integrity_errors as e:
                self._forget(runs)  # rolled back: so must the caches be
                ids = ", ".join(r.id for r in runs)
                if "runs.id" in str(e) or "runs_id" in str(e):
                    raise InvalidRequest(f"run {ids} already exists") from None
                raise InvalidRequest(f"run {ids}: batch rejected by the database: {e}") from None
            except BaseException:
                self._forget(runs)
                raise

    def _insert_run(self, cur: Any, run: Run, batch: Batch) -> None:
        if run.parent_run_id is None and run.kind == RunKind.MAIN and run.thread_id != run.id:
            self._refuse_second_first_turn(cur, run)
        if self._for_update and run.parent_run_id is not None:
            # the parent's row, before any check on the runs that follow it: of two runs
            # created after it at once, the second waits here, then sees the first
            cur.execute(self._sql("SELECT pk FROM runs WHERE id = ? FOR UPDATE"), [run.parent_run_id])
        # one continuation per run, and one next conversation turn per run: checked under
        # the write lock (and the parent's row lock), so two callers cannot both pass
        if run.parent_run_id is not None and run.kind in (RunKind.CONTINUATION, RunKind.MAIN):
            cur.execute(self._sql("SELECT id FROM runs WHERE parent_run_id = ? AND kind = ?"),
                        [run.parent_run_id, run.kind.value])
            found = cur.fetchone()
            if found is not None and run.kind == RunKind.CONTINUATION:
                raise InvalidRequest(f"run {run.parent_run_id} was already continued by "
                                     f"{found[0]}; resume that run instead")
            if found is not None:
                raise InvalidRequest(f"run {run.parent_run_id} of thread {run.thread_id} was already followed "
                                     f"by turn {found[0]}; start the turn again to follow the thread's latest run")
        st = self._stmts["runs"]
        cur.execute(st.insert + " RETURNING pk", st.row({
            **_run_state(run), "id": run.id, "thread_id": run.thread_id,
            "graph_name": run.graph_name, "graph_version": run.graph_version,
            "kind": run.kind.value, "parent_run_id": run.parent_run_id,
            "base_checkpoint_id": run.base_checkpoint_id, "input": dict(run.input),
            "limits": dict(run.limits), "max_concurrency": run.max_concurrency,
            "options": dict(run.options), "created_at": run.created_at}))
        pk = self._pks[run.id] = int(cur.fetchone()[0])
        self._write_children(cur, pk, batch)

    def _refuse_second_first_turn(self, cur: Any, run: Run) -> None:
        """A run that begins a named thread: refused when the thread has a run already (two
        processes starting its first turn at once both saw none; the thread would follow
        only one of them, and the other's input would silently drop out)."""
        if self._for_update:
            # PostgreSQL: no row to lock yet, so first turns of one thread queue on a lock of its name
            key = int.from_bytes(hashlib.blake2b(run.thread_id.encode(), digest_size=8).digest(), "big", signed=True)
            cur.execute("SELECT pg_advisory_xact_lock(%s)", [key])
        cur.execute(self._sql("SELECT id FROM runs WHERE thread_id = ? LIMIT 1"), [run.thread_id])
        found = cur.fetchone()
        if found is not None:
            raise InvalidRequest(f"thread {run.thread_id} already has run {found[0]}; start the turn again "
                                 f"to follow the thread's latest run")

    def _forget(self, runs: Sequence[Run]) -> None:
        for run in runs:
            self._pks.pop(run.id, None)
            self._last_states.pop(run.id, None)

    def commit(self, batch: Batch) -> None:
        with self._lock:
            try:
                with self._db.transaction(batch.durable) as cur:
                    pk = self._pk(cur, batch.run_id)
                    if batch.run is not None:
                        running = batch.run.status == RunStatus.RUNNING
                        # under the same fence nobody else changed the row's status since
                        same = running and batch.fence is not None and self._running.get(batch.run_id) == batch.fence
                        stmt = self._update_run[not running, batch.fence is not None, same]
                        params = [self._dumps(v) if c in _RUN_STATE_JSON else v
                                  for c, v in _run_state(batch.run).items() if not (same and c == "status")]
                        cur.execute(stmt, [*params, pk] if batch.fence is None else [*params, pk, batch.fence])
                        if cur.rowcount != 1:
                            raise _stale(batch)
                        if batch.run.status == RunStatus.QUEUED:   # answered for the workers
                            self._notify(cur, QUEUED, batch.run_id)
                    elif batch.fence is not None:
                        # locked: a lease taken meanwhile waits until this batch is in
                        cur.execute(self._sql("SELECT fence FROM runs WHERE pk = ?" + self._for_update), [pk])
                        if cur.fetchone()[0] != batch.fence:
                            raise _stale(batch)
                    self._write_children(cur, pk, batch)
            except BaseException:
                self._last_states.pop(batch.run_id, None)
                self._running.pop(batch.run_id, None)
                raise
            if batch.run is not None and batch.run.status == RunStatus.RUNNING and batch.fence is not None:
                self._running[batch.run_id] = batch.fence
            elif batch.run is not None:
                self._running.pop(batch.run_id, None)
            if batch.run is not None and batch.run.status != RunStatus.RUNNING:
                # ended or paused: a continuation reads its delta base back, and a long-lived
                # process must not keep every run's statuses it ever wrote
                self._last_states.pop(batch.run_id, None)

    def _write_children(self, cur: Any, pk: int, b: Batch) -> None:
        # the four per-step tables are built as tuples in column order: this is the hot path
        # (None as ``no``, enum members as ``str()``: see ``NO_TEXT``)
        st, dumps, text, no = self._stmts, self._dumps, self._text, self._no_text
        if b.checkpoints:
            st["checkpoints"].insert_rows(cur, [self._checkpoint_row(pk, cp) for cp in b.checkpoints])
        if b.writes:
            st["pending_writes"].insert_rows(cur, [
                (pk, x.checkpoint_seq, x.node, x.attempt, str(x.kind), no if x.value is None else dumps(x.value),
                 x.created_at) for x in b.writes])
        if b.attempts:
            st["node_attempts"].insert_rows(cur, [
                (pk, a.node, a.attempt, str(a.status), a.started_at, a.ended_at,
                 no if a.error_class is None else str(a.error_class), no if a.error is None else text(a.error),
                 no if a.decision is None else a.decision)
                for a in b.attempts])
        if b.effects:
            effects = st["effect_journal"]
            cur.executemany(effects.insert, [effects.row({
                "run_pk": self._pk(cur, e.run_id), "node": e.node, "name": e.name, "occurrence": e.occurrence,
                "attempt": e.attempt, "key": e.key, "status": e.status.value, "request": e.request,
                "result": e.result, "error": text(e.error), "at": e.at, "source": e.source,
                "compensate": e.compensate}) for e in b.effects])
        for i in b.interrupts:  # a new interrupt, or the answer to one already stored
            cur.execute(self._answer, [i.status.value, dumps(i.answer), i.answered_at, i.id])
            if cur.rowcount == 0:
                cur.execute(st["interrupts"].insert, st["interrupts"].row({
                    "id": i.id, "run_pk": self._pk(cur, i.run_id), "node": i.node, "slot": i.slot,
                    "kind": i.kind.value, "payload": i.payload, "status": i.status.value,
                    "response_schema": i.response_schema, "answer": i.answer, "created_at": i.created_at,
                    "answered_at": i.answered_at}))
        if b.events:
            no_int = self._no_int
            st["trace_events"].insert_rows(cur, [
                (pk, e.seq, e.at, str(e.type), no if e.node is None else e.node,
                 no_int if e.attempt is None else e.attempt, dumps(e.data) if e.data else no) for e in b.events])

    def _checkpoint_row(self, pk: int, cp: Checkpoint) -> tuple[Any, ...]:
        dumps = self._dumps
        states = cp.node_states  # StrEnum values: they compare and serialise as plain strings
        last = self._last_states.get(cp.run_id)
        if last is None and cp.seq > 0:
            prev = self._reader.node_states(pk, cp.seq - 1)
            last = (cp.seq - 1, prev) if prev is not None else None
        # full rows only where no delta base is known (a run's first checkpoint, a new
        # process): periodic full rows would grow with nodes × checkpoints
        # statuses as plain strings: the JSON encoder reads an enum member's value through
        # a Python-level property, once per status
        if last is None or last[0] != cp.seq - 1:
            full, stored = True, {n: _PLAIN[s] for n, s in states.items()}
        elif cp.changed is not None:
            full, stored = False, {n: _PLAIN[states[n]] for n in cp.changed}
        else:
            full, stored = False, {n: _PLAIN[s] for n, s in states.items() if last[1].get(n) != s}
        self._last_states[cp.run_id] = (cp.seq, states)
        no = self._no_text
        return (cp.id, pk, cp.seq, no if cp.parent_id is None else cp.parent_id, dumps(list(cp.nodes)),
                dumps(stored), self._flag[full], no if cp.snapshot is None else dumps(dict(cp.snapshot)),
                cp.event_seq, cp.created_at, str(cp.source))

    def _pk(self, cur: Any, run_id: str) -> int:
        pk = self._pks.get(run_id)
        if pk is None:
            cur.execute(self._sql("SELECT pk FROM runs WHERE id = ?"), [run_id])
            row = cur.fetchone()
            if row is None:
                raise NotFound(f"no run with id {run_id!r}")
            pk = self._pks[run_id] = row[0]
        return pk

    # ------------------------------------------------------------------ outside batches

    def acquire_lease(self, run_id: str, owner: str, expires_at: float, expected_fence: int) -> Run:
        with self._lock, self._db.transaction(True) as cur:
            pk = self._pk(cur, run_id)
            cur.execute(self._sql("UPDATE runs SET lease_owner = ?, lease_expires_at = ?, fence = ? "
                                  "WHERE pk = ? AND fence = ?"),
                        [owner, expires_at, expected_fence + 1, pk, expected_fence])
            if cur.rowcount != 1:
                raise LeaseLost(f"run {run_id}: another process took the lease first")
            self._last_states.pop(run_id, None)
            st = self._stmts["runs"]
            cur.execute(self._sql(f"SELECT {st.quoted} FROM runs WHERE pk = ?"), [pk])
            row = cur.fetchone()
        parse = self.dialect == "sqlite"  # SQLite's driver gives JSON back as text; PostgreSQL's decodes it
        return run_record(SimpleNamespace(**{c: from_json(v) if j and v is not None and parse else v
                                             for c, v, j in zip(st.columns, row, st.json)}))

    def request_cancel(self, run_id: str, reason: str) -> None:
        with self._lock, self._db.transaction(True) as cur:
            cur.execute(self._sql("UPDATE runs SET cancel_reason = ? WHERE id = ?"), [self._text(reason), run_id])
            if cur.rowcount == 0:
                raise NotFound(f"no run with id {run_id!r}")
            self._notify(cur, REQUEST, run_id)

    def ask_compensation(self, run_id: str, retry_in_doubt: bool, at: float) -> None:
        with self._lock, self._db.transaction(True) as cur:
            cur.execute(self._sql("SELECT pk FROM runs WHERE id = ?"), [run_id])
            row = cur.fetchone()
            if row is None:
                raise NotFound(f"no run with id {run_id!r}")
            # one statement: two processes asking at once both succeed, the later ask kept
            cur.execute(self._sql("INSERT INTO compensation_asks (run_pk, retry_in_doubt, asked_at) VALUES (?, ?, ?) "
                                  "ON CONFLICT (run_pk) DO UPDATE SET retry_in_doubt = excluded.retry_in_doubt, "
                                  "asked_at = excluded.asked_at"),
                        [row[0], self._flag[bool(retry_in_doubt)], at])
            self._notify(cur, QUEUED, run_id)

    def drop_compensation_ask(self, run_id: str, at: float) -> None:
        with self._lock, self._db.transaction(True) as cur:
            cur.execute(self._sql("DELETE FROM compensation_asks WHERE asked_at = ? AND run_pk = "
                                  "(SELECT pk FROM runs WHERE id = ?)"), [at, run_id])

    def send_answers(self, run_id: str, answers: Mapping[str, JSONValue], by: str | None, at: float) -> bool:
        try:
            with self._lock, self._db.transaction(False) as cur:
                cur.execute(self._sql(f"SELECT pk FROM runs WHERE id = ?{self._for_update}"), [run_id])
                row = cur.fetchone()
                if row is None:
                    raise NotFound(f"no run with id {run_id!r}")
                for interrupt_id, value in answers.items():
                    cur.execute(self._send, [self._dumps({"answer": value, "by": by, "at": at}), interrupt_id, row[0]])
                    if cur.rowcount == 0:
                        raise _Taken   # rolls back what this call left before
                self._notify(cur, REQUEST, run_id)
        except _Taken:
            return False
        return True

    def save_graph(self, description: Mapping[str, JSONValue]) -> None:
        version = description["version"]
        with self._lock:
            try:
                with self._db.transaction(False) as cur:
                    cur.execute(self._sql("SELECT 1 FROM graphs WHERE version = ?"), [version])
                    if cur.fetchone() is None:
                        graphs = self._stmts["graphs"]
                        cur.execute(graphs.insert, graphs.row({"version": version, "name": description["name"],
                                                               "description": dict(description)}))
                    elif description.get("ref"):
                        cur.execute(self._describe, [self._dumps(dict(description)), version])
            except self._integrity_errors:
                pass  # another process saved this version first


#: each status's plain string (a status read back from the database is one already)
_PLAIN: dict[str, str] = {**{s: s.value for s in NodeStatus}, **{s.value: s.value for s in NodeStatus}}


def _run_state(run: Run) -> dict[str, Any]:
    """The ``_RUN_STATE`` columns of this run's row, in that order."""
    return {"status": run.status.value, "error": dict(run.error) if run.error else None,
            "usage": dict(run.usage), "limits": dict(run.limits), "head_seq": run.head_seq, "event_seq": run.event_seq,
            "fence": run.fence, "lease_owner": run.lease_owner, "lease_expires_at": run.lease_expires_at,
            "updated_at": run.updated_at}


def _stale(batch: Batch) -> LeaseLost:
    return LeaseLost(f"run {batch.run_id}: another process took it over (fence {batch.fence} is stale)")


def _integrity_errors(engine: Engine) -> tuple[type[BaseException], ...]:
    """The driver's own IntegrityError (the write path bypasses SQLAlchemy's wrapping)."""
    module = engine.dialect.dbapi
    found = getattr(module, "IntegrityError", None)
    return (IntegrityError, found) if isinstance(found, type) else (IntegrityError,)


class _Taken(Exception):
    """A question ``send_answers`` was given was answered, or had an answer left, first."""
