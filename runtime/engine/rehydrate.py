"""Rebuilding a run loop from the store, to resume, recover or cancel a run.

The last checkpoint gives node statuses; trace events after it say what started
since (a crash came before the next checkpoint); attempts give retry budgets;
the lineage's journal and interrupts give what effects and answers to serve.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..core.errors import ErrorClass
from ..core.records import Checkpoint, EffectsMode, EventType, Run, RunKind, WriteKind
from ..core.states import NodeStatus, RunStatus, StopKind
from ..core.trace import states_after
from ..graph import ExecutableGraph
from ..history.lineage import continued_chain, head, key_scope, sources, writes_lineage
from ..history.state import base_state
from .deps import EngineDeps
from .loop import RunLoop
from .stopping import Stop, stop


def load_loop(deps: EngineDeps, run: Run, graph: ExecutableGraph | None = None,
              fresh: Checkpoint | None = None) -> RunLoop:
    """A loop for ``run``; ``fresh``: its first checkpoint, when this process just created it."""
    store = deps.store
    graph = graph or deps.graphs.run_graph(run)
    source_runs = sources(store, run)
    source_journal = store.journal(source_runs) if source_runs and run.effects_mode == EffectsMode.MOCK else []
    # a replay re-uses the answers people gave to the run it re-executes
    source_interrupts = ([i for rid in reversed(source_runs) for i in store.interrupts(rid)]
                         if run.options.get("compare") else [])
    if fresh is not None and fresh.run_id == run.id and run.kind != RunKind.CONTINUATION:
        inherited = writes_lineage(store, run)[1:]
        writes = store.node_writes(inherited) if inherited else {}
        return RunLoop(deps, graph, run, base=base_state(store, deps.graphs, run), head=fresh,
                       statuses=fresh.node_states, writes=writes, failures={}, key_scope=run.id, journal=[],
                       interrupts=source_interrupts, attempts={}, source_journal=source_journal, created_here=True)
    chain = continued_chain(store, run)
    last = head(store, run.id)
    attempts: dict[str, int] = {}
    retry_at: dict[str, float] = {}
    events = store.events(run.id)
    for ev in events:
        if ev.type == EventType.NODE_START and ev.node and ev.attempt:
            attempts[ev.node] = max(attempts.get(ev.node, 0), ev.attempt)
        if ev.type == EventType.NODE_RETRY and ev.node:  # a backoff survives a crash
            retry_at[ev.node] = ev.at + float(ev.data.get("retry_in", 0.0))
    # what started after the last checkpoint (a crash came before the next one)
    statuses = states_after(last.node_states, events, last.event_seq)
    retry_at = {n: t for n, t in retry_at.items() if statuses.get(n) == NodeStatus.RETRYING}
    interrupts = source_interrupts + [i for rid in reversed(chain) for i in store.interrupts(rid)]
    failures: dict[str, int] = {}
    for attempt in store.node_attempts(run.id):  # retry budgets hold across resumes
        if attempt.status == NodeStatus.FAILED:
            failures[attempt.node] = failures.get(attempt.node, 0) + 1
    loop = RunLoop(deps, graph, run, base=base_state(store, deps.graphs, run), head=last, statuses=statuses,
                   writes=store.node_writes(writes_lineage(store, run)), failures=failures,
                   key_scope=key_scope(store, run), journal=store.journal(list(reversed(chain))),
                   interrupts=interrupts, attempts=attempts, source_journal=source_journal)
    loop.restore(retry_at, stopping_reason(deps, run, statuses))
    return loop


def stopping_reason(deps: EngineDeps, run: Run, statuses: Mapping[str, NodeStatus]) -> Stop | None:
    """Whether a run taken over mid-way had already begun to stop, and why: a crash
    while siblings of a failure were finishing must not start anything new, and one
    while it was pausing for a question pauses as it would have (ADR 0011)."""
    if run.status != RunStatus.RUNNING:
        return None
    if NodeStatus.FAILED in statuses.values():
        errors = {w.node: w.value for w in deps.store.pending_writes(run.id) if w.kind == WriteKind.ERROR}
        failed = [n for n in statuses if statuses[n] == NodeStatus.FAILED]
        first = next((n for n in failed if n in errors), failed[0])
        error = dict(errors.get(first) or {"class": ErrorClass.INTERNAL.value, "message": "failed before a crash"})
        return Stop(StopKind.FAIL, {**error, "node": first})
    if NodeStatus.CANCELLED in statuses.values():
        return stop(StopKind.CANCEL, ErrorClass.CANCELLED, "cancelled before its process stopped")
    if NodeStatus.INTERRUPTED in statuses.values():   # pausing: retries and spent limits wait for the answer
        return Stop(StopKind.INTERRUPT, {})
    return None
