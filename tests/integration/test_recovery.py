"""Recovery of a run whose process was SIGKILLed while it was stopping, backing off, or
waiting for an answer with an effect in flight."""

from __future__ import annotations

import asyncio
import importlib
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from runtime import InterruptKind, InvalidAnswer, InvalidRequest, Run, RunStatus, Runtime, SqlStore

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]

GRAPHS = textwrap.dedent('''
    import asyncio, os, signal, sys
    from pathlib import Path
    from pydantic import BaseModel
    from runtime import Graph, RetryPolicy, TransientError

    HERE = Path(__file__).parent
    def mark(name):
        with open(HERE / "marks.log", "a") as f:
            f.write(name + "\\n")

    stopping = Graph("stopping")

    @stopping.node()
    async def bad(state):
        raise ValueError("bad input")

    @stopping.node()
    async def sibling(state):
        await asyncio.sleep(0.5)
        if os.environ.get("DIE"):
            os.kill(os.getpid(), signal.SIGKILL)
        return {}

    @stopping.node(after=["sibling"])
    async def later(state):
        mark("later")
        return {}

    backoff = Graph("backoff")

    @backoff.node(retry=RetryPolicy(max_attempts=2, initial_interval=3.0))
    async def flaky(state, ctx):
        mark(f"flaky {ctx.attempt}")
        if ctx.attempt == 1:
            raise TransientError("rate limited")
        return {}

    @backoff.node()
    async def killer(state):
        await asyncio.sleep(0.5)
        if os.environ.get("DIE"):
            os.kill(os.getpid(), signal.SIGKILL)
        return {}

    class Approval(BaseModel):
        approve: bool

    asking = Graph("asking")

    @asking.node()
    async def ask(state, ctx):
        answer = await ctx.interrupt({"question": "ship it?"}, response=Approval)
        mark(f"ask {answer.approve}")
        return {}

    def charge():
        mark("charge")
        if os.environ.get("DIE"):   # the effect started and its outcome is never recorded
            os.kill(os.getpid(), signal.SIGKILL)
        return {"charged": 5}

    @asking.node()
    async def pay(state, ctx):
        await asyncio.sleep(0.5)   # after the question was asked
        await ctx.effect("charge", charge)
        return {}

    if __name__ == "__main__":  # import ourselves by name: node refs must match the test's
        import importlib
        from runtime import Runtime, SqlStore
        sys.path.insert(0, str(HERE))
        me = importlib.import_module(Path(__file__).stem)
        graph = {"stopping": me.stopping, "backoff": me.backoff, "asking": me.asking}[sys.argv[2]]
        deadline = float(os.environ.get("DEADLINE", "0")) or None
        asyncio.run(Runtime(SqlStore(sys.argv[1])).start(graph, {}, deadline=deadline))
''')


@pytest.fixture
def graphs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    name = f"recovery_graphs_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(GRAPHS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path, name, importlib.import_module(name)


def run_until_killed(tmp_path: Path, module: str, url: str, graph: str, deadline: float = 0) -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "DIE": "1", "DEADLINE": str(deadline)}
    proc = subprocess.run([sys.executable, str(tmp_path / f"{module}.py"), url, graph], env=env,
                          cwd=tmp_path, timeout=60, capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr  # SIGKILLed, as planned


async def killed(graphs, name: str, deadline: float = 0) -> tuple[Path, Runtime, Run]:
    """Graph ``name`` run in a process SIGKILLed part-way: a Runtime over its store, and the run."""
    tmp_path, module, mod = graphs
    url = f"sqlite:///{tmp_path / 'h.db'}"
    run_until_killed(tmp_path, module, url, name, deadline)
    rt = Runtime(SqlStore(url), graphs=[getattr(mod, name)])
    return tmp_path, rt, (await rt.runs())[0]


def marks(tmp_path: Path) -> list[str]:
    path = tmp_path / "marks.log"
    return path.read_text().split() if path.exists() else []


async def test_a_run_killed_while_stopping_after_a_failure_ends_failed_without_new_work(graphs):
    tmp_path, rt, run = await killed(graphs, "stopping")
    assert run.status == RunStatus.RUNNING
    run = await rt.resume(run.id)
    assert run.status == RunStatus.FAILED
    assert run.error["class"] == "invalid_input" and run.error["node"] == "bad"
    assert "later" not in " ".join(marks(tmp_path))
    rt.close()


async def test_a_retry_backoff_survives_a_crash(graphs):
    tmp_path, module, mod = graphs
    url = f"sqlite:///{tmp_path / 'h.db'}"
    t0 = time.time()
    run_until_killed(tmp_path, module, url, "backoff")
    rt = Runtime(SqlStore(url), graphs=[mod.backoff])
    run_id = (await rt.runs())[0].id
    retry_event = next(e for e in await rt.events(run_id) if e.type == "node.retry")
    run = await rt.resume(run_id)
    assert run.status == RunStatus.SUCCEEDED
    second = next(e for e in await rt.events(run_id) if e.type == "node.start" and e.node == "flaky"
                  and e.attempt == 2)
    assert second.at - retry_event.at >= 2.9  # the 3 s backoff was kept, not restarted or skipped
    assert marks(tmp_path).count("flaky") == 2 and time.time() - t0 < 30
    rt.close()


async def test_an_answer_to_a_run_whose_process_died_answers_the_question_it_was_given_for(graphs):
    """The process died with a question open and an effect in flight. The answer (given
    without an id: one question was open) is checked first, then recovery asks about the
    cut-off effect as a question of its own; the answer stays with the question it was for."""
    tmp_path, rt, run = await killed(graphs, "asking")
    assert run.status == RunStatus.RUNNING and rt.orphaned(run)
    [question] = await rt.interrupts(run.id)
    events = len(await rt.events(run.id))
    with pytest.raises(InvalidAnswer, match="approve"):   # checked before recovery changes anything
        await rt.resume(run.id, {"approve": "maybe"})
    assert rt.store.get_run(run.id).status == RunStatus.RUNNING and len(await rt.events(run.id)) == events

    run = await rt.resume(run.id, {"approve": True})
    assert run.status == RunStatus.INTERRUPTED
    assert rt.store.interrupt(question.id).answer == {"approve": True}
    [doubt] = await rt.interrupts(run.id)
    assert doubt.kind == InterruptKind.IN_DOUBT and doubt.node == "pay"
    assert marks(tmp_path) == ["charge", "ask", "True"]
    run = await rt.resume(run.id, {"action": "result", "result": {"charged": 5}})
    assert run.status == RunStatus.SUCCEEDED
    assert marks(tmp_path).count("charge") == 1   # the effect ran once, in the process that died
    rt.close()


async def test_an_answer_to_a_run_whose_process_died_with_no_question_open_is_refused(graphs):
    _, rt, run = await killed(graphs, "stopping")
    events = len(await rt.events(run.id))
    with pytest.raises(InvalidRequest, match="no question open"):
        await rt.resume(run.id, {"approve": True})
    assert rt.store.get_run(run.id).status == RunStatus.RUNNING and len(await rt.events(run.id)) == events
    rt.close()


async def test_limits_given_with_the_answer_apply_to_the_recovery_too(graphs):
    """The run's 2 s deadline passed while its process was dead; the answer comes with a new
    one, which the recovery that comes first must already use."""
    tmp_path, rt, run = await killed(graphs, "asking", deadline=2)
    await asyncio.sleep(max(0.0, run.limits["deadline_at"] - time.time() + 0.1))
    run = await rt.resume(run.id, {"approve": True}, deadline=100)
    assert run.status == RunStatus.INTERRUPTED, run.error   # now on the cut-off effect alone
    [doubt] = await rt.interrupts(run.id)
    assert doubt.kind == InterruptKind.IN_DOUBT and run.limits["deadline_s"] == 100
    assert marks(tmp_path) == ["charge", "ask", "True"]
    rt.close()
