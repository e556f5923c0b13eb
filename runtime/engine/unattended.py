"""Cancelling a run that waits (paused for a person, or queued) where its graph's code is not.

Such a run has nothing in flight, so its cancel runs no node code: it writes what
``stopping.finish_run`` writes when a cancel reaches a waiting run — each node the
cancel ends (``stopping.stop_event``: an interrupted or retrying instance, a map's group
record still open) gets ``node.cancel`` in canonical order, open questions are closed,
``run.cancel`` follows, then a last checkpoint with every status and the state as it
was, and the run's row, all in one transaction forced to disk under a fresh lease.
The canonical order and the state come from the graph's stored description where its
code cannot be imported (``GraphRegistry.order_for``, ``history.state.state_json``):
the state is read before the lease is taken, so a run whose state cannot be read
here is refused and stays as it was.
"""

from __future__ import annotations

from dataclasses import replace

from ..core.errors import ErrorClass
from ..core.records import Batch, Checkpoint, CheckpointSource, EventType, InterruptStatus, Run, TraceEvent
from ..core.states import NODE_TRANSITIONS, RunEvent, RunStatus, StopKind, next_node_status, next_run_status
from ..core.streams import SINK, merge_stream
from ..core.trace import states_after
from ..history.lineage import head
from ..history.state import state_json
from .deps import EngineDeps
from .recorder import snapshot_at_end, usage_of
from .stopping import stop_event

#: the statuses a run waits in with nothing in flight: no process needs its code to end it
WAITING = frozenset({RunStatus.INTERRUPTED, RunStatus.QUEUED})


def cancel_waiting(deps: EngineDeps, run: Run, reason: str) -> Run:
    """Cancel ``run`` (``WAITING``, held by no live process) from its records alone."""
    store, env = deps.store, deps.env
    last = head(store, run.id)
    statuses = states_after(last.node_states, store.events(run.id, last.event_seq), last.event_seq)
    order = deps.graphs.order_for(run)
    # the state first: a run whose state cannot be read here is refused before anything is written
    state = state_json(store, deps.graphs, last)
    run = store.acquire_lease(run.id, env.owner, env.now() + env.lease_ttl, run.fence)
    now = env.clock.time
    batch = Batch(run_id=run.id, fence=run.fence)
    seq = run.event_seq
    nodes = order.canonical(list(statuses))
    for node in nodes:
        before = statuses[node]
        event = stop_event(StopKind.CANCEL, before)
        if event is None:
            continue
        statuses[node] = NODE_TRANSITIONS[before].get(event) or next_node_status(before, event)
        seq += 1
        batch.events.append(TraceEvent(run.id, seq, now(), EventType.of_node(event), node, None, {}))
    batch.interrupts.extend(replace(i, status=InterruptStatus.CANCELLED)
                            for i in store.interrupts(run.id) if i.status == InterruptStatus.PENDING)
    status = next_run_status(run.status, RunEvent.CANCEL)
    seq += 1
    batch.events.append(TraceEvent(run.id, seq, now(), EventType.of_run(RunEvent.CANCEL), None, None,
                                   {"status": status.value, "reason": reason}))
    was = last.node_states
    cp = Checkpoint(env.ids.new("cp"), run.id, last.seq + 1, last.id, (), dict(statuses), seq, now(),
                    CheckpointSource.STEP, state if snapshot_at_end(run) else None,
                    tuple(n for n in nodes if was.get(n) != statuses[n]))
    batch.checkpoints.append(cp)
    batch.run = run = run.evolve(status=status, error={"class": ErrorClass.CANCELLED.value, "message": reason},
                                 lease_owner=None, lease_expires_at=None, event_seq=seq, head_seq=cp.seq,
                                 updated_at=now(), usage=usage_of(run))
    batch.durable = True
    store.commit(batch)
    sink = SINK.get()
    if sink is not None:
        sink(merge_stream(run.id, batch.events, batch.checkpoints, batch.writes))
    return run

