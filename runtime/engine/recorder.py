"""Recording a run as it executes: trace events, transitions, checkpoints, commits.

Every status change goes through ``node``/``run_event`` (the transition tables)
and emits a trace event into the current batch; the batch commits in one
transaction, so trace and checkpoints never disagree. A batch commits when the
group-commit window closes or the lease needs renewing (``maybe_flush``), and is
forced to disk before every effect and when the run pauses or ends.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pydantic_core import to_json

from ..core.env import Environment
from ..core.errors import ErrorClass, HarnessError, LeaseLost
from ..core.jsonvalues import JSON
from ..core.layers import StatusLayers
from ..core.records import (
    Batch,
    Checkpoint,
    CheckpointSource,
    EventType,
    JournalEntry,
    NodeAttempt,
    PendingWrite,
    Run,
    TraceEvent,
    WriteKind,
)
from ..core.states import (
    NODE_TRANSITIONS,
    SETTLED_NODE,
    NodeEvent,
    NodeStatus,
    RunEvent,
    RunStatus,
    next_node_status,
    next_run_status,
)
from ..core.streams import SINK, StreamEvent, merge_stream
from ..store.base import CheckpointStore
from .folding import StateFold
from .instances import Instances
from .outage import Outage
from .scope import AttemptScope

log = logging.getLogger(__name__)

#: each node transition's event type (``EventType.of_node``, without the call)
_OF_NODE = {e: EventType.of_node(e) for e in NodeEvent}

SNAPSHOT_EVERY = 200
SNAPSHOT_MIN_BYTES = 4096


class Recorder:
    def __init__(self, store: CheckpointStore, env: Environment, inst: Instances, run: Run,
                 head: Checkpoint, statuses: Mapping[str, NodeStatus], state: StateFold):
        self.store, self.env, self.inst, self.state = store, env, inst, state
        self.now = env.clock.time   # ``env.now``, one call fewer: it is asked several times a step
        self.graph = inst.graph
        self.run = run
        #: the run's row as last committed: ``late_effect`` adds usage to it, never writing
        #: what a failed commit left uncommitted (an end the store refused)
        self.committed = run
        self.head = head
        self._parent = head
        self.statuses: dict[str, NodeStatus] = dict(statuses)
        #: nodes whose status changed since the head checkpoint -> their status there (None: not in it)
        self._was: dict[str, NodeStatus | None] = {
            n: was for n, st in self.statuses.items() if (was := head.node_states.get(n)) != st}
        #: the next checkpoint's statuses cannot be the head's with the changed ones over
        #: them (``StatusLayers``): the head has nodes this run's statuses lack
        self._flat_next = not head.node_states.keys() <= self.statuses.keys()
        self.batch = Batch(run_id=run.id, fence=run.fence)
        self.seq = run.event_seq
        self.last_flush = env.now()
        self.outage = Outage(run.id)   # the store unreachable for a while (``flush_checked``)
        self._dirty = False
        #: the run's driver stopped (the run ended, was abandoned, or its lease was lost):
        #: an attempt still running in a thread records nothing more
        self.closed = False
        #: the usage when the driver stopped without its end recorded: whoever resumes does
        #: that work again, usage included, so only what is reported after it is late usage
        self._redone: dict[str, Any] | None = None
        self._folded: list[str] = []
        self._since_snapshot = 0
        self._bytes_since_snapshot = 0
        self._snapshot_bytes = 0
        self.usage = usage_of(run)
        self.usage_lock = threading.Lock()   # sync nodes report usage from worker threads
        #: who streams the call driving this run (captured here: node threads have no context)
        self.sink = SINK.get()
        #: whether the run's last checkpoint carries a full snapshot (``snapshot_at_end``)
        self.snapshot_at_end = snapshot_at_end(run)

    # ------------------------------------------------------------------ events and transitions

    def emit(self, type_: EventType, node: str | None = None, attempt: int | None = None, **data: Any) -> None:
        self.seq += 1  # copied into the run row when the batch commits
        self.batch.events.append(TraceEvent(self.run.id, self.seq, self.now(), type_, node, attempt, data))

    def node(self, node: str, event: NodeEvent, attempt: int | None = None, **data: Any) -> bool:
        """Apply a node transition; True when the node's outcome is now settled."""
        before = self.statuses[node]
        # the transition table, read here: ``next_node_status`` is asked only to name a bad one
        status = NODE_TRANSITIONS[before].get(event) or next_node_status(before, event)
        self.statuses[node] = status
        self._was.setdefault(node, before)
        # ``emit``, inlined: a transition is recorded several times a step. The event's type
        # says which (the status follows from the table); ``data`` is this call's own dict
        self.seq += 1
        self.batch.events.append(TraceEvent(self.run.id, self.seq, self.now(), _OF_NODE[event], node, attempt,
                                            data))
        if status in SETTLED_NODE:
            self._dirty = True
            return True
        return False

    def add_instances(self, names: list[str]) -> None:
        """New node instances (a loop's iteration, a map's items): pending, in the next checkpoint."""
        for n in names:
            self.statuses[n] = NodeStatus.PENDING
            self._was.setdefault(n, None)

    def run_event(self, event: RunEvent, **data: Any) -> None:
        status = next_run_status(self.run.status, event)
        self.run = self.run.evolve(status=status, updated_at=self.now())
        self.emit(EventType.of_run(event), status=status.value, **data)

    def pending(self, scope: AttemptScope, kind: WriteKind, value: JSON) -> None:
        self.batch.writes.append(PendingWrite(self.run.id, self.head.seq, scope.node, scope.attempt,
                                              kind, value, self.now()))

    def attempt(self, scope: AttemptScope, status: NodeStatus, error_class: ErrorClass | None = None,
                error: str | None = None, decision: str | None = None) -> None:
        self.batch.attempts.append(NodeAttempt(
            self.run.id, scope.node, scope.attempt, status, scope.started_at, self.now(),
            error_class.value if error_class else None, error, decision))
        if scope.tokens or scope.cost:
            self.emit(EventType.USAGE, scope.node, scope.attempt, tokens=scope.tokens, cost=scope.cost)

    def folded(self, node: str, size: int) -> None:
        """A succeeded node's writes go into the next checkpoint."""
        self._folded.append(node)
        self._bytes_since_snapshot += size

    # ------------------------------------------------------------------ checkpoints

    def _take_changed(self) -> tuple[str, ...]:
        """Nodes whose status differs from the head checkpoint's, canonical order."""
        now = self.statuses
        changed = [n for n, was in self._was.items() if was != now[n]]
        self._was = {}
        return tuple(self.inst.canonical(changed) if len(changed) > 1 else changed)

    def checkpoint_if_dirty(self) -> None:
        if not self._dirty:
            return
        self._dirty = False
        self._since_snapshot += 1
        snapshot = None
        # A full snapshot once the writes since the last one outweigh it (or after
        # SNAPSHOT_EVERY steps): snapshots then cost at most about as much as the
        # writes themselves, so storage stays linear even when the state keeps growing.
        ending = self.run.status != RunStatus.RUNNING and self.snapshot_at_end
        if (self._since_snapshot >= SNAPSHOT_EVERY or ending
                or self._bytes_since_snapshot >= max(self._snapshot_bytes, SNAPSHOT_MIN_BYTES)):
            snapshot = self.state.head_state()
            self._since_snapshot = self._bytes_since_snapshot = 0
            self._snapshot_bytes = len(to_json(snapshot))
        head, folded, statuses = self.head, self._folded, self.statuses
        changed = self._take_changed()
        if self._flat_next:
            self._flat_next = False
            states: Mapping[str, NodeStatus] = dict(statuses)
        else:   # the head's statuses with what changed over them: no copy of every instance's
            states = StatusLayers.over(head.node_states, changed, statuses)
        # positional, in the record's field order: a checkpoint is made at nearly every step
        cp = Checkpoint(self.env.ids.new("cp"), self.run.id, head.seq + 1, head.id,
                        tuple(self.inst.canonical(folded) if len(folded) > 1 else folded),
                        states, self.seq, self.now(), CheckpointSource.STEP, snapshot, changed)
        self._folded = []
        self._parent, self.head = self.head, cp
        self.batch.checkpoints.append(cp)

    def final_checkpoint(self) -> None:
        """The last checkpoint of a pause or end: every status, and (see
        ``snapshot_at_end``) a full snapshot."""
        self._dirty = True
        if self.snapshot_at_end:
            self._since_snapshot = SNAPSHOT_EVERY
        if self.batch.checkpoints:
            last = self.batch.checkpoints.pop()
            before = self._parent.node_states   # the last checkpoint's own changes count from its parent
            for n in last.changed or ():
                self._was[n] = before.get(n)
            snapshot = self.state.head_state() if self.snapshot_at_end else last.snapshot
            self.head = replace(last, node_states=dict(self.statuses), event_seq=self.seq,
                                snapshot=snapshot, changed=self._take_changed())
            self.batch.checkpoints.append(self.head)
            self._dirty = False
            return
        self.checkpoint_if_dirty()

    # ------------------------------------------------------------------ commits

    def lease_due(self, now: float) -> bool:
        lease = self.run.lease_expires_at
        return lease is not None and lease - now < self.env.lease_ttl / 2

    def maybe_flush(self) -> None:
        """Group commit: pure outcomes may wait up to ``group_commit`` seconds to share a
        transaction. Nothing outside the process can have seen them yet, and a crash
        before the commit just runs those pure nodes again."""
        now = self.now()
        lease = self.run.lease_expires_at   # ``lease_due``, inlined: asked at every step
        if lease is not None and lease - now < self.env.lease_ttl / 2 and now >= self.outage.next_at:
            self.flush_checked()  # heartbeat: renew the lease even when nothing else happened
        elif not self.batch.empty() and now - self.last_flush >= self.env.group_commit:
            self.flush_checked()

    def flush(self, durable: bool = False) -> None:
        batch = self.batch
        now = self.now()
        self.last_flush = now
        if self.run.status == RunStatus.RUNNING and self.lease_due(now):
            self.run = self.run.evolve(lease_expires_at=now + self.env.lease_ttl)
        self.run = self.run.evolve(usage=dict(self.usage), event_seq=self.seq, head_seq=self.head.seq)
        batch.run = self.run
        batch.durable = durable
        self.store.commit(batch)
        self.flushed(batch)

    def flush_checked(self, durable: bool = False) -> None:
        """``flush`` a batch the run goes on after (a step, a heartbeat, an effect's journal
        entry); one the store refused is tried once more at once. A store that lost its
        connection opens a new one for the next commit, so a dropped connection costs one
        try. The run's row says first whether the refused commit went in after all (the
        connection lost while committing): then it is not written twice. A refusal that
        lasts raises, and the run ends as on any unexpected error."""
        try:
            self.flush(durable)
            self.outage.over(self.last_flush)
            return
        except HarnessError:
            raise   # refused on purpose (the lease lost): trying again cannot help
        except Exception as e:
            refused = e
        if holds(self.stored_run(), self.run):
            log.info("run %s: its commit was recorded though the store reported %r", self.run.id, refused)
            self.flushed(self.batch)
            self.outage.over(self.last_flush)
            return
        if self.outage.since is None:
            log.warning("run %s: the store refused a commit (%r); trying it again", self.run.id, refused)
        try:
            self.flush(durable)
        except HarnessError:
            raise
        except Exception as e:
            # a store away for now keeps what was recorded; a refusal (a bug, a constraint) fails
            # the run, as must what has to be on disk before what follows (an effect's call)
            if durable or not self.store.unreachable(e):
                raise
            # kept, and tried again later (``outage``); the group commit's next turn is then
            retry_at = self.outage.refused(e, self.last_flush, self.env.lease_ttl, len(self.batch.events))
            if retry_at is None:
                raise
            self.last_flush = retry_at - self.env.group_commit
            return
        self.outage.over(self.last_flush)

    def stored_run(self) -> Run | None:
        """The run's row as the store has it now; None when the store cannot say."""
        try:
            return self.store.get_run(self.run.id)
        except Exception:
            return None

    def flushed(self, batch: Batch) -> None:
        """What follows the commit of ``batch`` (the current one): a new batch, the stream."""
        self.committed = self.run
        self.batch = Batch(run_id=self.run.id, fence=self.run.fence)
        if self.sink is not None:
            self.sink(merge_stream(self.run.id, batch.events, batch.checkpoints, batch.writes))

    def late_effect(self, entry: JournalEntry) -> None:
        """Journal an effect's outcome that arrived after the run's end: without a trace
        event, and only while no other process took the run over (its effect is then in
        doubt, which is safe). The usage it reported goes onto the run's row in the same
        transaction: a continuation starts with it and is served the result without
        counting it again, so it is counted once, in the budget of the run's lineage."""
        # held through the commit: two late effects committing out of order would otherwise
        # leave the row with the older, smaller usage
        with self.usage_lock:
            self._commit_late([entry])

    def late_usage(self) -> None:
        """Put usage reported after the run's end onto its row: an effect whose thread
        outlived the run spent it whether or not its outcome can be journaled (a result
        with no JSON form, a call its deadline gave up on). Never raises: the caller is
        effect code in a thread, and nobody waits for the ended run."""
        with self.usage_lock:
            try:
                self._commit_late([])
            except Exception:
                log.exception("run %s: usage reported after the run ended could not be recorded", self.run.id)

    def close(self) -> None:
        """The run's driver stopped: nothing more is recorded but late effects and usage.
        Usage a thread reported after the recorded end goes onto the row now; any reported
        from here on, as it comes (``late_usage``): with ``closed`` set under the lock,
        each report is seen by one or the other."""
        with self.usage_lock:
            self.closed = True
            committed = self.committed.usage
            unsaved = any(v != committed.get(k, 0) for k, v in self.usage.items())
            # an end that was never recorded (the store refused it, the lease was lost): what
            # was done since the last commit is done again by whoever resumes, usage included
            ended = self.committed.status != RunStatus.RUNNING
            if not ended:
                self._redone = dict(self.usage)
        if unsaved and ended:
            self.late_usage()

    def _commit_late(self, effects: list[JournalEntry]) -> None:
        """Commit the run's row as last committed, with the usage so far (the caller holds
        ``usage_lock``). A run taken over since (recovered, resumed or continued: its fence
        moved on) refuses it: the new owner holds the effect in doubt and started from the
        usage it found, so what was reported here is not counted. Counting it would need a
        write outside the fence that the new owner's own usage does not overwrite; the
        store offers none, and an effect in doubt is settled by a person anyway.

        A row last committed RUNNING is read first: the end may have gone in though the
        store reported it refused (the row then holds it, and usage counts in full), and
        a row that moved on otherwise is not written back over."""
        base = self.committed
        if base.status == RunStatus.RUNNING:
            stored = self.stored_run()
            if stored is not None and holds(stored, self.run):
                base, self._redone = stored, None
            elif stored is None or (stored.fence == base.fence
                                    and (stored.status, stored.event_seq) != (base.status, base.event_seq)):
                doubt = f"effect {effects[0].name} is left in doubt and " if effects else ""
                log.info("run %s: its row moved on from what this process committed, or cannot be read: "
                         "%slate usage %s is not written", base.id, doubt, dict(self.usage))
                return
        redone, now = self._redone, dict(self.usage)
        usage = now if redone is None else {k: base.usage.get(k, 0) + v - redone.get(k, 0) for k, v in now.items()}
        run = base.evolve(usage=usage)
        try:
            self.store.commit(Batch(run_id=run.id, fence=run.fence, run=run, effects=effects))
            self.committed = run
            if redone is not None:   # the row holds what was reported until now: only what follows adds
                self._redone = now
        except LeaseLost:
            saved = self.committed.usage
            lost = {k: v - saved.get(k, 0) for k, v in self.usage.items() if v != saved.get(k, 0)}
            doubt = f"effect {effects[0].name} finished after the run ended and is left in doubt; " if effects else ""
            log.info("run %s: another process took the run over: %susage %s is not counted", self.run.id, doubt,
                     lost)

    def publish_now(self, event: StreamEvent) -> None:
        """Deliver an ephemeral event after everything recorded before it, committed as a
        step is (tried again once if refused, not written twice if it went in after all)."""
        if self.sink is None:
            return
        if self.batch.events:
            self.flush_checked()
        self.sink([event])


def usage_of(run: Run) -> dict[str, Any]:
    """The run's usage with every counter, as a run loop keeps it (even one never reported)."""
    return {"tokens": int(run.usage.get("tokens", 0)), "cost": float(run.usage.get("cost", 0.0)),
            "steps": int(run.usage.get("steps", 0))}


def snapshot_at_end(run: Run) -> bool:
    """Whether the run's last checkpoint carries a full snapshot: always, except for
    conversation turns, which snapshot on turns 1, 2, 4, 8, … so that a thread's
    snapshots add up to about twice its final state (storage grows linearly)."""
    turn = run.options.get("turn")
    return not turn or (int(turn) & (int(turn) - 1)) == 0


def holds(stored: Run | None, committing: Run) -> bool:
    """Whether the run's row as stored already holds the batch that writes ``committing``:
    under the run's fence only that batch writes its status, last event number and lease."""
    return (stored is not None and stored.fence == committing.fence and stored.status == committing.status
            and stored.event_seq == committing.event_seq
            and stored.lease_expires_at == committing.lease_expires_at)
