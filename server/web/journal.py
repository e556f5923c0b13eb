"""The effect journal as rows, one per effect: how it ended up, or how it stood at a past
checkpoint and what became of it after.

IN DOUBT means what the runtime means by it (an outcome unknown, a person to decide), so
an effect seen at a past checkpoint is in doubt there only if the runtime had asked about
it by then; one still going at that moment is RUNNING, then whatever it became.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from runtime.core.jsonvalues import JSON
from runtime.core.records import Checkpoint, EffectStatus as E, Interrupt, InterruptKind, JournalEntry, Run
from runtime.core.states import RunStatus


@dataclass(frozen=True, slots=True)
class EffectRow:
    """One effect as the journal ends up: LIVE, MOCKED (and from where), IN DOUBT, …"""

    node: str
    name: str
    occurrence: int
    key: str
    label: str
    request: JSON
    result: JSON
    error: str | None
    source: str | None
    #: seen at a past checkpoint: what it became after it, when that differs from ``label``
    later: str | None = None
    #: seen at a past checkpoint: it started after it (``label`` is what it became)
    after: bool = False


def as_of(run: Run, checkpoint: Checkpoint) -> float | None:
    """When a past checkpoint was taken, to tell what the store recorded after it; None at
    the run's latest checkpoint, which shows the run as it is now (an undo done since, an
    effect going on)."""
    return checkpoint.created_at if checkpoint.seq < run.head_seq else None


def journal_rows(entries: Sequence[JournalEntry], run: Run, until: float | None = None,
                 asked: Sequence[Interrupt] = ()) -> list[EffectRow]:
    """One row per effect, in the order they began. ``until`` (a past checkpoint's time)
    labels each as it stood then, with ``later`` or ``after`` saying what came after;
    ``asked`` (the run's interrupts) tells an effect the runtime asked about, in doubt, from
    one still going."""
    doubted = {(i.node, i.slot): i.created_at for i in asked if i.kind == InterruptKind.IN_DOUBT}
    by_effect: dict[tuple[str, str, int], list[JournalEntry]] = {}
    for e in entries:
        by_effect.setdefault((e.node, e.name, e.occurrence), []).append(e)
    rows = []
    for (node, name, occ), es in by_effect.items():
        now = _label(es, run.status == RunStatus.RUNNING and not _asked(es, doubted, None))
        seen = es if until is None else [e for e in es if e.at <= until]
        then = _label(seen, not _asked(seen, doubted, until)) if seen and until is not None else now
        outcome = _outcome(es)
        shown, final = outcome or es[-1], es[-1]
        rows.append(EffectRow(node, name, occ, final.key, then, es[0].request, shown.result, shown.error,
                              shown.source, later=now if seen and now != then else None, after=not seen))
    return rows


def _asked(seen: Sequence[JournalEntry], doubted: Mapping[tuple[str, str], float], at: float | None) -> bool:
    """The runtime had asked (by ``at``) whether the effect's last start happened: its
    question names that very STARTED entry."""
    last = seen[-1]
    if last.status != E.STARTED:
        return False
    asked_at = doubted.get((last.node, f"effect:{last.name}#{last.occurrence}@{last.run_id}/{last.attempt}"))
    return asked_at is not None and (at is None or asked_at <= at)


def _outcome(es: Sequence[JournalEntry]) -> JournalEntry | None:
    return next((e for e in reversed(es) if e.status in (E.SUCCEEDED, E.FAILED, E.MOCKED)), None)


def _label(es: Sequence[JournalEntry], going: bool) -> str:
    """The label of an effect whose journal is ``es``; ``going``: one started and not
    settled is still running (else its outcome is in doubt)."""
    statuses = {e.status for e in es}
    outcome = _outcome(es)
    if E.COMPENSATED in statuses:
        return "COMPENSATED"
    if E.COMPENSATION_FAILED in statuses:
        return "COMPENSATION FAILED"
    if E.COMPENSATING in statuses:
        return "COMPENSATING"
    if outcome is not None and outcome.status == E.MOCKED:
        return "MOCKED"
    if outcome is not None and outcome.status == E.FAILED:
        return "FAILED"
    if outcome is not None:
        return "LIVE"
    if going and es[-1].status == E.STARTED:
        return "RUNNING"
    return "IN DOUBT"
