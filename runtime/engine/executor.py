"""Runs one node attempt: async nodes as tasks, sync nodes in a bounded thread pool,
under the attempt's effective deadline. Returns an ``Outcome``; never raises except
when the attempt itself is cancelled."""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ..core.errors import AttemptCancelled, DeadlineExceeded, NodeInterrupt
from ..graph import NodeSpec
from .context import NodeContext
from .scope import AttemptScope


class OutcomeKind(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


@dataclass(frozen=True, slots=True)
class Outcome:
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
                    f"node {spec.name!r} attempt {scope.attempt} passed its deadline"
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
        raise
    except (Exception, AttemptCancelled) as e:
        if scope.interrupt_id is not None:
            return Outcome(OutcomeKind.INTERRUPTED, interrupt_id=scope.interrupt_id)
        return Outcome(OutcomeKind.FAILED, error=e)
    finally:
        if scope.deadline is not None and (scope.remaining() or 0) <= 0:
            # a sync node keeps its thread after a timeout; stop it from doing more
            scope.abandoned = True
