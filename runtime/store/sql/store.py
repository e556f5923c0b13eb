"""SqlStore: SQLite (WAL, the embedded default) or PostgreSQL through SQLAlchemy.

It composes the parts of the SQL store: ``migrations`` brings the database to the
current schema when the store opens, ``write.Writer`` commits batches on one
connection under the fencing token, ``read.Reader`` turns rows back into records.

Durability follows the output-commit rule: ordinary batches commit without
waiting for the disk (SQLite ``synchronous=NORMAL``, PostgreSQL
``synchronous_commit=off``: they survive a process crash; a power cut may lose the
last few, which is safe because nothing outside saw them), and batches marked
``durable`` — before an effect, when a run pauses or ends — are forced to disk.

JSON columns keep a value's text on every database (PostgreSQL's are ``JSON``, not
``JSONB``, since schema 4): a value reads back as it was recorded, object keys in their
order, so a replay or a resume served from the store sees what the run saw. U+0000, which
PostgreSQL's text cannot hold, is stored escaped (``nul``).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from pydantic_core import from_json
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import ArgumentError

from ...core.errors import InvalidRequest
from ...core.jsonvalues import JSON
from ...core.records import (
    Batch,
    Checkpoint,
    CheckpointSummary,
    CompensationAsk,
    Interrupt,
    InterruptStatus,
    JournalEntry,
    NodeAttempt,
    PendingWrite,
    Run,
    RunKind,
    SentAnswer,
    TraceEvent,
)
from ...core.states import RunStatus
from . import nul
from ..base import connection_lost
from .availability import unavailable
from .migrations import setup
from .notify import Heard, Listener
from .read import Reader, RunKeys
from .statements import dumps, pg_dumps
from .urls import masked, normalized, without_passwords
from .write import Writer


class SqlStore:
    """The ``CheckpointStore`` on a SQL database, given by its SQLAlchemy URL."""

    durable = True

    def __init__(self, url: str = "sqlite:///harness.db", *, echo: bool = False):
        url = normalized(url)
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        self.engine: Engine = _create_engine(url, echo, self.is_sqlite)
        try:
            setup(self.engine)
        except BaseException:
            self.engine.dispose()  # a store that did not open keeps no connection open
            raise
        self._reader = Reader(self.engine, pks=RunKeys(), text=None if self.is_sqlite else nul.unescape)
        self._writer = Writer(self.engine, self._reader)
        self._listener = None if self.is_sqlite else Listener(self.engine)
        if self._listener is not None:
            # a store dropped without close must not keep its listening connection and thread
            weakref.finalize(self, self._listener.close)

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
        self._writer.close()
        self.engine.dispose()

    def subscribe(self, callback: Heard) -> Callable[[], None]:
        """Be told, from another thread, as another process leaves a message for a run or
        the workers: ``callback(kind, run_id)`` (``notify.REQUEST``, ``notify.QUEUED``; both
        ``notify.ANY`` when some may have been missed). PostgreSQL only (SQLite has no such
        channel: nothing is ever called). Returns the call that unsubscribes."""
        if self._listener is None:
            return lambda: None
        return self._listener.subscribe(callback)

    @staticmethod
    def unreachable(error: BaseException) -> bool:
        return unavailable(error) or connection_lost(error)

    # ------------------------------------------------------------------ writes

    def save_graph(self, description: Mapping[str, JSON]) -> None:
        self._writer.save_graph(description)

    def create_run(self, batch: Batch) -> None:
        self._writer.create_runs([batch])

    def create_runs(self, batches: Sequence[Batch]) -> None:
        self._writer.create_runs(batches)

    def commit(self, batch: Batch) -> None:
        self._writer.commit(batch)

    def acquire_lease(self, run_id: str, owner: str, expires_at: float, expected_fence: int) -> Run:
        return self._writer.acquire_lease(run_id, owner, expires_at, expected_fence)

    def request_cancel(self, run_id: str, reason: str) -> None:
        self._writer.request_cancel(run_id, reason)

    # ------------------------------------------------------------------ reads

    def graph_description(self, version: str) -> Mapping[str, JSON] | None:
        return self._reader.graph_description(version)

    def cancel_request(self, run_id: str) -> str | None:
        return self._reader.cancel_request(run_id)

    def ask_compensation(self, run_id: str, retry_in_doubt: bool, at: float) -> None:
        self._writer.ask_compensation(run_id, retry_in_doubt, at)

    def compensation_asks(self, run_id: str | None = None, limit: int = 100) -> list[CompensationAsk]:
        return self._reader.compensation_asks(run_id, limit)

    def drop_compensation_ask(self, run_id: str, at: float) -> None:
        self._writer.drop_compensation_ask(run_id, at)

    def send_answers(self, run_id: str, answers: Mapping[str, JSON], by: str | None, at: float) -> bool:
        return self._writer.send_answers(run_id, answers, by, at)

    def sent_answers(self, run_id: str) -> dict[str, SentAnswer]:
        return self._reader.sent_answers(run_id)

    def get_run(self, run_id: str) -> Run:
        return self._reader.get_run(run_id)

    def list_runs(self, status: RunStatus | None = None, thread_id: str | None = None,
                  limit: int = 100, *, graph_name: str | None = None, kind: RunKind | None = None,
                  search: str | None = None, offset: int = 0, oldest_first: bool = False,
                  lease_expired_by: float | None = None) -> list[Run]:
        return self._reader.list_runs(status, thread_id, limit, graph_name=graph_name, kind=kind,
                                      search=search, offset=offset, oldest_first=oldest_first,
                                      lease_expired_by=lease_expired_by)

    def child_runs(self, run_id: str) -> list[Run]:
        return self._reader.child_runs(run_id)

    def checkpoints(self, run_id: str, first_seq: int = 0, limit: int | None = None) -> list[Checkpoint]:
        return self._reader.checkpoints(run_id, first_seq, limit)

    def get_checkpoint(self, checkpoint_id: str) -> Checkpoint:
        return self._reader.get_checkpoint(checkpoint_id)

    def find_checkpoint(self, run_id: str, at_or_before: int | None = None, *,
                        with_snapshot: bool = False) -> Checkpoint | None:
        return self._reader.find_checkpoint(run_id, at_or_before, with_snapshot=with_snapshot)

    def pending_writes(self, run_id: str, checkpoint_seq: int | None = None, *,
                       nodes: Collection[str] | None = None) -> list[PendingWrite]:
        return self._reader.pending_writes(run_id, checkpoint_seq, nodes=nodes)

    def node_writes(self, run_ids: Sequence[str]) -> dict[str, JSON]:
        return self._reader.node_writes(run_ids)

    def node_attempts(self, run_id: str) -> list[NodeAttempt]:
        return self._reader.node_attempts(run_id)

    def journal(self, run_ids: Sequence[str]) -> list[JournalEntry]:
        return self._reader.journal(run_ids)

    def interrupts(self, run_id: str | None = None,
                   status: InterruptStatus | None = None) -> list[Interrupt]:
        return self._reader.interrupts(run_id, status)

    def interrupt(self, interrupt_id: str) -> Interrupt:
        return self._reader.interrupt(interrupt_id)

    def events(self, run_id: str, after_seq: int = 0, limit: int | None = None) -> list[TraceEvent]:
        return self._reader.events(run_id, after_seq, limit)

    def checkpoint_summaries(self, run_id: str, first_seq: int, last_seq: int) -> list[CheckpointSummary]:
        return self._reader.checkpoint_summaries(run_id, first_seq, last_seq)


def _create_engine(url: str, echo: bool, sqlite: bool) -> Engine:
    """The engine for ``url``; ``InvalidRequest`` naming the URL (its password masked) if it
    cannot be made."""
    kwargs: dict[str, Any] = {"echo": echo, "json_serializer": dumps if sqlite else pg_dumps,
                              "json_deserializer": from_json if sqlite else nul.loads}
    if sqlite:
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
    else:
        kwargs["pool_pre_ping"] = True
        kwargs["connect_args"] = pg_connect_args(url)
    if not sqlite and url.partition("://")[2].split("/", 1)[0].count("@") > 1:
        # read as a host, the password's tail would show in the driver's error
        raise InvalidRequest(f"not a database URL: {masked(url)!r} (an '@' in its user or password "
                             f"must be written %40)")
    try:
        engine = create_engine(url, **kwargs)
    except ModuleNotFoundError as e:
        raise InvalidRequest(f"the database driver for {url.split(':', 1)[0]} is not installed "
                             f"(missing module {e.name!r})") from None
    except ArgumentError as e:
        raise InvalidRequest(f"not a database URL: {masked(url)!r} ({without_passwords(str(e), url)})") from None
    except ValueError:   # SQLAlchemy's int() of the port, which its error does not name
        raise InvalidRequest(f"not a database URL: {masked(url)!r} (its port must be a number, as in "
                             f"host:5432)") from None
    event.listen(engine, "connect", _sqlite_pragmas if sqlite else _pg_session)
    return engine


#: PostgreSQL connection settings a URL does not give: how long to wait for a server that
#: does not answer (a host that drops packets, a half-open network) before saying it cannot
#: be reached, instead of the minutes the operating system waits. ``connect_timeout`` bounds
#: a new connection (seconds), ``tcp_user_timeout`` a request the server never acknowledged
#: (ms), and keepalives a connection idle while the server is gone.
PG_CONNECT_DEFAULTS: dict[str, int] = {
    "connect_timeout": 10, "tcp_user_timeout": 30_000,
    "keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3,
}


def pg_connect_args(url: str) -> dict[str, int]:
    """``PG_CONNECT_DEFAULTS`` but those the URL's query gives (``?connect_timeout=3``)."""
    query = url.partition("?")[2]
    given = {part.partition("=")[0].strip().lower() for part in query.split("&") if part}
    return {k: v for k, v in PG_CONNECT_DEFAULTS.items() if k not in given}


#: how long (ms) a PostgreSQL session of the store may sit in a transaction between two
#: statements before the server ends it. The store's transactions never wait on anything
#: but the database, so only a frozen process (SIGSTOP, a paused VM) gets there; unbounded,
#: the run rows it locked stay locked, and a worker taking over its expired lease waits
#: for it for ever. A bound the server, database or role sets is kept.
IDLE_IN_TRANSACTION_MS = 5000


def _pg_session(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("SELECT set_config('idle_in_transaction_session_timeout', %s, false) "
                "WHERE current_setting('idle_in_transaction_session_timeout') = '0'",
                [str(IDLE_IN_TRANSACTION_MS)])
    cur.close()
    dbapi_conn.commit()   # a setting made in a transaction rolled back would be undone


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()
