"""A ``harness worker`` process outlives an outage of its database: PostgreSQL behind a
TCP proxy that is stopped (every connection cut, new ones refused) and started again.
It says once that the database is unreachable and once that it is back, drives a run
queued during the outage, and recovers the run it was driving when the database went
away (once that run's lease expires), with no traceback."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import make_url

from runtime import Runtime, RunStatus, SqlStore, resolve_ref

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

GRAPHS = textwrap.dedent('''
    import asyncio
    from pydantic import BaseModel
    from runtime import Graph

    class S(BaseModel):
        secs: float = 0.0
        done: bool = False

    graph = Graph("outage_work", state=S)

    @graph.node()
    async def work(state):
        await asyncio.sleep(state.secs)
        return {"done": True}
''')


class Proxy:
    """A TCP proxy to the PostgreSQL server on a port of its own; ``stop`` cuts every
    connection through it and refuses new ones, as a database that went away does."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.port = 0
        self._links: list[socket.socket] = []
        self._lock = threading.Lock()
        self.start()

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen()
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        if self._listener.fileno() == -1:
            return   # stopped already
        # shut down first: a close alone leaves the thread blocked in accept() listening
        self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            links, self._links = self._links, []
        for s in links:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass   # its other end closed it already
            s.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return   # stopped
            server = socket.create_connection(self.target)
            with self._lock:
                self._links += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass   # cut by stop(), or by the other side
        finally:
            try:
                sink.shutdown(socket.SHUT_WR)
            except OSError:
                pass


@pytest.fixture
def proxy(pg_url: str) -> Iterator[Proxy]:
    url = make_url(pg_url)
    p = Proxy((url.host or "127.0.0.1", url.port or 5432))
    yield p
    p.stop()


def submit(url: str, secs: float) -> str:
    async def go() -> str:
        rt = Runtime(store=SqlStore(url))
        try:
            return (await rt.submit(resolve_ref("outage_graphs:graph"), {"secs": secs})).id
        finally:
            rt.close()
    return asyncio.run(go())


def wait_for(what: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_worker_waits_out_a_database_outage_and_goes_on(pg_url: str, proxy: Proxy, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "outage_graphs.py").write_text(GRAPHS)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    monkeypatch.delitem(sys.modules, "outage_graphs", raising=False)
    through_proxy = make_url(pg_url).set(port=proxy.port).render_as_string(hide_password=False)
    store = SqlStore(pg_url)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    worker = subprocess.Popen([sys.executable, "-m", "server.cli", "--db", through_proxy, "worker", "--poll", "0.1",
                               "--lease-ttl", "2"], cwd=tmp_path, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        cut = submit(pg_url, 3.0)   # in flight when the database goes away
        wait_for("the first run to start", lambda: store.get_run(cut).status == RunStatus.RUNNING, 15)
        proxy.stop()
        queued = submit(pg_url, 0.0)   # queued while the worker cannot see the database
        time.sleep(4)   # past the first run's end, which cannot be recorded
        assert worker.poll() is None, worker.communicate()
        assert store.get_run(queued).status == RunStatus.QUEUED
        proxy.start()
        for run_id in (queued, cut):
            wait_for(f"run {run_id} to end", lambda: store.get_run(run_id).status == RunStatus.SUCCEEDED, 30)
        assert worker.poll() is None
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
        store.close()
    assert worker.returncode == 0, err
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len([line for line in lines if "the database is unreachable" in line]) == 1, err
    assert len([line for line in lines if "the database is reachable again" in line]) == 1, err
    assert queued in out and cut in out


def test_a_worker_started_while_its_database_is_away_waits_for_it(pg_url: str, proxy: Proxy, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch):
    """First a host that takes connections and never answers (bounded by the URL's
    ``connect_timeout``), then none listening at all: the worker says once that it cannot
    reach the database, and drives the run queued meanwhile once it can."""
    (tmp_path / "outage_graphs.py").write_text(GRAPHS)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    monkeypatch.delitem(sys.modules, "outage_graphs", raising=False)
    proxy.stop()
    silent = socket.socket()
    silent.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    silent.bind(("127.0.0.1", proxy.port))
    silent.listen(16)
    url = make_url(pg_url).set(port=proxy.port).update_query_dict({"connect_timeout": "2"})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    worker = subprocess.Popen([sys.executable, "-m", "server.cli", "--db", url.render_as_string(hide_password=False),
                               "worker", "--poll", "0.1", "--once"], cwd=tmp_path, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    store = SqlStore(pg_url)
    try:
        queued = submit(pg_url, 0.0)
        time.sleep(5)   # two connect timeouts
        assert worker.poll() is None, worker.communicate()
        silent.close()   # nothing listening now: connections refused
        time.sleep(1)
        assert worker.poll() is None, worker.communicate()
        assert store.get_run(queued).status == RunStatus.QUEUED
        proxy.start()
        out, err = worker.communicate(timeout=60)   # --once: it exits once nothing is left
        assert worker.returncode == 0, err
        assert store.get_run(queued).status == RunStatus.SUCCEEDED
    finally:
        silent.close()
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
        store.close()
    assert queued in out
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len([line for line in lines if "the database is unreachable" in line]) == 1, err
    assert len([line for line in lines if "the database is reachable again" in line]) == 1, err
