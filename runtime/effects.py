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
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NoReturn, Protocol

from pydantic import BaseModel, ValidationError
from pydantic_core import to_jsonable_python

from .errors import DeadlineExceeded, ErrorClass, InvalidAnswer, NodeError
from .records import EffectStatus, Interrupt, InterruptKind, JournalEntry

if TYPE_CHECKING:
    from .context import AttemptScope

JSON = Any


def effect_key(scope: str, node: str, name: str, occurrence: int) -> str:
    """Stable idempotency key: the same for every re-execution in one lineage."""
    raw = f"{scope}/{node}/{name}/{occurrence}".encode()
    return "eff_" + hashlib.sha256(raw).hexdigest()[:24]


def to_json(value: Any, what: str) -> JSON:
    try:
        return to_jsonable_python(value)
    except Exception as e:  # pydantic raises several types for unserialisable values
        raise NodeError(f"{what} is not JSON-serialisable: {e}") from e


@dataclass(frozen=True, slots=True)
class EffectInfo:
    """Passed to an effect function that takes one argument."""

    key: str
    name: str
    request: JSON
    deadline: float | None
    attempt: int


class InDoubtAnswer(BaseModel):
    """How a person settles an effect whose outcome is unknown."""

    action: Literal["result", "retry", "abort"]
    result: JSON = None


class InDoubtEffectError(NodeError):
    error_class = ErrorClass.IN_DOUBT_EFFECT


class EffectDivergence(NodeError):
    """Re-execution asked for a recorded effect with a different request."""

    error_class = ErrorClass.INTERNAL

    def __init__(self, node: str, name: str, occurrence: int, expected: JSON, recorded: JSON):
        self.expected, self.recorded = expected, recorded
        super().__init__(
            f"node {node!r} effect {name!r} #{occurrence}: request {expected!r} differs from the "
            f"recorded request {recorded!r}; the node is not deterministic up to its effects"
        )


class JournalHost(Protocol):
    """What the run loop offers the effect protocol (all called on the loop thread)."""

    key_scope: str

    def journal_latest(self, node: str, name: str, occurrence: int) -> JournalEntry | None: ...
    def record_effect(self, entry: JournalEntry, durable: bool) -> None: ...
    def find_interrupt(self, node: str, slot: str, kind: InterruptKind) -> Interrupt | None: ...
    def raise_interrupt(self, scope: AttemptScope, kind: InterruptKind, payload: JSON, *,
                        slot: str, response_schema: JSON = None,
                        response_ref: str | None = None) -> NoReturn: ...
    def now(self) -> float: ...


def validate_in_doubt_answer(answer: JSON) -> InDoubtAnswer:
    try:
        return InDoubtAnswer.model_validate(answer)
    except ValidationError as e:
        raise InvalidAnswer(
            "an in-doubt effect needs {\"action\": \"result\", \"result\": ...}, "
            f"{{\"action\": \"retry\"}} or {{\"action\": \"abort\"}}: {e.errors()[0]['msg']}"
        ) from None


async def perform_effect(host: JournalHost, scope: AttemptScope, name: str,
                         fn: Callable[..., Any], request: JSON, key: str | None,
                         idempotent: bool) -> JSON:
    node, attempt = scope.node, scope.attempt
    occurrence = scope.next_occurrence(name)
    req = to_json(request, f"effect {name!r} request")
    key = key or effect_key(host.key_scope, node, name, occurrence)
    latest = host.journal_latest(node, name, occurrence)
    if latest is not None and latest.status in (EffectStatus.SUCCEEDED, EffectStatus.MOCKED):
        if latest.request != req:
            raise EffectDivergence(node, name, occurrence, req, latest.request)
        return latest.result
    if latest is not None and latest.status == EffectStatus.STARTED and not idempotent:
        # bound to this STARTED entry: an answer settles it alone, never a later doubt
        slot = f"effect:{name}#{occurrence}@{latest.run_id}/{latest.attempt}"
        settled = host.find_interrupt(node, slot, InterruptKind.IN_DOUBT)
        if settled is None or settled.answer is None:
            host.raise_interrupt(scope, InterruptKind.IN_DOUBT, {
                "effect": name, "occurrence": occurrence, "key": latest.key, "request": latest.request,
                "question": "this effect started but its outcome was never recorded; did it happen?",
                "answers": ["result", "retry", "abort"],
            }, slot=slot, response_schema=InDoubtAnswer.model_json_schema())
        decision = validate_in_doubt_answer(settled.answer)  # type: ignore[union-attr]
        if decision.action == "abort":
            raise InDoubtEffectError(f"effect {name!r} was in doubt and the run was told to abort")
        if decision.action == "result":
            host.record_effect(JournalEntry(
                run_id=scope.run_id, node=node, name=name, occurrence=occurrence, attempt=attempt,
                key=latest.key, status=EffectStatus.SUCCEEDED, request=req,
                result=to_json(decision.result, "in-doubt result"), at=host.now(),
            ), durable=False)
            return decision.result
        key = latest.key  # retry: same key, so the external system can deduplicate

    remaining = scope.remaining()
    if remaining is not None and remaining <= 0:  # never started: nothing can be in doubt
        raise DeadlineExceeded(f"the deadline passed before effect {name!r} could start")
    started = JournalEntry(run_id=scope.run_id, node=node, name=name, occurrence=occurrence,
                           attempt=attempt, key=key, status=EffectStatus.STARTED, request=req,
                           at=host.now())
    host.record_effect(started, durable=True)
    info = EffectInfo(key=key, name=name, request=req, deadline=scope.deadline, attempt=attempt)
    try:
        result = await _call(fn, info, scope.remaining())
    except (asyncio.CancelledError, TimeoutError):
        # Outcome unknown: leave the entry STARTED, so recovery treats it as in doubt.
        raise
    except Exception as e:
        host.record_effect(_outcome(started, EffectStatus.FAILED, host.now(), error=f"{type(e).__name__}: {e}"),
                           durable=False)
        raise
    result_json = to_json(result, f"effect {name!r} result")
    host.record_effect(_outcome(started, EffectStatus.SUCCEEDED, host.now(), result=result_json),
                       durable=False)
    return result_json


def _outcome(started: JournalEntry, status: EffectStatus, at: float, *, result: JSON = None,
             error: str | None = None) -> JournalEntry:
    return JournalEntry(run_id=started.run_id, node=started.node, name=started.name,
                        occurrence=started.occurrence, attempt=started.attempt, key=started.key,
                        status=status, request=started.request, result=result, error=error, at=at)


async def _call(fn: Callable[..., Any], info: EffectInfo, remaining: float | None) -> Any:
    args = (info,) if _takes_arg(fn) else ()
    if inspect.iscoroutinefunction(fn):
        coro = fn(*args)
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
