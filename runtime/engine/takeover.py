"""Taking a run over: what a process records when it claims, resumes, recovers or
cancels a run it did not start, and what it learns of the run's previous progress.

Mixed into ``RunLoop`` (see ``growth`` for the same arrangement).
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Mapping

from ..core.errors import ErrorClass, InvalidAnswer
from ..core.jsonvalues import JSON
from ..core.records import Interrupt, InterruptStatus
from ..core.states import NodeEvent, NodeStatus, RunEvent, RunStatus, StopKind
from .answers import validate_answer
from .parts import LoopPart
from .scheduler import ReadyQueue
from .stopping import Stop, stop

log = logging.getLogger(__name__)
N = NodeStatus


class TakeOver(LoopPart):
    _queued: ReadyQueue

    @abstractmethod
    def _grow_inherited(self) -> None:
        ...

    def begin(self, event: RunEvent, answered: Mapping[str, JSON], by: str | None = None) -> None:
        """Record why this process took the run over: claim, resume with answers, recovery."""
        if event == RunEvent.RECOVER:
            log.info("run %s: recovering it (its previous owner stopped)", self.run_id)
            self._lose_in_flight()
        self._take_answers(answered, by)
        self.take_sent()
        self.rec.run_event(event, owner=self.env.owner)
        if event == RunEvent.QUEUE:   # left to a worker: whoever claims it next drives it
            self.rec.run = self.rec.run.evolve(lease_owner=None, lease_expires_at=None)
        self._grow_inherited()
        self._candidates = set(self.inst.order)
        self._queued.clear()
        self.rec.checkpoint_if_dirty()
        self.rec.flush(durable=True)

    def questions(self) -> list[Interrupt]:
        """This run's questions as the loop knows them (one just asked may not be committed yet)."""
        return [i for i in self.host.interrupts.values() if i.run_id == self.run_id]

    @abstractmethod
    def wake(self) -> None:
        ...

    def deliver(self, answers: Mapping[str, JSON], by: str | None = None) -> bool:
        """Checked answers to questions this run asked while it goes on with what does not
        wait for them (ADR 0011): each answered instance is due again at once, and the run
        no longer pauses for it. False, and nothing recorded, once the run has begun to end
        or pause (it is answered as a paused run then) or to stop for good."""
        if self.run.status != RunStatus.RUNNING or (self._stop is not None and self._stop.kind != StopKind.INTERRUPT):
            return False
        self._take_answers(answers, by)
        self.rec.checkpoint_if_dirty()
        self.rec.flush(durable=True)   # an answer given is kept, whatever happens to this process next
        self.wake()
        return True

    def take_sent(self) -> bool:
        """Take the answers other processes left in the store for this run's pending questions
        (``CheckpointStore.send_answers``), as ``deliver`` takes those given here; True if one
        was. Read only while a question waits and the run is not stopping for good. Until the
        run's next commit records them they stay in the store, so a crash loses none."""
        if not self.deps.store.durable or (self._stop is not None and self._stop.kind != StopKind.INTERRUPT):
            return False
        pending = {i.id: i for i in self.questions() if i.status == InterruptStatus.PENDING}
        if not pending:
            return False
        sent_answers = self.deps.store.sent_answers(self.run_id)
        if sent_answers and self.deps.store.cancel_request(self.run_id) is not None:
            return False   # a cancel asked for meanwhile wins, whoever drives the run
        taken = False
        for interrupt_id, sent in sent_answers.items():
            question = pending.get(interrupt_id)
            if question is None:
                continue
            try:   # checked by the sender; this process may know another version of its model
                value = validate_answer(self.deps.graphs, question, sent.answer)
            except InvalidAnswer as e:
                log.warning("run %s: the answer left for %s does not fit here: %s", self.run_id, interrupt_id, e)
                continue
            self._take_answers({interrupt_id: value}, sent.by)
            taken = True
        if taken:
            self.rec.checkpoint_if_dirty()
        return taken

    def _take_answers(self, answers: Mapping[str, JSON], by: str | None) -> None:
        """Record checked answers; an interrupted instance answered is due again (one whose
        attempt is still ending goes on once it is recorded, ``Outcomes._record_interrupt``),
        and a pause with no question left is forgotten."""
        for interrupt_id, value in answers.items():
            done = self.host.answer(interrupt_id, value, by)
            if self.rec.statuses[done.node] == N.INTERRUPTED:
                self._node(done.node, NodeEvent.RESUME, interrupt_id=interrupt_id)
                self._candidates.add(done.node)
        if self._stop is not None and self._stop.kind == StopKind.INTERRUPT and \
                N.INTERRUPTED not in self.rec.statuses.values():
            self._stop = None

    def begin_cancel(self, reason: str) -> None:
        """Cancel a run no process is executing (queued, paused, or orphaned by a crash)."""
        if self.run.status == RunStatus.RUNNING:
            self._lose_in_flight()
            self.rec.run_event(RunEvent.RECOVER, owner=self.env.owner)
        self._stop = stop(StopKind.CANCEL, ErrorClass.CANCELLED, reason)

    def _lose_in_flight(self) -> None:
        # RETRYING nodes were waiting, not running: they keep their backoff (see restore)
        for node in list(self.inst.order):
            if self.rec.statuses[node] == N.RUNNING:
                self._node(node, NodeEvent.LOST, reason="the process running it stopped")

    def restore(self, retry_at: Mapping[str, float], stopping: Stop | None) -> None:
        """What a run taken over mid-way was doing: backoffs in progress, and whether it
        had already begun to stop (a failure or cancel waiting for siblings)."""
        self._retry_at.update(retry_at)
        if stopping is not None:
            self._stop = stopping
