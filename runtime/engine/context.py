"""What a node sees while it runs: ``NodeContext``.

Inside an ``async def`` node, ``ctx.effect(...)`` and ``ctx.interrupt(...)`` return
awaitables; inside a plain ``def`` node (run in a worker thread) the same calls
block and return the value. There is one implementation of each, running on the
run's event loop; a sync node reaches it through ``run_coroutine_threadsafe``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from ..core.errors import AttemptCancelled, InvalidInputError
from ..core.jsonvalues import JSON, to_json
from ..core.records import InterruptKind, InterruptStatus
from .effects import JournalHost, check_usage, perform_effect
from .scope import AttemptScope


class NodeHost(JournalHost, Protocol):
    """What the run loop offers a node's context, beyond the effect journal."""

    thread_id: str

    def add_usage(self, scope: AttemptScope, tokens: int, cost: float) -> None: ...
    def emit(self, scope: AttemptScope, payload: JSON, ephemeral: bool) -> None: ...
    def remember_model(self, ref: str, model: type[BaseModel]) -> None: ...


class NodeContext:
    """Handed to every node attempt. Names and ids are read-only."""

    def __init__(self, host: NodeHost, scope: AttemptScope, event_loop: asyncio.AbstractEventLoop):
        self._host = host
        self._scope = scope
        self._event_loop = event_loop
        self._loop_thread = threading.get_ident()

    @property
    def run_id(self) -> str:
        return self._scope.run_id

    @property
    def thread_id(self) -> str:
        return self._host.thread_id

    @property
    def node(self) -> str:
        return self._scope.node

    @property
    def attempt(self) -> int:
        """1 for the first attempt of this node in this run, 2 for its first retry, …"""
        return self._scope.attempt

    @property
    def deadline(self) -> float | None:
        """Epoch seconds by which this attempt must finish (run deadline and node timeout)."""
        return self._scope.deadline

    def remaining(self) -> float | None:
        """Seconds left before the deadline, or None when there is none."""
        return self._scope.remaining()

    def effect(self, name: str, fn: Callable[..., Any], *, request: JSON = None,
               key: str | None = None, compensate: Callable[..., Any] | None = None,
               idempotent: bool = False) -> Any:
        """Run an external side effect at most once per lineage; see ``runtime.engine.effects``.

        ``fn()`` (or ``fn(info)`` to read ``info.key`` and ``info.deadline``) may be sync or
        async. Its JSON result is recorded and served on every later execution.
        ``compensate(info)`` undoes it (``info.result`` is the recorded result) when
        ``Runtime.compensate`` runs; define it at module level so another process can run it.
        """
        self._check_alive()
        call = perform_effect(self._host, self._scope, name, fn, request, key, idempotent, compensate)
        if threading.get_ident() == self._loop_thread:
            return self._scope.handed(f"ctx.effect({name!r}, ...)", call)
        return asyncio.run_coroutine_threadsafe(self._kept_on_attempt(call), self._event_loop).result()

    async def _kept_on_attempt(self, call: Coroutine[Any, Any, Any]) -> Any:
        """Run a ``def`` node's effect on the event loop, kept on the attempt from its first step
        there (in which the effect starts), so that a cancel waits for it as it waits for an async
        node's effect. Kept by the thread instead, a cancel could come between the effect's start
        and its keeping, and end the run without waiting for the outcome."""
        if self._scope.abandoned:   # cancelled before the effect's turn came: it never starts
            call.close()
            self._check_alive()
        task = asyncio.current_task()
        assert task is not None
        waiting = self._scope.effects_in_thread
        if waiting is None:
            waiting = self._scope.effects_in_thread = []
        waiting.append(task)
        try:
            return await call
        finally:
            waiting.remove(task)

    def cancelling(self) -> bool:
        """Whether the run is being cancelled (by a request, not a deadline)."""
        return self._host.cancelling()

    def interrupt(self, payload: JSON, response: type[BaseModel] | None = None) -> Any:
        """Pause the run and ask a person; returns their answer once the run is resumed.

        With ``response``, the answer is validated against that model on resume (an
        invalid answer is rejected and the run stays paused) and returned as an instance.
        """
        self._check_alive()
        call = self._interrupt(payload, response)
        if threading.get_ident() == self._loop_thread:
            return self._scope.handed("ctx.interrupt(...)", call)
        return asyncio.run_coroutine_threadsafe(call, self._event_loop).result()

    def usage(self, tokens: int = 0, cost: float = 0.0) -> None:
        """Report model usage; the run fails with ``limit_exceeded`` past its budget.

        Counted on every attempt that calls it. Usage of a call made through
        ``ctx.effect`` belongs to that effect: report it there with ``info.usage(...)``,
        so that a re-execution served from the journal does not count it again."""
        self._check_alive()
        check_usage("usage", tokens, cost)
        self._host.add_usage(self._scope, tokens, float(cost))

    def emit(self, payload: JSON, *, ephemeral: bool = False) -> None:
        """Send a custom event (progress, a model's token chunk) to whoever streams the run.

        Recorded in the trace, and so visible to a follower in another process, unless
        ``ephemeral``; an ephemeral event is only delivered live. Never blocks: in an
        ``async def`` node call it without ``await``; from a sync node it is handed to
        the run's event loop in order."""
        self._check_alive()
        if not isinstance(ephemeral, bool):   # by its truth, "false" would drop a payload meant for the trace
            raise InvalidInputError(f"emit: ephemeral must be True or False, got {ephemeral!r}")
        value = to_json(payload, "emitted payload")
        if threading.get_ident() == self._loop_thread:
            self._host.emit(self._scope, value, ephemeral)
        else:
            self._event_loop.call_soon_threadsafe(self._host.emit, self._scope, value, ephemeral)

    async def _interrupt(self, payload: JSON, response: type[BaseModel] | None) -> Any:
        slot = str(self._scope.interrupts)
        self._scope.interrupts += 1
        found = self._host.find_interrupt(self.node, slot, InterruptKind.USER,
                                          None if response is None else _fits(response))
        if found is not None and found.status == InterruptStatus.ANSWERED:   # null is an answer too
            if response is not None:
                return response.model_validate(found.answer)
            return found.answer
        schema = response.model_json_schema() if response is not None else None
        ref = f"{response.__module__}:{response.__qualname__}" if response is not None else None
        if response is not None:
            self._host.remember_model(ref, response)  # type: ignore[arg-type]
        self._host.raise_interrupt(self._scope, InterruptKind.USER,
                                      to_json(payload, "interrupt payload"), slot=slot,
                                      response_schema=schema, response_ref=ref)

    def _check_alive(self) -> None:
        if self._scope.abandoned:
            raise AttemptCancelled(f"attempt {self.attempt} of node {self.node!r} was abandoned")
        if self._scope.ended:
            # kept by a client, or used by a task the node left running: what it did would be
            # recorded against a node whose outcome is already settled
            raise InvalidInputError(
                f"the context of node {self.node!r} (attempt {self.attempt}) was used after that attempt "
                f"ended: a node's ctx works only while the node runs; use the ctx each node is given, "
                f"and await what uses it before the node returns")


def _fits(model: type[BaseModel]) -> Callable[[JSON], bool]:
    """Whether a recorded answer is one ``model`` takes."""
    def fits(answer: JSON) -> bool:
        try:
            model.model_validate(answer)
        except ValidationError:
            return False
        return True
    return fits
