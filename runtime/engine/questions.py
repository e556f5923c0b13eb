"""What a mocked run asks a person about an effect it has no result to serve for.

A fork or replay serves effects from its source lineage's journal. When it cannot,
nothing runs silently: the run pauses with an *unrecorded effect* question (answer:
mock a result / allow live / abort). The question says what the source did with the
effect, since "no record" would mislead when the source called it: a call whose
outcome was never recorded may have happened, and a call that failed has only an
error to show.
"""

from __future__ import annotations

from ..core.jsonvalues import JSON
from ..core.records import EffectStatus, JournalEntry

_CHOICES = "give a mock result, allow it to run live, or abort the branch"


def unrecorded_question(name: str, occurrence: int, request: JSON, recorded: JournalEntry | None,
                        unserved: JournalEntry | None) -> dict[str, JSON]:
    """The payload of the question about effect ``name`` (its ``occurrence`` in the
    attempt), asked with ``request``. ``recorded``: the source's served record of the
    identity, made with another request; ``unserved``: the source's call of it with no
    result to serve (started with no outcome recorded, or failed), when none was served."""
    payload: dict[str, JSON] = {
        "effect": name, "occurrence": occurrence, "request": request,
        "recorded_request": None if recorded is None else recorded.request,
        "question": f"This run mocks its effects and has no record of this one with this request; {_CHOICES}",
        "answers": ["mock", "live", "abort"],
    }
    if unserved is None:
        return payload
    payload["recorded_request"] = unserved.request
    if unserved.status == EffectStatus.FAILED:
        payload["failed"] = {"run_id": unserved.run_id, "key": unserved.key, "error": unserved.error}
        payload["question"] = (f"Run {unserved.run_id} called this effect and it failed ({unserved.error}): "
                               f"there is no result to serve, and \"live\" calls it again; {_CHOICES}")
    else:
        payload["in_doubt"] = {"run_id": unserved.run_id, "key": unserved.key}
        payload["question"] = (f"Run {unserved.run_id} started this effect (key {unserved.key}) but its outcome "
                               f"was never recorded: it may have happened, and \"live\" runs it again; {_CHOICES}")
    return payload
