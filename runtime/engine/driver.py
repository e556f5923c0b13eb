"""Taking runs over and driving them: resume (by the status table), continuation,
cancel, and the compensation a run's policy asks for when it ends.

A continuation starts with its parent's usage (tokens, cost, steps), so a run's
budget counts across the chain; ``resume`` may give new limits, which replace the
inherited ones (a continuation) or apply to the same run from now on.

The Runtime facade delegates here; this module is given the store, environment,
slots, graphs and compensation registry (``EngineDeps``), never the facade.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence

from ..core.errors import EndNotRecorded, GraphError, InvalidAnswer, InvalidRequest, LeaseLost, NotFound
from ..core.jsonvalues import JSON
from ..core.records import Checkpoint, CheckpointSource, EffectsMode, Interrupt, InterruptStatus, Run, RunKind
from ..core.states import RESUME_PATHS, TERMINAL_RUN, ResumePath, RunEvent, RunStatus
from ..graph import ExecutableGraph
from ..history.creation import branch_statuses, inherited_of, insert_run, renew_limits
from ..history.lineage import compensated, continuations, head
from ..history.state import state_json
from .answers import MISSING, match_answers, validate_answers
from .compensation import ask_worker, compensate, left_to_undo, local_undos
from .decisions import used_up, with_limits
from .deps import EngineDeps
from .leases import lease_expired, orphaned
from .loop import RunLoop
from .rehydrate import load_loop
from .streaming import Mirror
from .unattended import WAITING, cancel_waiting

log = logging.getLogger(__name__)


class Driver:
    def __init__(self, deps: EngineDeps):
        self.deps = deps
        self.store, self.env = deps.store, deps.env

    def driven_here(self, run_id: str) -> bool:
        return self.deps.slots.driving(run_id) is not None

    def orphaned(self, run: Run) -> bool:
        return orphaned(run, self.env, driven_here=self.driven_here(run.id))

    def lease_expired(self, run: Run) -> bool:
        return lease_expired(run, self.env, driven_here=self.driven_here(run.id))

    # ------------------------------------------------------------------ driving

    async def drive(self, run: Run, graph: ExecutableGraph | None = None,
                    fresh: Checkpoint | None = None) -> Run:
        return await self.run_loop(load_loop(self.deps, run, graph, fresh))

    async def run_loop(self, loop: RunLoop, undo_here: bool = True) -> Run:
        """Drive a loop; remember the state it stopped at (a thread's next turn starts there),
        and apply the run's policy for how it ended, however it ended (``undo_here`` False:
        its compensation is left to a worker)."""
        try:
            run = await loop.drive()
        except (LeaseLost, EndNotRecorded):
            # another process drives the run now, or will once resumed: its end, and its
            # policy, are that one's
            raise
        except (asyncio.CancelledError, Exception):
            # the caller stopped waiting (a stream's reader left), or the driver itself failed:
            # the run ended CANCELLED or FAILED all the same, and its policy for that end holds;
            # then the cancel or the error goes on (a failing compensation is only logged)
            try:
                await self.finished(self.store.get_run(loop.run_id), undo_here)
            except Exception:
                log.exception("run %s: could not compensate it as its policy asks", loop.run_id)
            raise
        self.deps.graphs.remember_state(loop.rec.head.id, loop.state.head_state())
        return await self.finished(run, undo_here)

    async def finished(self, run: Run, undo_here: bool = True) -> Run:
        """A run's opt-in policy: compensate its effects when it ends failed or cancelled
        (``undo_here`` False: ask a worker to, where the undo functions are)."""
        if run.status.value in (run.options.get("compensate_on") or ()) and not run.effects_elsewhere:
            # an undo only the process that ran it holds (a lambda): no worker could make an ask,
            # which would wait for ever; it is made here instead, as far as this process can
            if not undo_here and not local_undos(self.deps, left_to_undo(self.store, run))[0]:
                ask_worker(self.deps, run.id)
                return run
            report = await compensate(self.deps, run.id)
            run = self.store.get_run(run.id)
            if not report.complete:   # an undo this process cannot import or run: say so, not nothing
                left = [f"{s.node} {s.name} #{s.occurrence}: {s.status.value}" for s in report.not_done]
                log.warning("run %s ended %s and its policy undoes its effects, but %d were not undone (%s); "
                            "compensate it where their undo functions can be imported (harness compensate %s)",
                            run.id, run.status.value, len(left), "; ".join(left), run.id)
        return run

    def take_lease(self, run: Run, event: RunEvent, answered: Mapping[str, JSON] | None = None,
                   limits: Mapping[str, JSON] | None = None, by: str | None = None) -> RunLoop:
        """Acquire the run's lease (bumping its fencing token), then record why; new
        ``limits`` apply from now on (the run row is written with them as the loop begins)."""
        # the code first: a process that cannot drive the run must leave its lease to the owner
        graph = self.deps.graphs.run_graph(run)
        self._check_not_being_taken(run)
        run = self.store.acquire_lease(run.id, self.env.owner, self.env.now() + self.env.lease_ttl, run.fence)
        if limits:
            run = run.evolve(limits=with_limits(run.limits, limits, self.env.now()))
        loop = load_loop(self.deps, run, graph)
        loop.begin(event, answered or {}, by)
        return loop

    def _check_not_being_taken(self, run: Run) -> None:
        """Refuse a run another live process holds the lease of while it is not yet RUNNING:
        that process is between taking its lease and recording why (a claim, an answer). Its
        fence was read here, so taking the lease now would succeed and cut that process off
        mid-way, an effect it started left in doubt."""
        if run.status != RunStatus.RUNNING and self.held_elsewhere(run):
            raise LeaseLost(f"run {run.id} is being taken over by {run.lease_owner}")

    # ------------------------------------------------------------------ resume

    async def resume(self, run_id: str, answer: JSON = MISSING, answers: Mapping[str, JSON] | None = None,
                     limits: Mapping[str, JSON] | None = None, by: str | None = None, queue: bool = False) -> Run:
        """``limits`` (validated by the caller): replace the inherited ones of a
        continuation, or apply to this run from now on. ``queue``: leave what goes on to a
        worker (``queued``) instead of driving it here."""
        run = self.store.get_run(run_id)
        answering = answer is not MISSING or bool(answers)
        path = RESUME_PATHS[run.status]
        if queue:
            return await self.queued(run, path, answering, answer, answers, limits, by)
        if path == ResumePath.RECOVER and answering and self.orphaned(run):
            # Its process died while a question was open: recover it (it pauses again), then
            # answer. The answers are for the questions the caller saw: bound to them and
            # checked now, before recovery changes anything, so that an effect cut off by the
            # crash (a question of its own, asked by recovery) leaves them as they were.
            asked = self.store.interrupts(run_id)
            if not any(i.status == InterruptStatus.PENDING for i in asked):
                raise InvalidRequest(f"run {run_id}'s process stopped with no question open: there is nothing "
                                     f"to answer; resume it without an answer to recover it")
            given = match_answers(run, asked, answer, answers)
            validate_answers(self.deps.graphs, given)
            answer, answers = MISSING, {i.id: value for i, value in given}
            # new limits apply from here on: to the recovery too (an expired deadline would fail it)
            run = await self.run_loop(self.take_lease(run, RunEvent.RECOVER, limits=limits))
            path = RESUME_PATHS[run.status]
            limits = None
        if path == ResumePath.ANSWER:
            return await self.answer(run, answer, answers, limits, by)
        if answering:
            loop = self.deps.slots.driving(run_id)
            if isinstance(loop, RunLoop) and run.status == RunStatus.RUNNING:
                return await self.deliver(loop, answer, answers, limits, by)
            questions = self.store.interrupts(run_id)
            waiting = [i.id for i in questions if i.status == InterruptStatus.PENDING]
            if waiting and run.status == RunStatus.RUNNING and self.held_elsewhere(run):
                return await self.send(run, questions, answer, answers, limits, by)
            if waiting and run.status == RunStatus.RUNNING:
                raise InvalidRequest(still_running(run_id, waiting))
            if any(i.status == InterruptStatus.ANSWERED for i in questions):
                # most likely another caller answered first
                raise InvalidAnswer(f"run {run_id} has no pending interrupt: it was already answered "
                                    f"(the run is now {run.status.value})")
            raise InvalidRequest(f"run {run_id} is {run.status.value}, not interrupted: there is nothing to answer")
        if path == ResumePath.CONTINUE:
            new, first, graph = self.continuation(run, limits)
            return await self.drive(new, graph, first)
        if path == ResumePath.REFUSE:
            raise InvalidRequest(f"run {run_id} already succeeded; a succeeded run never changes")
        if path == ResumePath.CLAIM:
            return await self.run_loop(self.take_lease(run, RunEvent.CLAIM, limits=limits))
        if self.driven_here(run_id):
            raise_busy(run, "in this process")
        if not self.lease_expired(run):
            raise_busy(run, f"in process {run.lease_owner} until its lease expires")
        log.info("run %s: its process stopped while running; recovering it here", run_id)
        return await self.run_loop(self.take_lease(run, RunEvent.RECOVER, limits=limits))

    async def answer(self, run: Run, answer: JSON, answers: Mapping[str, JSON] | None,
                     limits: Mapping[str, JSON] | None = None, by: str | None = None,
                     event: RunEvent = RunEvent.RESUME) -> Run:
        given = match_answers(run, self.store.interrupts(run.id), answer, answers)
        checked = validate_answers(self.deps.graphs, given)
        try:
            loop = self.take_lease(run, event, answered=checked, limits=limits, by=by)
        except LeaseLost:
            raise InvalidAnswer(f"run {run.id} was already answered by another caller") from None
        if event == RunEvent.QUEUE:   # recorded, the run QUEUED without a lease: a worker's now
            loop.rec.close()
            return loop.run
        return await self.run_loop(loop)

    async def queued(self, run: Run, path: ResumePath, answering: bool, answer: JSON,
                     answers: Mapping[str, JSON] | None, limits: Mapping[str, JSON] | None,
                     by: str | None) -> Run:
        """``resume(..., queue=True)``: what goes on is a worker's (``harness worker``), and this
        call returns at once. A paused run's answers are recorded and the run QUEUED again; a
        failed or cancelled run's continuation is created QUEUED; answers to a run a process
        drives are left for it in the store, and the call returns once it took them (within
        its heartbeat), or at once when its process is gone (the worker that recovers it takes
        them from a durable store). A queued run, or one running without a process, is
        returned as it is."""
        if path == ResumePath.ANSWER:
            return await self.answer(run, answer, answers, limits, by, event=RunEvent.QUEUE)
        if path == ResumePath.CONTINUE and not answering:
            return self.continuation(run, limits, claim=False)[0]
        if path == ResumePath.REFUSE:
            raise InvalidRequest(f"run {run.id} already succeeded; a succeeded run never changes")
        if answering and run.status == RunStatus.RUNNING and (self.store.durable or self.held_elsewhere(run)):
            checked = self._leave(run, self.store.interrupts(run.id), answer, answers, limits, by)
            return await self._until_taken(run.id, checked, by)
        if answering or limits:
            raise InvalidRequest(f"run {run.id} is {run.status.value}: queueing it takes answers only when it is "
                                 f"paused or driven by a live process, and new limits only when it is paused, "
                                 f"failed or cancelled")
        return run

    async def deliver(self, loop: RunLoop, answer: JSON, answers: Mapping[str, JSON] | None,
                      limits: Mapping[str, JSON] | None, by: str | None) -> Run:
        """Answer questions of a run this process drives while it still runs other branches:
        the answered nodes go on at once; returns the run once it next pauses or ends."""
        if limits:
            raise InvalidRequest(f"run {loop.run_id} is running: new limits are given when it has paused or ended")
        given = match_answers(loop.run, loop.questions(), answer, answers)
        checked = validate_answers(self.deps.graphs, given)
        # the loop's commits go to its own caller's stream: a stream of this call is given them too
        mirror = Mirror(self.store, loop.run_id, loop.rec.seq)
        if not loop.deliver(checked, by):
            await mirror.during(loop.stopped.wait())   # it was pausing or ending: answered as a paused run
            return await self.resume(loop.run_id, answers=checked, by=by)
        await mirror.during(loop.stopped.wait())
        return self.store.get_run(loop.run_id)

    async def send(self, run: Run, questions: Sequence[Interrupt], answer: JSON, answers: Mapping[str, JSON] | None,
                   limits: Mapping[str, JSON] | None, by: str | None) -> Run:
        """Answer questions of a run another process drives while it still runs other branches:
        the checked answers are left in the store, and that process takes them within a
        heartbeat, or as it would pause. Returns the run once it next pauses or ends; one that
        paused, or whose process stopped, before taking them is answered here."""
        checked = self._leave(run, questions, answer, answers, limits, by)
        mirror = Mirror(self.store, run.id, run.event_seq)   # what it does, for a stream of this call
        while True:
            await mirror.during(self.wait_terminal(run.id, float("inf")))
            run = self.store.get_run(run.id)
            left = {i.id: checked[i.id] for i in self.store.interrupts(run.id)
                    if i.id in checked and i.status == InterruptStatus.PENDING}
            if not left or run.status in TERMINAL_RUN:
                return run
            try:
                if run.status == RunStatus.RUNNING:   # its process died: recovering it takes what was left
                    return await self.resume(run.id)
                return await self.resume(run.id, answers=left, by=by)
            except (InvalidAnswer, InvalidRequest):
                if not self.held_elsewhere(self.store.get_run(run.id)):
                    raise
                # another caller took the run over first: its process takes these from the store

    def _leave(self, run: Run, questions: Sequence[Interrupt], answer: JSON, answers: Mapping[str, JSON] | None,
               limits: Mapping[str, JSON] | None, by: str | None) -> dict[str, JSON]:
        """Check answers to a run another process drives and leave them in the store for it."""
        if limits:
            raise InvalidRequest(f"run {run.id} is running: new limits are given when it has paused or ended")
        given = match_answers(run, questions, answer, answers)
        checked = validate_answers(self.deps.graphs, given)
        if not self.store.send_answers(run.id, checked, by, self.env.now()):
            raise InvalidAnswer(f"run {run.id}: interrupt {', '.join(checked)} was already answered, or another "
                                f"caller sent an answer to it that the process driving the run has not taken yet")
        return checked

    async def _until_taken(self, run_id: str, sent: Mapping[str, JSON], by: str | None) -> Run:
        """Answers left for the process driving a run: wait until it takes them (within its
        heartbeat). One that paused before it could (the answers came between its last look
        and its pause) is answered here and left QUEUED, so no answer waits on a paused run."""
        step = 0.02
        while True:
            run = self.store.get_run(run_id)
            left = {i.id: sent[i.id] for i in self.store.interrupts(run_id)
                    if i.id in sent and i.status == InterruptStatus.PENDING}
            if not left or run.status in TERMINAL_RUN:
                return run
            if run.status == RunStatus.INTERRUPTED and not self.held_elsewhere(run):
                return await self.answer(run, MISSING, left, None, by, event=RunEvent.QUEUE)
            if run.status == RunStatus.RUNNING and not self.held_elsewhere(run):
                return run   # its process died: whoever recovers it (a worker) takes them
            await asyncio.sleep(step)
            step = min(step * 1.25, self.env.heartbeat / 4)

    def continuation(self, parent: Run, limits: Mapping[str, JSON] | None = None, claim: bool = True
                     ) -> tuple[Run, Checkpoint, ExecutableGraph]:
        """A new run in the thread continuing a failed or cancelled one from its last
        checkpoint, with its parent's usage so far (and limits, unless ``limits`` replace them)."""
        graphs = self.deps.graphs
        # the code the parent ran with here first: a branch given code this Runtime never registered
        graph = graphs.run_graph(parent)
        self._check_not_continued(parent)
        if compensated(self.store, parent):
            raise InvalidRequest(f"run {parent.id} was compensated (its effects were undone, or may have "
                                 f"been); it cannot be continued; fork it to try again")
        now = self.env.now()
        limits = with_limits(renew_limits(parent.limits, now), limits or {}, now)
        if (spent := used_up(limits, parent.usage, parent.error)) is not None:   # it would fail before any node: nothing made
            raise InvalidRequest(f"run {parent.id} has used what its limits allow ({spent}): a continuation "
                                 f"could start nothing; resume it giving higher limits")
        try:  # claiming the parent's fence makes a concurrent second resume fail here
            self.store.acquire_lease(parent.id, self.env.owner, now, parent.fence)
        except LeaseLost:
            raise InvalidRequest(f"run {parent.id} is being continued by another caller") from None
        self._check_not_continued(parent)
        last = head(self.store, parent.id)
        statuses = branch_statuses(last.node_states)
        # the parent's version: the same structure (recorded before versions named reducers, an older name for it)
        run = Run(id=self.env.ids.new("run"), thread_id=parent.thread_id, graph_name=graph.name,
                  graph_version=parent.graph_version, status=RunStatus.QUEUED, kind=RunKind.CONTINUATION,
                  input=parent.input, created_at=now, updated_at=now, parent_run_id=parent.id,
                  base_checkpoint_id=last.id,
                  limits=limits,
                  usage=dict(parent.usage), max_concurrency=parent.max_concurrency,
                  options=continued_options(parent))
        graphs.inherit_run_graph(parent.id, run.id, graph)
        run, first = insert_run(self.store, self.env, run, statuses, snapshot=state_json(self.store, graphs, last),
                                claim=claim, source=CheckpointSource.CONTINUATION, inherited=inherited_of(statuses))
        return run, first, graphs.run_graph(run)

    def _check_not_continued(self, parent: Run) -> None:
        done = continuations(self.store, parent.id)
        if done:
            raise InvalidRequest(f"run {parent.id} was already continued by {done[-1].id}; "
                                 f"resume that run instead")
        later = [c.id for c in self.store.child_runs(parent.id) if c.kind == RunKind.MAIN]
        if later:  # its continuation would become the thread's latest run and drop that turn
            raise InvalidRequest(f"run {parent.id} was followed by turn {later[-1]} of thread {parent.thread_id}; "
                                 f"continuing it would drop that turn from the conversation: fork it instead")

    # ------------------------------------------------------------------ cancel

    async def cancel(self, run_id: str, reason: str, wait: float, undo_here: bool = True) -> Run:
        run = self.store.get_run(run_id)
        if run.status in TERMINAL_RUN:
            raise InvalidRequest(f"run {run_id} is already {run.status.value}; terminal runs never change")
        loop = self.deps.slots.driving(run_id)
        if loop is not None:
            loop.request_cancel(reason)
            return await self.wait_terminal(run_id, wait)
        if self.held_elsewhere(run):
            self.store.request_cancel(run_id, reason)
            run = await self.wait_terminal(run_id, wait)
            if run.status in TERMINAL_RUN or self.held_elsewhere(run):
                return run
            # it paused (or its owner died) before seeing the request: cancel it here
        try:
            graph = self.deps.graphs.run_graph(run)   # before the lease, as in take_lease
        except (NotFound, InvalidRequest, GraphError):
            if run.status not in WAITING:   # a run stopped mid-step must be taken over by its code
                raise
            # nothing in flight, so no code to run: what ending it writes needs only its records
            self._check_not_being_taken(run)
            return await self.finished(cancel_waiting(self.deps, run, reason), undo_here)
        self._check_not_being_taken(run)
        run = self.store.acquire_lease(run.id, self.env.owner, self.env.now() + self.env.lease_ttl, run.fence)
        loop = load_loop(self.deps, run, graph)
        loop.begin_cancel(reason)
        return await self.run_loop(loop, undo_here)

    def held_elsewhere(self, run: Run) -> bool:
        """Another live process drives the run, or is taking it over (claiming, answering)."""
        return run.status not in TERMINAL_RUN and run.lease_owner is not None and not self.lease_expired(run)

    async def wait_terminal(self, run_id: str, wait: float) -> Run:
        """Poll until no other process holds the run (it ended, paused or its process
        died), or ``wait`` seconds pass."""
        step, waited = 0.02, 0.0
        while True:
            run = self.store.get_run(run_id)
            if not self.held_elsewhere(run) or waited >= wait:
                return run
            await asyncio.sleep(step)
            waited += step
            step = min(step * 1.25, self.env.heartbeat / 4)   # a long run is not read 50 times a second


def continued_options(parent: Run) -> Mapping[str, JSON]:
    """A continuation's options: its parent's. One of a run whose effects happened in another
    store goes on mocked, as its parent would have, and is not marked imported: what it does
    here (an effect a person lets run live) is this store's, and can be undone here."""
    if not parent.effects_elsewhere:
        return parent.options
    return {**{k: v for k, v in parent.options.items() if k != "imported"}, "effects": EffectsMode.MOCK.value}


def still_running(run_id: str, asked: Sequence[str]) -> str:
    """Why a question a run driven by another process asked cannot be answered yet (ADR 0011);
    the process driving it takes answers at once."""
    return (f"run {run_id} is driven by another process, which still runs what does not wait for an "
            f"answer; the run pauses for {', '.join(asked)} once nothing else can run, and can be answered then")


def raise_busy(run: Run, where: str) -> None:
    raise InvalidRequest(f"run {run.id} is running {where}; cancel it or wait for it to finish")
