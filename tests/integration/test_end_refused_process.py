"""A run whose end the store keeps refusing, in a process that stays alive: another
process resumes it at once (its lease was released; a live owner's lease would bind
for its whole time), and the run ends with its effect made once."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runtime import RunStatus, Runtime, SqlStore

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]

WORKER = textwrap.dedent('''
    import asyncio, sys
    from pathlib import Path
    from pydantic import BaseModel
    from runtime import EndNotRecorded, Graph, RunStatus

    HERE = Path(__file__).parent

    class Order(BaseModel):
        receipt: str = ""

    def charge():
        with open(HERE / "charges.log", "a") as f:
            f.write("charge\\n")
        return "receipt-1"

    order = Graph("order", state=Order)

    @order.node()
    async def pay(state, ctx):
        return {"receipt": await ctx.effect("charge", charge)}

    class FullDisk:
        """The real store, whose disk is full for the commit ending a run."""

        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def commit(self, batch):
            if batch.run is not None and batch.run.status != RunStatus.RUNNING:
                raise OSError(28, "No space left on device")
            self.inner.commit(batch)

    if __name__ == "__main__":  # import ourselves by name: node refs must match the test's
        import importlib
        from runtime import Runtime, SqlStore
        sys.path.insert(0, str(HERE))
        me = importlib.import_module(Path(__file__).stem)
        rt = Runtime(me.FullDisk(SqlStore(sys.argv[1])), lease_ttl=3600.0)
        try:
            asyncio.run(rt.start(me.order, {}))
        except EndNotRecorded as e:
            print(e.run_id, e.released, flush=True)
        sys.stdin.read()   # alive, holding nothing, until the test is done
''')


async def test_a_run_whose_end_was_refused_is_resumed_at_once_by_another_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = f"end_refused_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(WORKER)
    monkeypatch.syspath_prepend(str(tmp_path))
    graphs = importlib.import_module(module)
    url = f"sqlite:///{tmp_path / 'h.db'}"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    worker = subprocess.Popen([sys.executable, str(tmp_path / f"{module}.py"), url], env=env, cwd=tmp_path,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rt = Runtime(SqlStore(url), graphs=[graphs.order], lease_ttl=3600.0)
    try:
        assert worker.stdout is not None
        line = worker.stdout.readline().split()
        assert line[1:] == ["True"], worker.stderr.read() if worker.stderr and not line else line
        run = await rt.get_run(line[0])
        assert worker.poll() is None   # its process still runs
        assert run.status == RunStatus.RUNNING and run.lease_owner is None and rt.orphaned(run)

        ended = await rt.resume(run.id)
        assert ended.status == RunStatus.SUCCEEDED
        assert (tmp_path / "charges.log").read_text().split() == ["charge"]
        seqs = [e.seq for e in rt.store.events(run.id)]
        assert seqs == list(range(1, len(seqs) + 1))
    finally:
        rt.close()
        worker.communicate(timeout=30)   # closes its stdin: it exits
