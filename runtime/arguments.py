"""What the Runtime facade checks of the arguments it is given, before anything runs
or is written."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .core.errors import InvalidRequest
from .core.records import thread_id_problem
from .graph import ExecutableGraph, Graph
from .store.base import MAX_SEQ

#: what start and submit accept besides the graph and its input
START_OPTIONS = frozenset({"thread_id", "deadline", "max_steps", "max_tokens", "max_cost", "max_concurrency",
                           "compensate_on"})


def start_options(options: Mapping[str, Any]) -> Mapping[str, Any]:
    unknown = sorted(set(options) - START_OPTIONS)
    if unknown:
        raise InvalidRequest(f"unknown option(s) {', '.join(unknown)}; start takes: {', '.join(sorted(START_OPTIONS))}")
    return options


def graph_arg(graph: Any) -> Graph | ExecutableGraph:
    if not isinstance(graph, (Graph, ExecutableGraph)):
        raise InvalidRequest(f"expected a Graph or an ExecutableGraph, got {type(graph).__name__} "
                             f"(a 'module:attr' reference is loaded with runtime.resolve_ref)")
    return graph


def check_thread_id(thread_id: object) -> None:
    """A thread id is text a store can hold as it is (``thread_id_problem``)."""
    problem = thread_id_problem(thread_id)
    if problem is not None:
        raise InvalidRequest(f"thread_id {problem}")


def call_of(target: object, owner: object, methods: tuple[Any, ...]) -> bool:
    """Whether ``target`` is a call, not yet begun, of one of ``methods`` on ``owner`` (a
    call of another Runtime would be followed in the other's store)."""
    if getattr(target, "cr_code", None) not in {m.__code__ for m in methods}:
        return False
    frame = getattr(target, "cr_frame", None)
    return frame is not None and frame.f_locals.get("self") is owner


def close_call(call: object) -> None:
    """Close a call that is refused before it was awaited (no "never awaited" warning)."""
    close = getattr(call, "close", None)
    if callable(close):
        close()


def answers_arg(answer_given: bool, answers: Any) -> Mapping[str, Any] | None:
    """``answers`` of a resume: {interrupt id: answer}, given instead of a single answer.
    Another shape would be read as ids (a string's letters) or fail deep inside; given
    beside an answer, one of the two would be dropped without a word."""
    if answers is None:
        return None
    if not isinstance(answers, Mapping) or not all(isinstance(k, str) for k in answers):
        raise InvalidRequest(f"answers must be an object of {{interrupt id: answer}}, got {type(answers).__name__}")
    if answer_given:
        raise InvalidRequest("give a single answer or answers={interrupt id: answer}, not both")
    return answers


#: the longest reason a cancel records (as the debugger's cancel form allows)
MAX_REASON = 500


def check_cancel(reason: Any, wait: Any) -> None:
    """A cancel's reason goes on the run's row and its trace: text of a bounded length.
    ``wait`` bounds a wait for a run driven elsewhere: NaN would never be reached."""
    if not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_REASON:
        shown = f"{len(reason)} characters" if isinstance(reason, str) else repr(reason)
        raise InvalidRequest(f"reason must be a non-empty string of at most {MAX_REASON} characters, got {shown}")
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait < float("inf"):
        raise InvalidRequest(f"wait must be a finite number of seconds of at least 0, got {wait!r}")


def seq_arg(after_seq: Any) -> int:
    """A trace position to read after: a whole number a store's seq columns can compare."""
    if isinstance(after_seq, bool) or not isinstance(after_seq, int) or not 0 <= after_seq < 2**63:
        raise InvalidRequest(f"after_seq must be a whole number from 0 to 2**63 - 1, got {after_seq!r}")
    return after_seq


def bool_arg(value: Any, what: str) -> bool:
    """A yes/no argument: any other value (``"no"``, ``0``) would be read by its truth."""
    if not isinstance(value, bool):
        raise InvalidRequest(f"{what} must be True or False, got {value!r}")
    return value


def check_stream(target: object, buffer: Any, recorded: Any) -> None:
    """A stream's options; a call given as ``target`` is closed when they are refused (never
    awaited: said once, here, not as a warning later)."""
    try:
        if isinstance(buffer, bool) or not isinstance(buffer, int) or not 1 <= buffer <= MAX_SEQ:
            raise InvalidRequest(f"buffer must be a whole number of events from 1 to 2**31 - 1, got {buffer!r}")
        bool_arg(recorded, "recorded")
    except InvalidRequest:
        if not isinstance(target, (Graph, ExecutableGraph)):
            close_call(target)
        raise


def id_arg(value: Any, what: str) -> str:
    """A run's or a checkpoint's id: a string. A record passed instead would reach the store
    as a key it cannot look up (an unhashable dict, a value SQL cannot bind)."""
    if isinstance(value, str):
        return value
    hint = "; pass its .id" if isinstance(getattr(value, "id", None), str) else ""
    raise InvalidRequest(f"{what} must be a string id, got {type(value).__name__}{hint}")
