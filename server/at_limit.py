"""What a person can do about a run that failed at a limit.

A limit of the run (``max_steps``, ``max_tokens``, ``max_cost``) can be given again,
higher, on resume: the continuation counts the usage so far against it. A loop's
``max_iterations`` is part of the graph, which a continuation and a fork keep, so a
resume meets the bound again at once; a fork from before the way back that passed it,
with a patch that ends the loop there, goes on.
"""

from __future__ import annotations

from runtime import ErrorClass, Run, RunStatus
from runtime.core.records import Checkpoint
from runtime.core.states import COMPLETED_NODE
from runtime.engine.decisions import budget_exceeded
from runtime.engine.growth import bound_reached
from runtime.store.base import CheckpointStore

#: how many runs back (continuations, forks) a checkpoint before the bound is looked for
_RUNS_BACK = 20


def limit_lines(store: CheckpointStore, run: Run) -> list[str]:
    """The next steps for ``run`` when it failed at a limit, else none."""
    error = run.error or {}
    if run.status != RunStatus.FAILED or error.get("class") != ErrorClass.LIMIT_EXCEEDED.value:
        return []
    message = error.get("message")
    reached = bound_reached(message) if isinstance(message, str) else None
    if reached is not None:
        return _loop_lines(store, run, *reached)
    return _run_limit_lines(run)


def _run_limit_lines(run: Run) -> list[str]:
    limits, usage = run.limits, run.usage
    given = []
    steps, max_steps = usage.get("steps"), limits.get("max_steps")
    if isinstance(steps, int) and isinstance(max_steps, int) and steps >= max_steps:
        given.append(f"--max-steps N (N above the {steps} steps taken)")
    over = budget_exceeded(limits, usage) if {"tokens", "cost"} <= usage.keys() else None
    if over is not None and "max_tokens" in over:
        given.append(f"--max-tokens N (N above the {usage['tokens']} tokens used)")
    if over is not None and "max_cost" in over:
        given.append(f"--max-cost N (N above the {usage['cost']:g} spent)")
    if not given:
        return []   # a node raised the error itself: no limit of the run to raise
    return [f"to go on with a higher limit (usage counts across continuations): harness resume {run.id} "
            f"{' '.join(given)}"]


def _loop_lines(store: CheckpointStore, run: Run, entry: str, node: str) -> list[str]:
    lines = [f"max_iterations of loop {entry!r} is part of the graph, which a resume keeps: it fails again at once"]
    before = _before(store, run, node)
    if before is not None:
        lines.append(f"  to go on: fork from checkpoint #{before.seq} of run {before.run_id}, before {node!r} led "
                     f"back, with state in which the loop ends there: harness fork {before.id} "
                     """--patch '{"FIELD": VALUE}'""")
    lines.append("  a higher max_iterations is a new graph version, which only a new run takes")
    return lines


def _before(store: CheckpointStore, run: Run, node: str) -> Checkpoint | None:
    """The latest checkpoint of ``run``'s lineage (it, then the runs it branched off, up to
    where it did) where ``node`` had not completed."""
    last: int | None = None
    for _ in range(_RUNS_BACK):
        cps = store.checkpoints(run.id)
        for cp in reversed(cps):
            if (last is None or cp.seq <= last) and cp.node_states.get(node) not in COMPLETED_NODE:
                return cp
        if run.base_checkpoint_id is None:
            return None
        base = store.get_checkpoint(run.base_checkpoint_id)
        last, run = base.seq, store.get_run(base.run_id)
    return None
