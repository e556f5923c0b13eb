"""The effect journal protocol: how one ``ctx.effect(...)`` call is decided and recorded.

An effect's identity is (node, name, occurrence within the attempt). Its journal
gets STARTED before ``fn`` runs (forced to disk first: the output-commit rule) and
SUCCEEDED or FAILED after. What a later execution does with an identity:

==================  ===========================================================
latest entry        decision
==================  ===========================================================
none / FAILED       call ``fn`` (a failed effect may be tried again)
SUCCEEDED / MOCKED  return the recorded result; ``fn`` is not called
STARTED only        in doubt: call again with the same key if ``idempotent``,
                    else interrupt the run for a person (result / retry / abort)
==================  ===========================================================

In a run whose effects are mocked (forks by default, replays always) an identity
with nothing of its own is looked up in the *source lineage's* journal (the runs
the fork or replay came from): a record with the same request is served and
journaled as MOCKED, linked to it. With no such record nothing is executed
silently: a ``mocks`` entry for the name is served, or the run pauses with an
*unrecorded effect* interrupt (answer: mock a result / allow live / abort).
A replay, which exists to compare, serves the recorded result of the same
identity even when the request changed, and its report shows the change.

Usage an effect reports with ``info.usage(tokens=, cost=)`` belongs to the effect:
it counts against the run's budget (which holds across a run's continuations) only
when ``fn`` really runs, journaled or not (no JSON form, a deadline). A result served
from the journal, or a mock, was paid for once already (or never): it counts nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol

from ..core.errors import (
    AttemptCancelled,
    DeadlineExceeded,
    ErrorClass,
    InvalidInputError,
    LimitExceeded,
    NodeError,
)
from ..core.jsonvalues import JSON, json_equal, to_json
from ..core.records import EffectsMode, EffectStatus, Interrupt, InterruptKind, JournalEntry
from .effect_answers import InDoubtAnswer, UnrecordedAnswer, validate_in_doubt_answer, validate_unrecorded_answer
from .identity import occurrence_of
from .questions import unrecorded_question
from .scope import AttemptScope

log = logging.getLogger(__name__)


def effect_key(scope: str, node: str, name: str, occurrence: int) -> str:
    """Stable idempotency key: the same for every re-execution in one lineage."""
    raw = f"{scope}/{node}/{name}/{occurrence}".encode()
    return "eff_" + hashlib.sha256(raw).hexdigest()[:24]


@dataclass(frozen=True, slots=True)
class EffectInfo:
    """Passed to an effect function that takes one argument."""

    key: str
    name: str
    request: JSON
    deadline: float | None
    attempt: int
    #: the effect's recorded result; set only when a compensation is called
    result: JSON = None
    #: counts reported usage against the run's budget; None for a compensation (its run has ended)
    meter: Callable[[int, float], None] | None = field(default=None, repr=False, compare=False)

    def usage(self, tokens: int = 0, cost: float = 0.0) -> None:
        """Report what this call of the effect used (a model call's tokens and cost).

        Counted once: a later execution that is served the recorded result does not
        call the function, so nothing is counted again. Never raises for the budget:
        the result of a call that was paid for is recorded, and the node then stops
        with ``limit_exceeded`` once the effect returns. Safe from a worker thread.
        A compensation's usage is not counted (its run has ended)."""
        check_usage(f"effect {self.name!r}: usage", tokens, cost)
        if self.meter is not None:
            self.meter(tokens, float(cost))


def check_usage(what: str, tokens: object, cost: object) -> None:
    """Reported usage is whole tokens and a finite cost, neither below 0: anything else
    would lower the run's usage (or make it NaN) and so defeat its budget."""
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise InvalidInputError(f"{what} tokens must be a whole number of at least 0, got {tokens!r}")
    if isinstance(cost, bool) or not isinstance(cost, (int, float)) or not math.isfinite(cost) or cost < 0:
        raise InvalidInputError(f"{what} cost must be a finite number of at least 0, got {cost!r}")


class InDoubtEffectError(NodeError):
    error_class = ErrorClass.IN_DOUBT_EFFECT


class UnrecordedEffectError(NodeError):
    error_class = ErrorClass.UNRECORDED_EFFECT


class EffectDivergence(NodeError):
    """Re-execution asked for a recorded effect with a different request."""

    error_class = ErrorClass.INTERNAL

    def __init__(self, node: str, name: str, occurrence: int, expected: JSON, recorded: JSON):
        self.expected, self.recorded = expected, recorded
        super().__init__(
            f"node {node!r} effect {name!r} #{occurrence}: request {expected!r} differs from the recorded "
            f"request {recorded!r} and from every other recorded call of that name: the node does not make "
            f"the calls it made (a request holding the time or a random id, say); keep requests to what the "
            f"call depends on, or fork from the last checkpoint to start the node afresh"
        )


class JournalHost(Protocol):
    """What the run loop offers the effect protocol (all called on the loop thread)."""

    key_scope: str
    effects_mode: EffectsMode
    #: replay: serve the recorded result of an identity whose request changed (and report it)
    serve_changed: bool
    #: why the run's token/cost budget is exhausted, once it is
    over_budget: str | None

    def source_entry(self, node: str, name: str, occurrence: int, request: JSON) -> JournalEntry | None:
        """The source lineage's record of this identity: one with this request if any, else any."""
    def source_unserved(self, node: str, name: str, occurrence: int) -> JournalEntry | None:
        """The source lineage's last entry of this identity when it has no result to serve:
        started with no recorded outcome, or failed."""
    def mock_result(self, name: str) -> tuple[bool, JSON]: ...
    def compensation_ref(self, key: str, fn: Callable[..., Any] | None) -> str | None: ...
    def journal_latest(self, node: str, name: str, occurrence: int) -> JournalEntry | None: ...
    #: (node, name, occurrence) -> the thread of a sync effect still running (``keep_running``)
    running_effects: dict[tuple[str, str, int], asyncio.Future[Any]]
    def keep_running(self, ident: tuple[str, str, int], thread: asyncio.Future[Any]) -> None: ...
    def record_effect(self, entry: JournalEntry, durable: bool) -> None: ...
    def find_interrupt(self, node: str, slot: str, kind: InterruptKind,
                       accepts: Callable[[JSON], bool] | None = None) -> Interrupt | None: ...
    def raise_interrupt(self, scope: AttemptScope, kind: InterruptKind, payload: JSON, *,
                        slot: str, response_schema: JSON = None,
                        response_ref: str | None = None) -> NoReturn: ...
    def now(self) -> float: ...
    def count_usage(self, scope: AttemptScope, tokens: int, cost: float) -> str | None:
        """Add usage (from any thread); why the budget is now exhausted, or None."""
    def recording(self) -> bool:
        """Whether the run still records (it has not ended, or been abandoned by its driver)."""
    def cancelling(self) -> bool:
        """Whether the run is stopping because it was cancelled."""


async def perform_effect(host: JournalHost, scope: AttemptScope, name: str,
                         fn: Callable[..., Any], request: JSON, key: str | None,
                         idempotent: bool, compensate: Callable[..., Any] | None = None) -> JSON:
    node, attempt = scope.node, scope.attempt
    if not host.recording():   # code of a node went on after its run ended: neither start nor serve
        raise AttemptCancelled(f"the run stopped before effect {name!r} could start")
    req = to_json(request, f"effect {name!r} request")
    occurrence = occurrence_of(host, scope, name, req, key)
    key = key or effect_key(host.key_scope, node, name, occurrence)
    undo = host.compensation_ref(key, compensate)
    running = host.running_effects.get((node, name, occurrence))
    if running is not None and not running.done():
        # an earlier attempt was stopped (its timeout) while this call's thread ran on: its
        # outcome is recorded as the thread ends, worth a wait rather than a question — but
        # not all of this attempt's time (or without end): it must still be able to ask
        left = scope.remaining()
        await asyncio.wait({running}, timeout=CANCEL_GRACE if left is None else max(0.0, left / 2))
    latest = host.journal_latest(node, name, occurrence)
    if latest is not None and latest.status in (EffectStatus.SUCCEEDED, EffectStatus.MOCKED):
        if not json_equal(latest.request, req):
            raise EffectDivergence(node, name, occurrence, req, latest.request)
        return latest.result
    if latest is not None and latest.status == EffectStatus.STARTED and not idempotent:
        # bound to this STARTED entry: an answer settles it alone, never a later doubt
        slot = f"effect:{name}#{occurrence}@{latest.run_id}/{latest.attempt}"
        settled = host.find_interrupt(node, slot, InterruptKind.IN_DOUBT)
        if settled is None or settled.answer is None:
            host.raise_interrupt(scope, InterruptKind.IN_DOUBT, {
                "effect": name, "occurrence": occurrence, "key": latest.key, "request": latest.request,
                "question": "This effect started but its outcome was never recorded (its attempt was "
                            "stopped while it ran: a timeout, a cancel or a crash); did it happen? (An effect "
                            "safe to call again with its key can say idempotent=True: it is then retried "
                            "without asking.)",
                "answers": ["result", "retry", "abort"],
            }, slot=slot, response_schema=InDoubtAnswer.model_json_schema())
        decision = validate_in_doubt_answer(settled.answer)
        if decision.action == "abort":
            raise InDoubtEffectError(f"effect {name!r} was in doubt and the run was told to abort")
        if decision.action == "result":
            host.record_effect(JournalEntry(
                run_id=scope.run_id, node=node, name=name, occurrence=occurrence, attempt=attempt,
                key=latest.key, status=EffectStatus.SUCCEEDED, request=req,
                result=to_json(decision.result, "in-doubt result"), at=host.now(),
                compensate=undo or latest.compensate,
            ), durable=False)
            return decision.result
        key = latest.key  # retry: same key, so the external system can deduplicate
    elif latest is None or latest.status == EffectStatus.FAILED:
        if host.effects_mode == EffectsMode.MOCK:
            served = _mocked(host, scope, name, occurrence, req, key)
            if served is not _LIVE:
                return served

    remaining = scope.remaining()
    if remaining is not None and remaining <= 0:  # never started: nothing can be in doubt
        raise DeadlineExceeded(f"the deadline passed before effect {name!r} could start")
    if host.over_budget is not None:  # spend nothing more on a run that is out of budget
        raise LimitExceeded(f"{host.over_budget}; effect {name!r} was not started")
    started = JournalEntry(run_id=scope.run_id, node=node, name=name, occurrence=occurrence,
                           attempt=attempt, key=key, status=EffectStatus.STARTED, request=req,
                           at=host.now(), compensate=undo)
    host.record_effect(started, durable=True)
    exceeded: list[str] = []

    def meter(tokens: int, cost: float) -> None:
        over = host.count_usage(scope, tokens, cost)
        if over is not None:
            exceeded.append(over)

    info = EffectInfo(key=key, name=name, request=req, deadline=scope.deadline, attempt=attempt, meter=meter)

    def record(result: Any = None, error: BaseException | None = None) -> JSON:
        """Journal how the call ended; the result as recorded (``NodeError`` when it has no
        JSON form: the entry then stays STARTED)."""
        if error is not None:
            host.record_effect(_outcome(started, EffectStatus.FAILED, host.now(),
                                        error=f"{type(error).__name__}: {error}"), durable=False)
            return None
        result_json = to_json(result, f"effect {name!r} result")
        host.record_effect(_outcome(started, EffectStatus.SUCCEEDED, host.now(), result=result_json),
                           durable=False)
        return result_json

    def record_late(thread: asyncio.Future[Any]) -> None:
        # The attempt was stopped (its run cancelled, a deadline, the node's timeout), but the
        # sync effect's thread finished: its outcome is known. Recorded, it is served to the
        # retry or whoever continues the run instead of becoming a question.
        error = thread.exception()
        try:
            if error is not None:
                record(error=error)
            else:
                record(thread.result())
        except NodeError:
            pass   # no JSON form (a coroutine to await, say): left STARTED, as without the cancel
        except Exception:   # called back as the thread ends: nobody awaits it
            log.exception("effect %r finished after its attempt stopped; its outcome was not recorded", name)

    try:
        result = await call_effect_fn(fn, info, scope.remaining(), record_late, host.cancelling,
                                      on_thread=lambda thread: host.keep_running((node, name, occurrence), thread))
    except (asyncio.CancelledError, TimeoutError):
        # Outcome unknown (unless ``record_late`` had it): the entry stays STARTED, so
        # recovery treats it as in doubt.
        raise
    except Exception as e:
        record(error=e)
        if exceeded:  # what it spent ends the run, whatever went wrong after
            raise LimitExceeded(f"{exceeded[-1]} (then effect {name!r} failed: {type(e).__name__}: {e})") from e
        raise
    result_json = record(result)
    if exceeded:  # recorded first: a continuation with a larger budget is served this result
        raise LimitExceeded(exceeded[-1])
    return result_json


_LIVE: Any = object()


def _mocked(host: JournalHost, scope: AttemptScope, name: str, occurrence: int, req: JSON,
            key: str) -> JSON:
    """Serve a mocked effect, or return ``_LIVE`` when a person allowed it to run for real."""
    node = scope.node

    def serve(result: JSON, source: str, entry_key: str) -> JSON:
        host.record_effect(JournalEntry(
            run_id=scope.run_id, node=node, name=name, occurrence=occurrence, attempt=scope.attempt,
            key=entry_key, status=EffectStatus.MOCKED, request=req, result=result, at=host.now(),
            source=source), durable=False)
        return result

    recorded = host.source_entry(node, name, occurrence, req)
    if recorded is not None and (json_equal(recorded.request, req) or host.serve_changed):
        return serve(recorded.result, f"run:{recorded.run_id}", recorded.key)
    found, value = host.mock_result(name)
    if found:
        return serve(to_json(value, f"mock for effect {name!r}"), "mocks", key)
    slot = f"unrecorded:{name}#{occurrence}"
    settled = host.find_interrupt(node, slot, InterruptKind.UNRECORDED)
    if settled is None or settled.answer is None:
        unserved = host.source_unserved(node, name, occurrence) if recorded is None else None
        payload = unrecorded_question(name, occurrence, req, recorded, unserved)
        host.raise_interrupt(scope, InterruptKind.UNRECORDED, payload,
                             slot=slot, response_schema=UnrecordedAnswer.model_json_schema())
    decision = validate_unrecorded_answer(settled.answer)
    if decision.action == "abort":
        raise UnrecordedEffectError(f"effect {name!r} had no recorded result and the branch was told to abort")
    if decision.action == "mock":
        return serve(to_json(decision.result, "mock result"), f"answer:{settled.id}", key)
    return _LIVE


def _outcome(started: JournalEntry, status: EffectStatus, at: float, *, result: JSON = None,
             error: str | None = None) -> JournalEntry:
    return JournalEntry(run_id=started.run_id, node=started.node, name=started.name,
                        occurrence=started.occurrence, attempt=started.attempt, key=started.key,
                        status=status, request=started.request, result=result, error=error, at=at,
                        compensate=started.compensate)


#: how long a cancel waits for a sync effect's thread to finish, so that its outcome is
#: recorded rather than left in doubt; a thread still running then is given up on
CANCEL_GRACE = 5.0


async def _outlive_cancel(thread: asyncio.Future[Any], on_late: Callable[[asyncio.Future[Any]], None],
                          cancelling: Callable[[], bool]) -> Any:
    """Wait for a sync effect's thread. A thread cannot be stopped: when the run is being
    cancelled, wait up to ``CANCEL_GRACE`` for it and hand its outcome to ``on_late`` before
    the cancel goes on. Any other cancellation (a deadline, the node's own timeout) and a
    second cancel go on at once, leaving the outcome unknown."""
    try:
        return await asyncio.shield(thread)
    except asyncio.CancelledError:
        if thread.cancelled():
            raise
        if not cancelling():   # the thread goes on; its outcome is kept once it has one
            thread.add_done_callback(lambda t: None if t.cancelled() else on_late(t))
            raise
        done, _ = await asyncio.wait({thread}, timeout=CANCEL_GRACE)
        if done:
            on_late(thread)
        else:   # not waited for any longer, but its outcome is still kept once it has one
            thread.add_done_callback(lambda t: None if t.cancelled() else on_late(t))
        raise


async def call_effect_fn(fn: Callable[..., Any], info: EffectInfo, remaining: float | None,
                         on_late: Callable[[asyncio.Future[Any]], None] | None = None,
                         cancelling: Callable[[], bool] = lambda: False,
                         on_thread: Callable[[asyncio.Future[Any]], None] | None = None) -> Any:
    """Call an effect's function: a coroutine function on the loop, any other in a thread.
    ``on_late`` receives a thread that finished while the run was being cancelled
    (``cancelling``; see ``_outlive_cancel``); ``on_thread`` the thread as it starts."""
    args = (info,) if _takes_arg(fn) else ()
    coro: Any
    if inspect.iscoroutinefunction(fn):
        coro = fn(*args)
    elif on_late is not None:
        thread = asyncio.ensure_future(asyncio.to_thread(fn, *args))
        if on_thread is not None:
            on_thread(thread)
        coro = _outlive_cancel(thread, on_late, cancelling)
    else:
        coro = asyncio.to_thread(fn, *args)
    if remaining is None:
        result = await coro
    else:
        if remaining <= 0:
            coro.close()
            raise TimeoutError("deadline passed before the effect started")
        result = await asyncio.wait_for(coro, remaining)
    if inspect.isawaitable(result):  # a lambda returning a coroutine
        result = await result if remaining is None else await asyncio.wait_for(result, remaining)
    return result


def _takes_arg(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
               for p in params)
