"""Export and import of a whole thread (every run in it, with all their records).

The document is plain JSON with a format name and version, so it can be read by
other tools and by later versions. Import checks the whole document, and that
none of its ids exist in the target store, before it writes anything; runs are
written oldest first, each with all of its records in one transaction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic_core import to_jsonable_python

from .errors import InvalidRequest, NotFound
from .records import (
    Batch,
    Checkpoint,
    EffectStatus,
    Interrupt,
    InterruptKind,
    InterruptStatus,
    JournalEntry,
    NodeAttempt,
    PendingWrite,
    Run,
    RunKind,
    TraceEvent,
    WriteKind,
)
from .states import NodeStatus, RunStatus
from .store.base import CheckpointStore

JSON = Any
FORMAT = "shadow-harness/thread"
VERSION = 1
_ALL = 10**9
T = TypeVar("T")

#: the records of one run in the document, and how each is rebuilt from JSON
_CONVERT: dict[str, tuple[type, dict[str, Callable[[Any], Any]]]] = {
    "checkpoints": (Checkpoint, {"nodes": tuple, "node_states": lambda d: {n: NodeStatus(s) for n, s in d.items()},
                                 "changed": lambda c: None if c is None else tuple(c)}),
    "pending_writes": (PendingWrite, {"kind": WriteKind}),
    "attempts": (NodeAttempt, {"status": NodeStatus}),
    "journal": (JournalEntry, {"status": EffectStatus}),
    "interrupts": (Interrupt, {"kind": InterruptKind, "status": InterruptStatus}),
    "events": (TraceEvent, {}),
}
_RUN_CONVERT: dict[str, Callable[[Any], Any]] = {"status": RunStatus, "kind": RunKind}


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
    for b in batches:
        store.create_run(b)
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
        run = _load(Run, item.get("run"), _RUN_CONVERT, f"{where}.run")
        # nobody holds its lease here: the imported run is at rest
        run = run.evolve(lease_owner=None, lease_expires_at=None)
        if run.parent_run_id is not None and run.parent_run_id not in seen:
            raise InvalidRequest(f"{where}: run {run.id}'s parent {run.parent_run_id} is not earlier in the file")
        seen.add(run.id)
        parts: dict[str, list[Any]] = {}
        for key, (cls, convert) in _CONVERT.items():
            rows = item.get(key, [])
            if not isinstance(rows, list):
                raise InvalidRequest(f"{where}.{key} is not a list")
            parts[key] = [_load(cls, row, convert, f"{where}.{key}[{j}]") for j, row in enumerate(rows)]
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


def _load(cls: type[T], data: Any, convert: Mapping[str, Callable[[Any], Any]], where: str) -> T:
    if not isinstance(data, Mapping):
        raise InvalidRequest(f"{where} is not an object")
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - names)
    if unknown:
        raise InvalidRequest(f"{where}: unknown field(s) {', '.join(unknown)}")
    try:
        values = {k: (convert[k](v) if k in convert and v is not None else v) for k, v in data.items()}
        return cls(**values)
    except (TypeError, ValueError, AttributeError) as e:
        raise InvalidRequest(f"{where}: {e}") from None
