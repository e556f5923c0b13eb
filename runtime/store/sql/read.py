"""The read side of SqlStore: SQLAlchemy Core queries that turn rows into records.

Callers only ever see the records of ``runtime.core.records``. Checkpoint rows
hold node states as deltas (see ``Writer.checkpoint_row``); the reads here
rebuild the full statuses from the last full row at or before a checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from sqlalchemy import Engine, Select, func, select
from sqlalchemy.engine import Connection

from ...core.errors import NotFound
from ...core.jsonvalues import JSON
from ...core.layers import StatusLayers
from ...core.records import (
    Checkpoint,
    CheckpointSummary,
    CompensationAsk,
    EffectStatus,
    Interrupt,
    InterruptKind,
    InterruptStatus,
    JournalEntry,
    NodeAttempt,
    PendingWrite,
    Run,
    RunKind,
    SentAnswer,
    TraceEvent,
    WriteKind,
    event_type,
)
from ...core.states import NodeStatus, RunStatus
from ..base import MAX_SEQ
from .connection import read_again
from .schema import ASKS, ATTEMPTS, CHECKPOINTS, EFFECTS, EVENTS, GRAPHS, INTERRUPTS, RUNS, WRITES


#: node names in one ``IN (...)`` (SQLite allows 32766 parameters a statement, older builds 999)
_NAMES_PER_QUERY = 500


def _bound(seq: int) -> int:
    """``seq`` as a bound of a seq column: stored seqs run from 0 to ``MAX_SEQ``, so one
    clamped to -1..MAX_SEQ selects the same rows, and the database never sees a value its
    column cannot hold (a driver error on PostgreSQL)."""
    return max(-1, min(seq, MAX_SEQ))


class RunKeys(dict[str, int]):
    """run id -> runs.pk for the ``limit`` runs met most recently: a long-lived process
    meets ever more runs, and a key not kept here is one query away."""

    def __init__(self, limit: int = 100_000):
        super().__init__()
        self.limit = limit

    def __setitem__(self, run_id: str, pk: int) -> None:
        super().__setitem__(run_id, pk)
        if len(self) > self.limit:
            try:
                del self[next(iter(self))]   # the oldest
            except (RuntimeError, KeyError, StopIteration):
                pass   # another thread changed it meanwhile: trimmed on the next insert


class Reader:
    """Every query of the store; each opens its own pooled connection, and runs once more
    on a new one if that connection is lost meanwhile (``read_again``)."""

    def __init__(self, engine: Engine, pks: dict[str, int], text: Callable[[str], str] | None = None):
        self.engine = engine
        #: undoes what the writer did to free-text values this database cannot hold (``nul``)
        self.text = text or _same
        mark = "?" if engine.dialect.paramstyle == "qmark" else "%s"
        self._cancel_sql = f"SELECT cancel_reason FROM runs WHERE id = {mark}"
        # ids in code point order, as SQLite and MemoryStore sort them, whatever the database's collation
        by_id = INTERRUPTS.c.id
        self._interrupt_order = (INTERRUPTS.c.created_at,
                                 by_id if engine.dialect.name == "sqlite" else by_id.collate("C"))
        #: run id -> runs.pk; shared with the writer, which fills it as it creates runs
        self.pks = pks

    def pk(self, conn: Connection, run_id: str) -> int:
        """The run's integer key, or ``NotFound``."""
        pk = self.pks.get(run_id)
        if pk is None:
            pk = conn.execute(select(RUNS.c.pk).where(RUNS.c.id == run_id)).scalar()
            if pk is None:
                raise NotFound(f"no run with id {run_id!r}")
            self.pks[run_id] = pk
        return pk

    @read_again
    def graph_description(self, version: str) -> Mapping[str, JSON] | None:
        with self.engine.connect() as conn:
            return conn.execute(select(GRAPHS.c.description).where(GRAPHS.c.version == version)).scalar()

    def cancel_request(self, run_id: str) -> str | None:
        # asked by every running run at heartbeat pace: a plain statement on a pooled driver
        # connection (a fifth of the cost of going through SQLAlchemy's); any failure is asked
        # again the way every read is, which replaces a lost connection
        try:
            conn = self.engine.raw_connection()
            try:
                cur = conn.cursor()
                cur.execute(self._cancel_sql, (run_id,))
                row = cur.fetchone()
                cur.close()
            finally:
                conn.close()
        except Exception:
            return self._cancel_request(run_id)
        return None if row is None or row[0] is None else self.text(row[0])

    @read_again
    def _cancel_request(self, run_id: str) -> str | None:
        with self.engine.connect() as conn:
            reason = conn.exec_driver_sql(self._cancel_sql, (run_id,)).scalar()
        return None if reason is None else self.text(reason)

    @read_again
    def compensation_asks(self, run_id: str | None = None, limit: int = 100) -> list[CompensationAsk]:
        query = (select(RUNS.c.id, ASKS.c.retry_in_doubt, ASKS.c.asked_at).join(RUNS, RUNS.c.pk == ASKS.c.run_pk)
                 .order_by(ASKS.c.asked_at, ASKS.c.run_pk).limit(limit))
        if run_id is not None:
            query = query.where(RUNS.c.id == run_id)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [CompensationAsk(r.id, bool(r.retry_in_doubt), r.asked_at) for r in rows]

    @read_again
    def sent_answers(self, run_id: str) -> dict[str, SentAnswer]:
        with self.engine.connect() as conn:
            pk = self.pk(conn, run_id)
            rows = conn.execute(select(INTERRUPTS.c.id, INTERRUPTS.c.sent).where(
                INTERRUPTS.c.run_pk == pk, INTERRUPTS.c.status == InterruptStatus.PENDING.value,
                INTERRUPTS.c.sent.is_not(None))).all()
        return {r.id: SentAnswer(r.id, r.sent.get("answer"), r.sent.get("by"), r.sent.get("at", 0.0))
                for r in rows}

    # ------------------------------------------------------------------ runs

    @read_again
    def get_run(self, run_id: str) -> Run:
        with self.engine.connect() as conn:
            row = conn.execute(select(RUNS).where(RUNS.c.id == run_id)).first()
        if row is None:
            raise NotFound(f"no run with id {run_id!r}")
        return run_record(row)

    @read_again
    def list_runs(self, status: RunStatus | None = None, thread_id: str | None = None,
                  limit: int = 100, *, graph_name: str | None = None, kind: RunKind | None = None,
                  search: str | None = None, offset: int = 0, oldest_first: bool = False,
                  lease_expired_by: float | None = None) -> list[Run]:
        stmt = select(RUNS).order_by(RUNS.c.pk if oldest_first else RUNS.c.pk.desc()).limit(limit).offset(offset)
        if status is not None:
            stmt = stmt.where(RUNS.c.status == status.value)
        if thread_id is not None:
            stmt = stmt.where(RUNS.c.thread_id == thread_id)
        if graph_name is not None:
            stmt = stmt.where(RUNS.c.graph_name == graph_name)
        if kind is not None:
            stmt = stmt.where(RUNS.c.kind == kind.value)
        if lease_expired_by is not None:
            stmt = stmt.where(RUNS.c.lease_expires_at.is_(None) | (RUNS.c.lease_expires_at <= lease_expired_by))
        if search and self.engine.dialect.name == "sqlite":
            # SQLite's LIKE ignores case: as every store does, an id or a thread id holding the text as given
            stmt = stmt.where((func.instr(RUNS.c.id, search) > 0) | (func.instr(RUNS.c.thread_id, search) > 0))
        elif search:   # an id or a thread id, or part of one: escaped, so % and _ match themselves
            pattern = "%" + search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            stmt = stmt.where(RUNS.c.id.like(pattern, escape="\\") | RUNS.c.thread_id.like(pattern, escape="\\"))
        with self.engine.connect() as conn:
            return [run_record(r) for r in conn.execute(stmt)]

    @read_again
    def child_runs(self, run_id: str) -> list[Run]:
        with self.engine.connect() as conn:
            return [run_record(r) for r in conn.execute(select(RUNS).where(RUNS.c.parent_run_id == run_id)
                                                        .order_by(RUNS.c.pk))]

    # ------------------------------------------------------------------ checkpoints

    @read_again
    def checkpoints(self, run_id: str, first_seq: int = 0, limit: int | None = None) -> list[Checkpoint]:
        c = CHECKPOINTS.c
        with self.engine.connect() as conn:
            pk = self.pk(conn, run_id)
            stmt = select(CHECKPOINTS).where(c.run_pk == pk, c.seq > _bound(first_seq - 1)).order_by(c.seq)
            rows = conn.execute(stmt if limit is None else stmt.limit(limit)).all()
            # a page that starts later starts from the statuses before it (None: the run's first)
            before = self._node_states(conn, pk, rows[0].seq - 1) if rows and rows[0].seq > 0 else None
        out: list[Checkpoint] = []
        states: Mapping[str, NodeStatus] | None = None if before is None else _statuses(before)
        size = len(states or ())
        for row in rows:
            top = _statuses(row.states)
            changed = None if states is None else tuple(n for n, st in top.items() if states.get(n) != st)
            # over the statuses before (``StatusLayers``): a map's many checkpoints cost what
            # changed in them, not their number times the instances
            states, size = (top, len(top)) if row.full or states is None else StatusLayers.read(states, top, size)
            out.append(_checkpoint(run_id, row, states, changed))
        return out

    @read_again
    def checkpoint_summaries(self, run_id: str, first_seq: int, last_seq: int) -> list[CheckpointSummary]:
        c = CHECKPOINTS.c
        with self.engine.connect() as conn:
            pk = self.pk(conn, run_id)
            rows = conn.execute(select(c.id, c.seq, c.nodes, c.source, c.created_at, c.event_seq)
                                .where(c.run_pk == pk, c.seq > _bound(first_seq - 1), c.seq <= _bound(last_seq))
                                .order_by(c.seq)).all()
        return [CheckpointSummary(r.id, run_id, r.seq, tuple(r.nodes or ()), r.source, r.created_at, r.event_seq)
                for r in rows]

    @read_again
    def get_checkpoint(self, checkpoint_id: str) -> Checkpoint:
        with self.engine.connect() as conn:
            row = conn.execute(select(CHECKPOINTS).where(CHECKPOINTS.c.id == checkpoint_id)).first()
            if row is None:
                raise NotFound(f"no checkpoint with id {checkpoint_id!r}")
            run_id = conn.execute(select(RUNS.c.id).where(RUNS.c.pk == row.run_pk)).scalar_one()
            states = self._node_states(conn, row.run_pk, row.seq) or {}
        return checkpoint_record(run_id, row, states)

    @read_again
    def find_checkpoint(self, run_id: str, at_or_before: int | None = None, *,
                        with_snapshot: bool = False) -> Checkpoint | None:
        with self.engine.connect() as conn:
            pk = self.pk(conn, run_id)
            stmt = select(CHECKPOINTS).where(CHECKPOINTS.c.run_pk == pk).order_by(CHECKPOINTS.c.seq.desc()).limit(1)
            if at_or_before is not None:
                stmt = stmt.where(CHECKPOINTS.c.seq <= _bound(at_or_before))
            if with_snapshot:
                stmt = stmt.where(CHECKPOINTS.c.snapshot.is_not(None))
            row = conn.execute(stmt).first()
            if row is None:
                return None
            states = self._node_states(conn, pk, row.seq) or {}
        return checkpoint_record(run_id, row, states)

    @read_again
    def node_states(self, pk: int, seq: int) -> dict[str, str] | None:
        """Full node states at checkpoint ``seq`` of run ``pk``; None if it has none stored."""
        with self.engine.connect() as conn:
            return self._node_states(conn, pk, seq)

    def _node_states(self, conn: Connection, pk: int, seq: int) -> dict[str, str] | None:
        c = CHECKPOINTS.c
        # the last full row at or before seq, plus the deltas after it
        base = conn.execute(select(c.seq).where(c.run_pk == pk, c.seq <= seq, c.full.is_(True))
                            .order_by(c.seq.desc()).limit(1)).scalar()
        if base is None:
            return None
        states: dict[str, str] = {}
        for row in conn.execute(select(c.states).where(c.run_pk == pk, c.seq >= base, c.seq <= seq)
                                .order_by(c.seq)):
            states.update(row.states)
        return states

    # ------------------------------------------------------------------ outcomes and trace

    @read_again
    def pending_writes(self, run_id: str, checkpoint_seq: int | None = None, *,
                       nodes: Collection[str] | None = None) -> list[PendingWrite]:
        with self.engine.connect() as conn:
            pk = self.pk(conn, run_id)
            stmt = select(WRITES).where(WRITES.c.run_pk == pk).order_by(WRITES.c.pk)
            if checkpoint_seq is not None:
                if _bound(checkpoint_seq) != checkpoint_seq:
                    return []   # no checkpoint has that seq
                stmt = stmt.where(WRITES.c.checkpoint_seq == checkpoint_seq)
            if nodes is None:
                rows = conn.execute(stmt).all()
            else:
                # through the (run_pk, node) index: what the given nodes recorded, however long
                # the run; a slice of names per statement keeps it within the parameter limits
                names = sorted(set(nodes))
                rows = []
                for i in range(0, len(names), _NAMES_PER_QUERY):
                    rows += conn.execute(stmt.where(WRITES.c.node.in_(names[i:i + _NAMES_PER_QUERY]))).all()
                if len(names) > _NAMES_PER_QUERY:
                    rows.sort(key=lambda r: r.pk)   # the slices' rows in the order recorded
        return [PendingWrite(run_id, r.checkpoint_seq, r.node, r.attempt, WriteKind(r.kind), r.value, r.created_at)
                for r in rows]

    @read_again
    def node_writes(self, run_ids: Sequence[str]) -> dict[str, JSON]:
        out: dict[str, JSON] = {}
        with self.engine.connect() as conn:
            for rid in run_ids:
                pk = self.pk(conn, rid)
                for r in conn.execute(select(WRITES.c.node, WRITES.c.value).where(
                        WRITES.c.run_pk == pk, WRITES.c.kind == WriteKind.WRITES.value).order_by(WRITES.c.pk)):
                    out.setdefault(r.node, r.value)
        return out

    @read_again
    def node_attempts(self, run_id: str) -> list[NodeAttempt]:
        with self.engine.connect() as conn:
            pk = self.pk(conn, run_id)
            rows = conn.execute(select(ATTEMPTS).where(ATTEMPTS.c.run_pk == pk).order_by(ATTEMPTS.c.pk)).all()
        text = self.text
        return [NodeAttempt(run_id, r.node, r.attempt, NodeStatus(r.status), r.started_at, r.ended_at,
                            r.error_class, None if r.error is None else text(r.error), r.decision) for r in rows]

    @read_again
    def journal(self, run_ids: Sequence[str]) -> list[JournalEntry]:
        out: list[JournalEntry] = []
        text = self.text
        with self.engine.connect() as conn:
            for rid in run_ids:
                pk = self.pk(conn, rid)
                for r in conn.execute(select(EFFECTS).where(EFFECTS.c.run_pk == pk).order_by(EFFECTS.c.pk)):
                    out.append(JournalEntry(rid, r.node, r.name, r.occurrence, r.attempt, r.key,
                                            EffectStatus(r.status), r.request, r.result,
                                            None if r.error is None else text(r.error), r.at, r.source,
                                            r.compensate))
        return out

    @read_again
    def interrupts(self, run_id: str | None = None,
                   status: InterruptStatus | None = None) -> list[Interrupt]:
        stmt = self._interrupt_rows().order_by(*self._interrupt_order)
        if run_id is not None:
            stmt = stmt.where(RUNS.c.id == run_id)
        if status is not None:
            stmt = stmt.where(INTERRUPTS.c.status == status.value)
        with self.engine.connect() as conn:
            rows = conn.execute(stmt).all()
        return [_interrupt(r) for r in rows]

    @read_again
    def interrupt(self, interrupt_id: str) -> Interrupt:
        with self.engine.connect() as conn:   # by primary key: one row read, however many there are
            row = conn.execute(self._interrupt_rows().where(INTERRUPTS.c.id == interrupt_id)).first()
        if row is None:
            raise NotFound(f"no interrupt {interrupt_id!r}")
        return _interrupt(row)

    @staticmethod
    def _interrupt_rows() -> Select[Any]:
        return select(INTERRUPTS, RUNS.c.id.label("run_id")).join(RUNS, RUNS.c.pk == INTERRUPTS.c.run_pk)

    @read_again
    def events(self, run_id: str, after_seq: int = 0, limit: int | None = None) -> list[TraceEvent]:
        with self.engine.connect() as conn:
            pk = self.pk(conn, run_id)
            stmt = select(EVENTS).where(EVENTS.c.run_pk == pk, EVENTS.c.seq > _bound(after_seq)).order_by(EVENTS.c.seq)
            rows = conn.execute(stmt if limit is None else stmt.limit(limit)).all()
        # the type as the kernel recorded it (an EventType, as MemoryStore gives it back)
        return [TraceEvent(run_id, r.seq, r.at, event_type(r.type), r.node, r.attempt, r.data or {}) for r in rows]


def _same(text: str) -> str:
    return text


def run_record(r: Any) -> Run:
    """A ``runs`` row (anything with its columns as attributes, JSON decoded) as a ``Run``."""
    return Run(id=r.id, thread_id=r.thread_id, graph_name=r.graph_name, graph_version=r.graph_version,
               status=RunStatus(r.status), kind=RunKind(r.kind), input=r.input, created_at=r.created_at,
               updated_at=r.updated_at, parent_run_id=r.parent_run_id, base_checkpoint_id=r.base_checkpoint_id,
               error=r.error, limits=r.limits or {}, usage=r.usage or {}, max_concurrency=r.max_concurrency,
               head_seq=r.head_seq, event_seq=r.event_seq, fence=r.fence, lease_owner=r.lease_owner,
               lease_expires_at=r.lease_expires_at, options=r.options or {})


_STATUS = {s.value: s for s in NodeStatus}


def _interrupt(r: Any) -> Interrupt:
    """An ``interrupts`` row joined with its run's id, as an ``Interrupt``."""
    return Interrupt(r.id, r.run_id, r.node, r.slot, InterruptKind(r.kind), r.payload, InterruptStatus(r.status),
                     r.created_at, r.response_schema, r.answer, r.answered_at)


def checkpoint_record(run_id: str, r: Any, states: Mapping[str, str],
                      changed: tuple[str, ...] | None = None) -> Checkpoint:
    """A ``checkpoints`` row with its node states rebuilt in full, as a ``Checkpoint``."""
    return _checkpoint(run_id, r, _statuses(states), changed)


def _statuses(states: Mapping[str, str]) -> dict[str, NodeStatus]:
    return {n: _STATUS[s] for n, s in states.items()}


def _checkpoint(run_id: str, r: Any, node_states: Mapping[str, NodeStatus],
                changed: tuple[str, ...] | None) -> Checkpoint:
    return Checkpoint(id=r.id, run_id=run_id, seq=r.seq, parent_id=r.parent_id, nodes=tuple(r.nodes or ()),
                      node_states=node_states, event_seq=r.event_seq, created_at=r.created_at, source=r.source,
                      snapshot=r.snapshot, changed=changed)
