"""Pure decisions the run loop takes about outcomes: retry or fail, and budgets
(a continuation starts with its parent's usage, so they hold across the chain).

Each returns the decision with its reason in words, which is recorded on the node
attempt (and shown in the debugger) so nobody has to read code to learn why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from ..core.errors import ErrorClass
from ..core.jsonvalues import JSON
from ..core.states import StopKind
from ..graph import RetryPolicy


@dataclass(frozen=True, slots=True)
class FailureDecision:
    retry: bool
    delay: float
    reason: str


def on_failure(policy: RetryPolicy, cls: ErrorClass, failures: int, *, stopping: StopKind | None,
               deadline: float | None, now: float) -> FailureDecision:
    """Whether a node's ``failures``-th failure of class ``cls`` is retried, and why.
    A run that is pausing for an answer still retries: the retry waits out its backoff
    after the resume, as it would have had it failed a moment before the pause."""
    retryable = cls in policy.retry_on
    if (stopping in (None, StopKind.INTERRUPT) and retryable and failures < policy.max_attempts
            and (deadline is None or now < deadline)):
        delay = policy.delay(failures)
        return FailureDecision(True, delay,
                               f"retry in {delay:g}s (failure {failures} of at most {policy.max_attempts})")
    if retryable and failures >= policy.max_attempts:
        reason = f"fail: {failures} failure(s), max_attempts={policy.max_attempts}"
    elif stopping is not None:
        reason = "fail: the run is already stopping"
    else:
        reason = f"fail: {cls.value} errors are not retried by this node's policy"
    return FailureDecision(False, 0.0, reason)


def budget_exceeded(limits: Mapping[str, JSON], usage: Mapping[str, JSON]) -> str | None:
    """Why the run's token or cost budget is exhausted, or None."""
    over = []
    if limits.get("max_tokens") is not None and usage["tokens"] > limits["max_tokens"]:
        over.append(f"tokens {usage['tokens']} > max_tokens {limits['max_tokens']}")
    max_cost = limits.get("max_cost")
    # costs add up in floating point (0.1 + 0.1 + 0.1 > 0.3): a sum that only rounding
    # puts over the budget is within it
    if (max_cost is not None and usage["cost"] > max_cost
            and not math.isclose(usage["cost"], max_cost, rel_tol=1e-9)):
        over.append(f"cost {usage['cost']:g} > max_cost {limits['max_cost']:g}")
    return "run budget exceeded: " + "; ".join(over) if over else None


def with_limits(limits: Mapping[str, JSON], given: Mapping[str, JSON], now: float) -> dict[str, JSON]:
    """A run's limits with the (validated) ``given`` ones replacing theirs, from ``now``
    on: a new ``deadline_s`` gives a new ``deadline_at``; limits not given are kept."""
    out = {**limits, **{k: v for k, v in given.items() if k != "deadline_at"}}
    if given.get("deadline_s") is not None:
        out["deadline_at"] = now + given["deadline_s"]
    return out


def used_up(limits: Mapping[str, JSON], usage: Mapping[str, JSON], error: Mapping[str, JSON] | None) -> str | None:
    """What, with these limits, leaves a continuation of a run that used ``usage`` and ended
    with ``error`` no room to start a node, or None: a budget already exceeded, or steps used
    up by a run that stopped because a node could not start (that node is still to start, at
    the same state; a run that failed otherwise may go on with nothing to start, its next
    node skipped by a ``when=``)."""
    usage = {"tokens": 0, "cost": 0.0, "steps": 0, **usage}
    max_steps = limits.get("max_steps")
    stopped_at_steps = (error is not None and error.get("class") == ErrorClass.LIMIT_EXCEEDED
                        and str(error.get("message", "")).startswith(MAX_STEPS_REACHED))
    if stopped_at_steps and max_steps is not None and usage["steps"] >= max_steps:
        return f"steps {usage['steps']} of max_steps {max_steps}, raise max_steps"
    over = budget_exceeded(limits, usage)
    return None if over is None else over.removeprefix("run budget exceeded: ") + ", raise the budget"


#: how the message of a run stopped by ``max_steps`` begins (``loop.RunLoop._launch``)
MAX_STEPS_REACHED = "run reached max_steps="
