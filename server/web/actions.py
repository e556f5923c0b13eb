"""What people do to runs, shared by the pages and the JSON API.

Every action checks the run's state first (a conflict is ``Conflict``, HTTP 409),
lets the Runtime validate the request before it writes anything (``InvalidRequest``,
HTTP 422), and — for actions that drive a run — returns as soon as the run exists,
driving it in the background so the page can follow it live, or, on a server for workers
(``harness serve --workers``) or when asked to, leaving it QUEUED for a worker process.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from runtime import ExecutableGraph, Runtime
from runtime.core.errors import InvalidAnswer, InvalidRequest, NotFound
from runtime.core.jsonvalues import JSON
from runtime.core.records import Interrupt, InterruptStatus, Run
from runtime.core.states import RunStatus
from runtime.engine.answers import validate_answer
from runtime.engine.compensation import CompensationReport
from runtime.history.lineage import compensated, continuations

from . import bodies
from .background import start_in_background
from .services import Conflict, complete, in_thread

log = logging.getLogger(__name__)

Tasks = set[asyncio.Task[None]]

TERMINAL = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)


async def _run(rt: Runtime, run_id: str) -> Run:
    run: Run = await in_thread(lambda: complete(rt.get_run(run_id)))
    return run


def _run_or_checkpoints_run(rt: Runtime, target_id: str) -> Run:
    """The run ``target_id`` names, or the run of the checkpoint it names."""
    try:
        return rt.store.get_run(target_id)
    except NotFound:
        pass
    try:
        checkpoint = rt.store.get_checkpoint(target_id)
    except NotFound:
        raise NotFound(f"no run or checkpoint with id {target_id!r}") from None
    return rt.store.get_run(checkpoint.run_id)


async def fork(rt: Runtime, tasks: Tasks, checkpoint_id: str, patch: Mapping[str, JSON] | None,
               effects: str = "mock", mocks: Mapping[str, JSON] | None = None,
               limits: Mapping[str, Any] | None = None, queue: bool = False) -> str:
    """A new branch from a checkpoint; the patch, mocks and limits are validated before anything
    is written. ``queue`` (always, on a server for workers): created QUEUED for a worker, and
    nothing of it runs here."""
    if effects not in ("mock", "live"):
        raise InvalidRequest(f"effects must be 'mock' or 'live', got {effects!r}")
    if patch is not None and not isinstance(patch, Mapping):
        raise InvalidRequest(f"patch must be an object of state fields, got {type(patch).__name__}")
    await in_thread(rt.store.get_checkpoint, checkpoint_id)   # NotFound before anything else
    if queue or getattr(tasks, "queue", False):
        run = await rt.fork(checkpoint_id, patch, effects=effects, mocks=mocks, queue=True, **(limits or {}))
        return run.id
    return await start_in_background(rt, rt.fork(checkpoint_id, patch, effects=effects, mocks=mocks,
                                                 **(limits or {})), tasks)


async def replay(rt: Runtime, tasks: Tasks, target_id: str, version: str | None = None,
                 mocks: Mapping[str, JSON] | None = None, queue: bool = False) -> str:
    """Re-execute a run (or from a checkpoint) with effects mocked, under the same or another
    registered version of its graph; the report compares it node by node. ``queue`` (always,
    on a server for workers): created QUEUED for a worker, and nothing of it runs here."""
    run = await in_thread(_run_or_checkpoints_run, rt, target_id)
    graph = _version(rt, run, version) if version else None
    if run.status in (RunStatus.RUNNING, RunStatus.QUEUED):
        raise Conflict(f"run {run.id} is {run.status.value}; replay it once it has stopped")
    if queue or getattr(tasks, "queue", False):
        return (await rt.submit_replay(target_id, graph, mocks=mocks)).id
    return await start_in_background(rt, rt.replay(target_id, graph, mocks=mocks), tasks)


def _version(rt: Runtime, run: Run, version: str) -> ExecutableGraph:
    """A registered version of ``run``'s graph, named by its hash or by the ``MODULE:GRAPH``
    it was registered by (as the debugger shows them)."""
    graph = rt.graphs.registered(version)
    if graph is not None:
        return graph
    known = rt.graphs.versions(run.graph_name)
    by_ref = [g for g in known if g.ref == version]
    if by_ref:
        return by_ref[-1]   # the latest registered by that name
    names = ", ".join(f"{g.ref} ({g.version})" if g.ref else g.version for g in known)
    raise InvalidRequest(f"graph version {version!r} is not registered with this server"
                         + (f"; versions of graph {run.graph_name!r} here: {names}" if names else ""))


async def resume(rt: Runtime, tasks: Tasks, run_id: str, *, answers: Mapping[str, JSON] | None = None,
                 limits: Mapping[str, Any] | None = None, by: str | None = None, queue: bool = False) -> str:
    """Continue a failed or cancelled run (a new continuation), start a queued one, recover one
    whose process is gone, or answer questions of a paused run (``answers``, all checked before
    the run moves). ``limits`` replace the inherited ones. Returns the id of the run that goes on."""
    run = await _run(rt, run_id)
    if run.status == RunStatus.SUCCEEDED:
        raise Conflict(f"run {run_id} already succeeded; a succeeded run never changes (fork it instead)")
    if run.status in (RunStatus.FAILED, RunStatus.CANCELLED) and await in_thread(compensated, rt.store, run):
        raise Conflict(f"run {run_id} was compensated (its effects were undone, or may have been): it cannot "
                       f"be continued; fork it instead")
    if run.status in (RunStatus.FAILED, RunStatus.CANCELLED):
        done = await in_thread(continuations, rt.store, run.id)
        if done:   # the state of the run, not the request, is why: as for a succeeded one
            raise Conflict(f"run {run_id} was already continued by {done[-1].id}; resume that run instead")
    if answers is not None and not answers:
        raise InvalidRequest("answers must give at least one {interrupt id: answer}")
    if run.status == RunStatus.INTERRUPTED and answers is None:
        raise Conflict(f"run {run_id} is waiting for answers: give answers={{interrupt id: answer}}, or "
                       f"answer its interrupts one by one")
    if run.status == RunStatus.RUNNING and not rt.orphaned(run) and not answers:
        raise Conflict(f"run {run_id} is running; cancel it or wait for it to finish")
    if answers is not None and run.status not in (RunStatus.INTERRUPTED, RunStatus.RUNNING) and not rt.orphaned(run):
        raise Conflict(f"run {run_id} is {run.status.value}, not waiting for answers: there is nothing to answer")
    if answers:
        await in_thread(check_answers, rt, run_id, answers)
    if queue or getattr(tasks, "queue", False):
        return await _left_to_workers(rt, run_id, answers, by, limits)
    if answers and run.status == RunStatus.RUNNING and not rt.orphaned(run):
        if any(v is not None for v in (limits or {}).values()):   # a limit left out is None
            raise Conflict(f"run {run_id} is running: new limits are given when it has paused or ended")
        return await _answer_running(rt, tasks, run_id, answers, by)
    try:
        return await start_in_background(
            rt, rt.resume(run_id, answers=answers, answered_by=by if answers else None, **(limits or {})), tasks)
    except InvalidAnswer as e:
        if "already answered" in str(e):
            raise Conflict(str(e)) from None
        raise


async def _left_to_workers(rt: Runtime, run_id: str, answers: Mapping[str, JSON] | None, by: str | None,
                           limits: Mapping[str, Any] | None = None) -> str:
    """``resume(queue=True)``: answers recorded (or left for the process driving the run), a
    continuation created, and the run QUEUED for a worker; nothing runs in this server."""
    try:
        run = await rt.resume(run_id, answers=answers, answered_by=by if answers else None, queue=True,
                              **{k: v for k, v in (limits or {}).items() if v is not None})
    except InvalidAnswer as e:
        if "already answered" in str(e) or "already has an answer" in str(e):
            raise Conflict(str(e)) from None
        raise
    return run.id


async def cancel(rt: Runtime, tasks: Tasks, run_id: str, reason: str) -> str:
    run = await _run(rt, run_id)
    if run.status in TERMINAL:
        raise Conflict(f"run {run_id} is {run.status.value}: there is nothing to cancel")
    reason = (reason or "").strip() or "cancelled from the debugger"
    if len(reason) > 500:
        raise InvalidRequest("reason must be at most 500 characters")
    # on a server for workers, a policy's compensation of the cancel is left to one of them
    task = asyncio.get_running_loop().create_task(_cancel(rt, run_id, reason, getattr(tasks, "queue", False)))
    tasks.add(task)
    task.add_done_callback(tasks.discard)
    await asyncio.sleep(0)   # let the request reach the run before answering
    if task.done():   # refused at once (a run whose graph this process cannot load): say why
        task.result()
    return run_id


async def _answer_running(rt: Runtime, tasks: Tasks, run_id: str, answers: Mapping[str, JSON], by: str | None) -> str:
    """Answers to a run that goes on: the task that drives it in this server, or the process
    that drives it elsewhere (through the store), records them and runs on (its page follows
    it live); this call only waits for it to stop."""
    task = asyncio.get_running_loop().create_task(
        _awaited(rt.resume(run_id, answers=answers, answered_by=by)))
    tasks.add(task)
    task.add_done_callback(tasks.discard)
    task.add_done_callback(_told)
    await asyncio.sleep(0)   # the answers are checked and handed over before the first wait
    if task.done():   # refused at once: say why
        _said.add(task)
        try:
            task.result()
        except InvalidAnswer as e:
            if "already answered" in str(e):
                raise Conflict(str(e)) from None
            raise
    return run_id


#: answering tasks whose refusal was the reply itself: not logged again
_said: weakref.WeakSet[asyncio.Task[None]] = weakref.WeakSet()


def _told(task: asyncio.Task[None]) -> None:
    """What went wrong after the reply was sent (the run stopped for good before the answer
    reached it): logged, since nobody awaits the task; the run's page shows how it ended."""
    if not task.cancelled() and task.exception() is not None and task not in _said:
        log.warning("an answer given to a running run was not taken: %s", task.exception())


async def _awaited(call: Awaitable[object]) -> None:
    await call


async def _cancel(rt: Runtime, run_id: str, reason: str, queue: bool) -> None:
    await rt.cancel(run_id, reason, queue=queue)


async def compensate(rt: Runtime, tasks: Tasks, run_id: str, retry_in_doubt: bool = False,
                     queue: bool = False) -> CompensationReport:
    """Undo the run's live effects here, or (``queue``; always, on a server for workers) ask a
    worker to, where the undo functions can be imported."""
    run = await _run(rt, run_id)
    if run.status not in TERMINAL:
        raise Conflict(f"run {run_id} is {run.status.value}; compensate a run once it has ended")
    if queue or getattr(tasks, "queue", False):
        return await rt.compensate(run_id, retry_in_doubt=retry_in_doubt, queue=True)
    return await rt.compensate(run_id, retry_in_doubt=retry_in_doubt)


async def pending_interrupt(rt: Runtime, interrupt_id: str) -> Interrupt:
    found: Interrupt = await in_thread(rt.store.interrupt, interrupt_id)
    return found


def closed(i: Interrupt, run: Run) -> str:
    """Why a question that no longer waits cannot be answered: it was answered, or it
    was closed unanswered when its run ended (a run that ends leaves no question open)."""
    if i.status == InterruptStatus.ANSWERED:
        return f"interrupt {i.id} is answered already: it cannot be answered again"
    ended = "was cancelled" if run.status == RunStatus.CANCELLED else (
        "ended" if run.status in (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.INTERRUPTED)
        else f"ended {run.status.value}")
    return f"interrupt {i.id} was never answered and cannot be answered now: its run {ended} without an answer"


async def answer(rt: Runtime, tasks: Tasks, interrupt_id: str, value: JSON, by: str,
                 also: Sequence[str] = (), queue: bool = False) -> str:
    """Answer one interrupt (and, with the same answer, the questions of the same run in
    ``also``); every answer is validated (against the node's response model when it declared
    one) before the run moves. Returns the run id."""
    found = await pending_interrupt(rt, interrupt_id)
    run = await _run(rt, found.run_id)
    if found.status != InterruptStatus.PENDING:
        raise Conflict(closed(found, run))
    answers = {interrupt_id: value, **{other: value for other in also}}
    await in_thread(check_answers, rt, found.run_id, answers)
    if queue or getattr(tasks, "queue", False):
        return await _left_to_workers(rt, run.id, answers, by)
    if run.status == RunStatus.RUNNING and not rt.orphaned(run):
        return await _answer_running(rt, tasks, run.id, answers, by)
    try:
        return await start_in_background(
            rt, rt.resume(found.run_id, answers=answers, answered_by=by), tasks)
    except InvalidAnswer as e:
        if "already answered" in str(e):
            raise Conflict(str(e)) from None
        raise


class AnswersRefused(InvalidAnswer):
    """Answers refused before anything moved: ``str()`` in words, the response models' own
    errors as ``details`` (each with the question it is about)."""

    def __init__(self, message: str, details: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.details = details


def answer_problems(rt: Runtime, i: Interrupt, value: JSON) -> list[tuple[str, str, dict[str, Any] | None]]:
    """What is wrong with ``value`` as the answer to ``i``, as (field, what it expects, the
    validator's own words) triples (the field is "" for the answer as a whole); none when it
    would be accepted. Field by field against the node's response model, then the runtime's
    own check (already in words)."""
    ref = i.payload.get("response_ref") if isinstance(i.payload, Mapping) else None
    model = rt.graphs.model(ref) if isinstance(ref, str) and ref else None
    if model is not None:
        try:
            model.model_validate(value)
        except ValidationError as e:
            errors = e.errors(include_url=False, include_input=False)
            return [(".".join(map(str, err["loc"])), bodies.expects(err), {"interrupt_id": i.id, **raw})
                    for err, raw in zip(errors, bodies.raw(errors), strict=True)]
    try:
        validate_answer(rt.graphs, i, value)
    except InvalidAnswer as e:
        return [("", str(e), None)]
    return []


def problem_text(i: Interrupt, where: str, message: str) -> str:
    """One bad answer in words: the question (its id and node) and the field."""
    return f"interrupt {i.id} (node {i.node!r}{f', field {where!r}' if where else ''}): {message}"


def check_answers(rt: Runtime, run_id: str, answers: Mapping[str, JSON]) -> None:
    """Every answer to a pending question of the run checked before anything moves, so that
    one refusal names every bad answer at once (``InvalidAnswer``); answers to questions that
    are not pending are left to the runtime, which says why."""
    pending = {i.id: i for i in rt.store.interrupts(run_id, InterruptStatus.PENDING)}
    bad = {k: (pending[k], found) for k, v in answers.items()
           if k in pending and (found := answer_problems(rt, pending[k], v))}
    if bad:
        # with the answers to questions that are not pending, so that one refusal names them all
        unknown = [k for k in answers if k not in pending]
        known = {i.id: i for i in rt.store.interrupts(run_id)} if unknown else {}
        head = "the answer is invalid" if len(answers) == 1 else \
            f"{len(bad) + len(unknown)} of {len(answers)} answers are invalid"
        raise AnswersRefused(f"{head}, and none was recorded: " + "; ".join(
            [problem_text(i, where, message) for i, found in bad.values() for where, message, _ in found]
            + [f"interrupt {k}: already {known[k].status.value}" if k in known
               else f"interrupt {k}: not a question of run {run_id}" for k in unknown]),
            [raw for _, found in bad.values() for _, _, raw in found if raw is not None])


async def export_thread(rt: Runtime, run_id: str) -> dict[str, JSON]:
    run = await _run(rt, run_id)
    busy = await in_thread(lambda: [r for s in (RunStatus.RUNNING, RunStatus.QUEUED)
                                    for r in rt.store.list_runs(s, thread_id=run.thread_id, limit=1)])
    if busy:
        raise Conflict(f"run {busy[0].id} of thread {run.thread_id!r} is {busy[0].status.value}; an export holds "
                       f"stopped runs: export it once it has stopped")
    doc: dict[str, JSON] = await in_thread(lambda: complete(rt.export_thread(run_id)))
    return doc


async def import_thread(rt: Runtime, document: Any, effects: str = "mock") -> list[Run]:
    if effects not in ("mock", "live"):   # before the document: it may be large
        raise InvalidRequest(f"effects must be 'mock' or 'live', got {effects!r}")
    if not isinstance(document, Mapping):
        raise InvalidRequest(f"an exported thread is a JSON object, got {type(document).__name__}")
    runs: list[Run] = await in_thread(lambda: complete(rt.import_thread(document, effects=effects)))
    return runs
