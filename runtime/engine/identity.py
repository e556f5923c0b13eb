"""Which recorded call an effect call is: its occurrence among the node's calls of that name.

A first execution numbers the calls of one name in the order they start. Re-executed (a
retry, a resume, a recovery, a mocked branch), the calls that were recorded start again —
but calls made concurrently (``asyncio.gather``, threads of a ``def`` node) come back in
whatever order the served results let them, not the order they were recorded in. So a call
takes the first occurrence not taken yet, unless that one was recorded for another call: then
the occurrence recorded with this call's ``key=`` (when given) or its request, if one is
free. A call that matches none keeps the first free one, whose recorded request then tells
that the node does not make the calls it made (``EffectDivergence``). Calls that share a
request and give no key cannot be told apart: they take their occurrences in order of start.
"""

from __future__ import annotations

from typing import Protocol

from ..core.jsonvalues import JSON, json_equal
from ..core.records import JournalEntry
from .scope import AttemptScope


class Recorded(Protocol):
    def journal_latest(self, node: str, name: str, occurrence: int) -> JournalEntry | None: ...
    def source_entry(self, node: str, name: str, occurrence: int, request: JSON) -> JournalEntry | None: ...


def occurrence_of(host: Recorded, scope: AttemptScope, name: str, request: JSON, key: str | None) -> int:
    taken = scope.claimed(name)
    first = 0
    while first in taken:
        first += 1
    at, entry = first, _recorded(host, scope.node, name, first, request)
    if entry is not None and not _same(entry, request, key):
        k = first + 1
        while (other := _recorded(host, scope.node, name, k, request)) is not None:
            if k not in taken and _same(other, request, key):
                at = k
                break
            k += 1
    taken.add(at)
    return at


def _recorded(host: Recorded, node: str, name: str, occurrence: int, request: JSON) -> JournalEntry | None:
    """This run's record of the call, else (a mocked branch) its source's."""
    return host.journal_latest(node, name, occurrence) or host.source_entry(node, name, occurrence, request)


def _same(entry: JournalEntry, request: JSON, key: str | None) -> bool:
    return entry.key == key if key else json_equal(entry.request, request)
