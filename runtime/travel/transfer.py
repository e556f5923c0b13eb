"""Export and import of a whole thread (every run in it, with all their records).

The document is plain JSON with a format name and version, so it can be read by
other tools and by later versions. Import checks the whole document, and that
none of its ids exist in the target store, before it writes anything; runs are
written oldest first, each with all of its records in one transaction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError
from pydantic_core import to_jsonable_python

from ..core.errors import InvalidRequest, NotFound
from ..core.jsonvalues import JSON
from ..core.records import (
    Batch,
    Checkpoint,
    Interrupt,
    JournalEntry,
    NodeAttempt,
    PendingWrite,
    Run,
    TraceEvent,
)
from ..store.base import CheckpointStore


FORMAT = "shadow-harness/thread"
VERSION = 1
_ALL = 10**9
T = TypeVar("T")

#: the records of one run in the document, by key
_PARTS: dict[str, type] = {"checkpoints": Checkpoint, "pending_writes": PendingWrite, "attempts": NodeAttempt,
                           "journal": JournalEntry, "interrupts": Interrupt, "events": TraceEvent}
_ADAPTERS: dict[type, TypeAdapter[Any]] = {cls: TypeAdapter(cls) for cls in (Run, *_PARTS.values())}


def export_thread(store: CheckpointStore, run_id: str) -> dict[str, JSON]:
    thread_id = store.get_run(run_id).thread_id
    runs = list(reversed(store.list_runs(thread_id=thread_id, limit=_ALL)))  # oldest first
    versions = sorted({r.graph_version for r in runs})
    graphs = [dict(store.graph_description(v) or {"version": v}) for v in versions]
    return {
        "format": FORMAT, "version": VERSION, "thread_id": thread_id, "graphs": graphs,
        "runs": [{
            "run": _dump(r),
            "checkpoints": [_dump(c) for c in store.checkpoints(r.id)],
            "pending_writes": [_dump(w) for w in store.pending_writes(r.id)],
            "attempts": [_dump(a) for a in store.node_attempts(r.id)],
            "journal": [_dump(e) for e in store.journal([r.id])],
            "interrupts": [_dump(i) for i in store.interrupts(r.id)],
            "events": [_dump(e) for e in store.events(r.id)],
        } for r in runs],
    }


def import_thread(store: CheckpointStore, document: Mapping[str, JSON]) -> list[Run]:
    batches = parse(document)
    for b in batches:
        try:
            store.get_run(b.run_id)
        except NotFound:
            continue
        raise InvalidRequest(f"run {b.run_id} already exists in this store; import into another store")
    for desc in document.get("graphs") or ():
        if isinstance(desc, Mapping) and desc.get("version") and desc.get("name"):
            store.save_graph(desc)
    store.create_runs(batches)  # all of them, or none
    return [b.run for b in batches if b.run is not None]


def parse(document: Any) -> list[Batch]:
    """The document's runs as batches, or ``InvalidRequest`` naming what is wrong."""
    if not isinstance(document, Mapping) or document.get("format") != FORMAT:
        raise InvalidRequest(f"not an exported thread (expected \"format\": \"{FORMAT}\")")
    if document.get("version") != VERSION:
        raise InvalidRequest(f"exported thread version {document.get('version')!r} is not supported "
                             f"(this version reads {VERSION})")
    runs = document.get("runs")
    if not isinstance(runs, list) or not runs:
        raise InvalidRequest("exported thread has no runs")
    batches: list[Batch] = []
    seen: set[str] = set()
    for i, item in enumerate(runs):
        where = f"runs[{i}]"
        if not isinstance(item, Mapping):
            raise InvalidRequest(f"{where} is not an object")
        run = _load(Run, item.get("run"), f"{where}.run")
        # nobody holds its lease here: the imported run is at rest
        run = run.evolve(lease_owner=None, lease_expires_at=None)
        if run.thread_id != document.get("thread_id"):
            raise InvalidRequest(f"{where}: run {run.id} belongs to thread {run.thread_id}, "
                                 f"not to the exported thread {document.get('thread_id')}")
        if run.parent_run_id is not None and run.parent_run_id not in seen:
            raise InvalidRequest(f"{where}: run {run.id}'s parent {run.parent_run_id} is not earlier in the file")
        seen.add(run.id)
        parts: dict[str, list[Any]] = {}
        for key, cls in _PARTS.items():
            rows = item.get(key, [])
            if not isinstance(rows, list):
                raise InvalidRequest(f"{where}.{key} is not a list")
            parts[key] = [_load(cls, row, f"{where}.{key}[{j}]") for j, row in enumerate(rows)]
            strangers = {r.run_id for r in parts[key]} - {run.id}
            if strangers and key != "journal":  # compensations of a continued run's effects are journaled on it
                raise InvalidRequest(f"{where}.{key} holds records of run(s) {', '.join(sorted(strangers))}, "
                                     f"not of run {run.id}")
        if not parts["checkpoints"]:
            raise InvalidRequest(f"{where}: run {run.id} has no checkpoints")
        batches.append(Batch(run_id=run.id, run=run, checkpoints=parts["checkpoints"],
                             writes=parts["pending_writes"], attempts=parts["attempts"],
                             effects=parts["journal"], interrupts=parts["interrupts"],
                             events=parts["events"], durable=True))
    return batches


def _dump(record: Any) -> dict[str, JSON]:
    out = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    return to_jsonable_python(out)  # type: ignore[no-any-return]


def _load(cls: type[T], data: Any, where: str) -> T:
    if not isinstance(data, Mapping):
        raise InvalidRequest(f"{where} is not an object")
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - names)
    if unknown:
        raise InvalidRequest(f"{where}: unknown field(s) {', '.join(unknown)}")
    try:
        return _ADAPTERS[cls].validate_python(data)  # type: ignore[no-any-return]
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(map(str, err["loc"]))
        raise InvalidRequest(f"{where}.{field}: {err['msg']}") from None
