"""Telling other processes at once, on PostgreSQL, what they would otherwise find at their
next poll: a cancel or answers left for the process driving a run (it looks at its
heartbeat), a run queued or a compensation asked for the workers (they look every
``--poll``).

A write that leaves such a message also sends ``NOTIFY`` in its transaction, so it is heard
once committed, never before. Each store that is listened to keeps one connection of its
own, outside its pool, in a thread that hands what it hears to the listeners. A
notification is a hint, never the message: the listener reads the store as it would at its
poll, and goes on polling as before, so one missed (the listening connection lost, then
opened again) costs the old delay and nothing else; after a reconnect every listener is
told to look (``ANY``). SQLite has no such channel: there, processes poll.
"""

from __future__ import annotations

import logging
import select
import socket
import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine

from ...core.left import ANY

log = logging.getLogger(__name__)

#: the channel every store of a database sends on
CHANNEL = "harness"
#: a notification says ``<kind>:<run id>``, its kind one of ``core.left``'s

Heard = Callable[[str, str], None]


def notify_sql(kind: str) -> str:
    """The statement a writer runs in its transaction (the run id as its one parameter)."""
    return f"SELECT pg_notify('{CHANNEL}', '{kind}:' || %s)"


class Listener:
    """One LISTEN connection for a store; ``subscribe`` a callback, called from its thread
    with (kind, run id) — or (``ANY``, ``ANY``) after a reconnect. Started by the first
    subscription, stopped by ``close``."""

    #: the first wait after a lost connection, doubled up to BACKOFF; ``close`` wakes the
    #: thread at once (a byte on a socket pair it also waits on), so neither bounds a close
    TICK = 0.25
    BACKOFF = 5.0

    def __init__(self, engine: Engine):
        self._engine = engine
        self._lock = threading.Lock()
        self._callbacks: list[Heard] = []
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.connected = threading.Event()   # listening now (tests wait for it)
        # socket objects, not raw descriptors: one written after it was closed raises, where a
        # descriptor's number could meanwhile belong to another file
        self._wake, self._woken = socket.socketpair()

    def subscribe(self, callback: Heard) -> Callable[[], None]:
        with self._lock:
            self._callbacks.append(callback)
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name="harness-listen", daemon=True)
                self._thread.start()

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._callbacks:
                    self._callbacks.remove(callback)
        return unsubscribe

    def close(self) -> None:
        """Stop listening, once the thread has closed its connection (woken at once):
        nothing of it outlives the store's ``close``."""
        self._stop.set()
        try:
            self._wake.send(b"\0")
        except OSError:
            pass   # closed already
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self.BACKOFF)
        if thread is None or not thread.is_alive():
            self._wake.close()
            self._woken.close()

    def _tell(self, kind: str, run_id: str) -> None:
        with self._lock:
            callbacks = list(self._callbacks)
        for callback in callbacks:
            try:
                callback(kind, run_id)
            except Exception:   # one listener's failure is not another's
                log.exception("a listener of %s notifications failed", CHANNEL)

    def _run(self) -> None:
        wait = self.TICK
        first = True
        while not self._stop.is_set():
            try:
                raw = self._engine.raw_connection()
                conn: Any = raw.driver_connection
                raw.detach()   # its own, for as long as it listens: never back to the pool
            except Exception:
                self._stop.wait(wait)
                wait = min(wait * 2, self.BACKOFF)
                continue
            try:
                conn.autocommit = True
                conn.execute(f"LISTEN {CHANNEL}")
                self.connected.set()
                if not first:
                    self._tell(ANY, ANY)   # what was sent while it was away was missed
                first, wait = False, self.TICK
                while not self._stop.is_set():
                    for note in conn.notifies(timeout=0):   # what has arrived, without waiting
                        kind, _, run_id = note.payload.partition(":")
                        self._tell(kind, run_id)
                    select.select([conn.fileno(), self._woken], [], [], self.BACKOFF)
            except Exception:
                self.connected.clear()
                self._stop.wait(wait)
                wait = min(wait * 2, self.BACKOFF)
            finally:
                try:
                    conn.close()
                except Exception:
                    pass
        self.connected.clear()
