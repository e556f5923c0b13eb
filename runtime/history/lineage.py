"""Walks up a thread's tree of runs.

A thread is a tree: forks, replays and continuations record their parent run and
base checkpoint. Which ancestors matter depends on the question asked, so each
walk below answers one question and says which.
"""

from __future__ import annotations

from ..core.errors import NotFound
from ..core.records import COMPENSATION_STATUSES, Checkpoint, Run, RunKind
from ..core.states import TERMINAL_RUN
from ..store.base import CheckpointStore


def continued_chain(store: CheckpointStore, run: Run) -> list[str]:
    """The run and the runs it continues (the same execution), nearest first."""
    out = [run.id]
    while run.parent_run_id is not None and run.kind == RunKind.CONTINUATION:
        run = store.get_run(run.parent_run_id)
        out.append(run.id)
    return out


def writes_lineage(store: CheckpointStore, run: Run) -> list[str]:
    """The runs whose node writes a run's state folds, nearest first: continuations,
    replays and forks inherit the outcomes of the nodes they did not re-execute; a
    patched fork does not (the patched state at its base is its input)."""
    out = [run.id]
    # (a continuation copies its parent's options: only the fork itself was patched)
    while (run.parent_run_id is not None and run.kind != RunKind.MAIN
           and not (run.kind == RunKind.FORK and run.options.get("patched"))):
        run = store.get_run(run.parent_run_id)
        out.append(run.id)
    return out


def origin(store: CheckpointStore, run: Run) -> Run:
    """The first run of a continuation chain (whose id scopes the chain's effect keys)."""
    while run.kind == RunKind.CONTINUATION and run.parent_run_id is not None:
        run = store.get_run(run.parent_run_id)
    return run


def sources(store: CheckpointStore, run: Run) -> list[str]:
    """The source lineage of a fork or replay: every ancestor past its own
    continuation chain up to the main run it branched from (its journals serve its
    mocked effects), nearest first. A main run's parent is the previous turn of its
    conversation: a different execution, so the walk stops there."""
    run = origin(store, run)
    if run.parent_run_id is None or run.kind == RunKind.MAIN:
        return []
    return branch_sources(store, store.get_run(run.parent_run_id))


def branch_sources(store: CheckpointStore, parent: Run) -> list[str]:
    """The source lineage a branch whose parent is ``parent`` will have (``sources`` of
    it, before it exists): ``parent`` and its ancestors up to the main run it came
    from, nearest first."""
    out = [parent.id]
    while parent.parent_run_id is not None and parent.kind != RunKind.MAIN:
        parent = store.get_run(parent.parent_run_id)
        out.append(parent.id)
    return out


def key_scope(store: CheckpointStore, run: Run) -> str:
    """Continuations keep their origin's effect keys: they are the same execution."""
    return origin(store, run).id


def head(store: CheckpointStore, run_id: str) -> Checkpoint:
    """The run's latest checkpoint."""
    found = store.find_checkpoint(run_id)
    if found is None:
        raise NotFound(f"run {run_id} has no checkpoints")
    return found


def continuations(store: CheckpointStore, run_id: str) -> list[Run]:
    return [c for c in store.child_runs(run_id) if c.kind == RunKind.CONTINUATION]


def unused_mocks(store: CheckpointStore, run: Run) -> list[str]:
    """The names in a branch's ``mocks`` that no effect of the branch was called by, once
    it has ended (a paused one may still call them): a misspelt name is otherwise silent,
    and the effect it meant pauses the branch as unrecorded. (A mock for an effect the
    recording served is not reported: it was there in case.) The runs it continues count:
    a continuation copies their options and calls the effects they had not reached."""
    return uncalled_mocks(store, run) if run.status in TERMINAL_RUN else []


def uncalled_mocks(store: CheckpointStore, run: Run) -> list[str]:
    """The names in a branch's ``mocks`` that no effect of it (or of the runs it continues)
    has called so far, whatever its status: at a pause on an unrecorded effect, the likely
    misspelling of that effect's name is among them."""
    mocks = run.options.get("mocks")
    if not isinstance(mocks, dict) or not mocks:
        return []
    called = {e.name for e in store.journal(continued_chain(store, run))}
    return sorted(set(mocks) - called)


def compensated(store: CheckpointStore, run: Run) -> bool:
    """Whether effects of the run's line were undone (or may have been): it is forked, never continued."""
    return any(e.status in COMPENSATION_STATUSES for e in store.journal(continued_chain(store, run)))
