"""Runs one node attempt: async nodes as tasks, sync nodes in a bounded thread pool,
under the attempt's effective deadline. Returns an ``Outcome``; never raises except
when the attempt itself is cancelled."""

from __future__ import annotations

import asyncio
import functools
import inspect
import sys
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from enum import StrEnum
from typing import Any, NamedTuple

from ..core.errors import AttemptCancelled, DeadlineExceeded, NodeInterrupt
from ..graph import NodeSpec
from . import effects
from .context import NodeContext
from .scope import AttemptScope


class OutcomeKind(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


class Outcome(NamedTuple):   # a tuple: one per attempt, built in one call
    kind: OutcomeKind
    value: Any = None                 # the node's return value
    error: BaseException | None = None
    interrupt_id: str | None = None


async def execute_attempt(spec: NodeSpec, state: Any, ctx: NodeContext, scope: AttemptScope,
                          pool: Executor, extra: Mapping[str, Any] | None = None) -> Outcome:
    args = (state, ctx) if spec.wants_ctx else (state,)
    kwargs = {**spec.bound, **extra} if extra else spec.bound
    try:
        if spec.is_async:
            work = spec.fn(*args, **kwargs)
        else:
            loop = asyncio.get_running_loop()
            work = loop.run_in_executor(pool, functools.partial(spec.fn, *args, **kwargs))
        remaining = scope.remaining()
        if remaining is None:
            result = await work
        else:
            try:
                result = await asyncio.wait_for(work, max(remaining, 0.0))
            except TimeoutError:
                if (scope.remaining() or 0) > 0:
                    raise  # the node's own TimeoutError, not our deadline
                raise DeadlineExceeded(
                    f"node {scope.node!r} attempt {scope.attempt} passed its deadline"
                    + (f" (timeout {spec.timeout}s)" if spec.timeout else "")
                ) from None
        if type(result) is not dict and inspect.isawaitable(result):  # a sync wrapper around an async function
            result = await result
        if scope.interrupt_id is not None:  # node code caught the signal; the pause stands
            return Outcome(OutcomeKind.INTERRUPTED, interrupt_id=scope.interrupt_id)
        return Outcome(OutcomeKind.SUCCEEDED, value=result)
    except NodeInterrupt as signal:
        return Outcome(OutcomeKind.INTERRUPTED, interrupt_id=signal.interrupt_id)
    except asyncio.CancelledError:
        scope.abandoned = True
        if scope.effects_in_thread and ctx.cancelling():
            # a ``def`` node's effect goes on in its thread, which cannot be stopped: a cancel
            # waits for it a moment (as ``effects._outlive_cancel`` does for an async node's),
            # so its outcome is journaled rather than left in doubt; a second cancel does not wait
            await asyncio.wait(list(scope.effects_in_thread), timeout=effects.CANCEL_GRACE)
        raise
    except (Exception, AttemptCancelled) as e:
        if scope.interrupt_id is not None:
            return Outcome(OutcomeKind.INTERRUPTED, interrupt_id=scope.interrupt_id)
        # only the error's class and message are recorded; its traceback's frames would keep
        # their callers, which for an attempt started eagerly include the run loop's (a cycle)
        return Outcome(OutcomeKind.FAILED, error=_without_traceback(e))
    finally:
        scope.ended = True
        if scope.deadline is not None and (scope.remaining() or 0) <= 0:
            # a sync node keeps its thread after a timeout; stop it from doing more
            scope.abandoned = True


def _without_traceback(error: BaseException) -> BaseException:
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        e.__traceback__ = None
        e = e.__cause__ or e.__context__
    return error


#: Python 3.12 starts a task eagerly: its first step runs at once, in the task, and a node that
#: never waits ends there, without a turn of the event loop (an eighth of a ReAct node's lines)
EAGER = sys.version_info >= (3, 12)


def _current() -> asyncio.Task[None]:
    task = asyncio.current_task()
    assert task is not None
    return task


#: how an attempt ended as its task reports it: an ``Outcome``, None when it was
#: cancelled, or an exception that is the engine's own fault (node errors are outcomes)
Ended = Outcome | BaseException | None


class InFlight:
    """A run's attempts in flight, one task each. A task reports how its attempt ended as
    its own last step (not through a done callback), so an attempt that never waits is
    ready to collect after a single turn of the event loop (``settle``)."""

    def __init__(self, pool: Executor, wake: Callable[[], None]):
        self._pool, self._wake = pool, wake
        self.tasks: dict[asyncio.Task[None], AttemptScope] = {}
        self._done: list[tuple[asyncio.Task[None], Ended]] = []
        self._launched = False   # since the last ``settle``
        #: the attempt whose first step is running right now (started eagerly, not in ``tasks``
        #: yet), and its task once that step has begun
        self._starting: AttemptScope | None = None
        self._starting_task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self.tasks)

    def launch(self, spec: NodeSpec, state: Any, ctx: NodeContext, scope: AttemptScope,
               extra: Mapping[str, Any] | None) -> None:
        coro = self._attempt(spec, state, ctx, scope, extra)
        loop = asyncio.get_running_loop()
        # ``EAGER``, spelt so that type checkers follow it; a task factory of the caller's
        # own (instrumentation, say) is used as it is
        if sys.version_info >= (3, 12) and loop.get_task_factory() is None:
            self._starting = scope
            try:
                task = asyncio.Task(coro, loop=loop, eager_start=True)
            finally:
                self._starting = self._starting_task = None
        else:
            task = loop.create_task(coro)
        self.tasks[task] = scope
        self._launched = True

    async def settle(self) -> bool:
        """Give attempts launched since the last call one turn of the event loop (the tasks
        take their first step before this one resumes); whether any has ended."""
        if self._launched and not self._done:
            self._launched = False
            await asyncio.sleep(0)
        return bool(self._done)

    async def _attempt(self, spec: NodeSpec, state: Any, ctx: NodeContext, scope: AttemptScope,
                       extra: Mapping[str, Any] | None) -> None:
        if self._starting is scope:   # started eagerly: ``cancel_all`` may need the task before ``tasks`` has it
            self._starting_task = asyncio.current_task()
        try:
            ended: Ended = await execute_attempt(spec, state, ctx, scope, self._pool, extra)
        except asyncio.CancelledError:
            # no local holds the task: the traceback keeps this frame, and the cancelled task
            # keeps the error, a cycle that would outlive the run
            self._report(_current(), None)
            raise
        except Exception as e:
            ended = e
        task = asyncio.current_task()
        assert task is not None
        if task.cancelling():   # cancelled after its last wait: it ends as a cancelled attempt does
            ended = None
        self._report(task, ended)

    def _report(self, task: asyncio.Task[None], ended: Ended) -> None:
        self._done.append((task, ended))
        self._wake()

    def cancel_all(self) -> None:
        """Cancel every attempt; each is reported once it ends."""
        if self._starting is not None and self._starting_task is not None:   # asked during its first step
            # (by its own code, or by a run it started: not necessarily the current task)
            self._starting.abandoned = True
            self._starting_task.cancel()
        for task, scope in self.tasks.items():
            scope.abandoned = True
            task.cancel()
            # a task cancelled before its first step never runs ``_attempt``: reported here
            task.add_done_callback(self._cancelled_unstarted)

    def _cancelled_unstarted(self, task: asyncio.Task[None]) -> None:
        if task in self.tasks and not any(t is task for t, _ in self._done):
            self._report(task, None)

    def take_done(self, position: Callable[[str], int]) -> list[tuple[AttemptScope, Ended]]:
        """The attempts that ended since the last call, in canonical order (``position``
        of their node), no longer in flight."""
        done, self._done = self._done, []
        if len(done) > 1:
            done.sort(key=lambda d: position(self.tasks[d[0]].node))
        return [(self.tasks.pop(task), ended) for task, ended in done]

    def abandon_all(self) -> list[AttemptScope]:
        """Cancel every attempt and forget it (its driver records how each ended)."""
        scopes = []
        for task, scope in self.tasks.items():
            scope.abandoned = True
            task.cancel()
            scopes.append(scope)
        self.tasks.clear()
        self._done.clear()
        return scopes
