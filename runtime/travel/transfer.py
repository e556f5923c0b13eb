"""Export and import of a whole thread (every run in it, with all their records).

The document is plain JSON with a format name and version, so it can be read by
other tools and by later versions. Import checks the whole document, and that
none of its ids exist in the target store, before it writes anything; runs are
written oldest first, each with all of its records in one transaction.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError
from pydantic_core import to_jsonable_python

from ..core.errors import HarnessError, InvalidRequest, NotFound, Problem
from ..core.jsonvalues import JSON, MAX_DEPTH, unstorable
from ..core.states import RunStatus
from ..core.records import (
    Batch,
    EffectsMode,
    Checkpoint,
    Interrupt,
    JournalEntry,
    NodeAttempt,
    PendingWrite,
    Run,
    TraceEvent,
    thread_id_problem,
)
from ..graph.refs import resolve_ref
from ..graph.spec import ExecutableGraph, made_as_described
from ..store.base import MAX_SEQ, CheckpointStore
from .branches import effects_mode
from .transfer_checks import (
    Check,
    GraphInfo,
    LoadedRun,
    Thread,
    check_graph_versions,
    check_references,
    check_settings,
    check_statuses,
    check_unique_ids,
)
from .transfer_records import (
    check_checkpoints,
    check_events,
    check_interrupts,
    check_journal,
    check_node_names,
    check_pending_writes,
    check_trace,
)
from .transfer_states import check_states

FORMAT = "shadow-harness/thread"
#: how many levels deeper a stored value sits in the document than in its store
DOCUMENT_LEVELS = 8
VERSION = 1
_ALL = 10**9
_SHOWN = 50   # problems listed in one error; the rest are counted
_UNSAFE_IN_ADDRESS = frozenset("/?#%\\") | frozenset(map(chr, range(1, 32))) | {chr(127)}   # NUL: said below
#: the last second of the year 9999 UTC: a later time (a count of milliseconds, say) no calendar shows
LAST_TIME = 253402300799.0
T = TypeVar("T")
#: the graph the importing Runtime has registered for a version, or None
GraphLookup = Callable[[str], ExecutableGraph | None]

#: how the document's records must fit together, each check returning what it finds wrong
CHECKS: tuple[Check, ...] = (
    check_unique_ids, check_graph_versions, check_statuses, check_references, check_settings,
    check_checkpoints, check_events, check_trace, check_node_names, check_pending_writes, check_journal,
    check_interrupts, check_states,
)

#: the records of one run in the document, by key
_PARTS: dict[str, type] = {"checkpoints": Checkpoint, "pending_writes": PendingWrite, "attempts": NodeAttempt,
                           "journal": JournalEntry, "interrupts": Interrupt, "events": TraceEvent}
_ADAPTERS: dict[type, TypeAdapter[Any]] = {cls: TypeAdapter(cls) for cls in (Run, *_PARTS.values())}


def export_thread(store: CheckpointStore, run_id: str) -> dict[str, JSON]:
    thread_id = store.get_run(run_id).thread_id
    runs = list(reversed(store.list_runs(thread_id=thread_id, limit=_ALL)))  # oldest first
    for r in runs:  # an import refuses a running run: say so now, not when the document is used
        if r.status in (RunStatus.RUNNING, RunStatus.QUEUED):
            raise InvalidRequest(f"run {r.id} of thread {thread_id} is {r.status.value}; an export holds "
                                 f"stopped runs: export it once the run ended or paused (if its process "
                                 f"died, resume or cancel it first)")
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


def import_thread(store: CheckpointStore, document: Mapping[str, JSON],
                  registered: GraphLookup | None = None, *, effects: str = EffectsMode.MOCK,
                  at: float = 0.0) -> list[Run]:
    """Check the whole document, then write all of its runs in one transaction.

    ``registered`` gives the graph the importing Runtime has registered for a version;
    failing that, the graph is imported by its ref (the store's, else the file's). Where
    the graph is known, states are checked against its state model. Any problem raises
    ``InvalidRequest`` listing all of them, and nothing is written.

    The runs' effects happened in the store they were exported from. With ``effects="mock"``
    (the default) whatever goes on from them here (a resume, a continuation) serves what
    they recorded and asks before running anything they did not; ``"live"`` lets them call
    the outside world again, as if this store were theirs. Each run is marked with the time
    it was imported and how (``options.imported``); the mode it was recorded with stays, so
    that a copy imported live again runs as its original did (a mocked fork stays mocked)."""
    mode = effects_mode(effects)
    try:
        thread, descriptions = load(document, store, registered)
        _check_new(store, thread)
        found = [p for check in CHECKS for p in check(thread)]
    except RecursionError:  # values nested deeper than anything here can walk
        raise InvalidRequest("exported thread nests its values too deeply to be read") from None
    if found:
        raise InvalidRequest(_report(found))
    for version, desc in descriptions.items():
        # what this store already knows of a version (its ref, above all) is not replaced by a file's
        if desc.get("name") and store.graph_description(version) is None:
            store.save_graph(desc)
    batches = [dataclasses.replace(r.batch, run=_imported(r.run, mode, at)) for r in thread.runs]
    store.create_runs(batches)  # all of them, or none
    return [b.run for b in batches if b.run is not None]


def _imported(run: Run, mode: EffectsMode, at: float) -> Run:
    """The run as this store keeps it: at rest (nobody here holds the lease a continuation
    left on it), marked as imported, and with its effects mocked unless ``mode`` is live."""
    options = {**run.options, "imported": {"at": at, "effects": mode.value}}
    return run.evolve(lease_owner=None, lease_expires_at=None, options=options)


def load(document: Any, store: CheckpointStore | None,
         registered: GraphLookup | None) -> tuple[Thread, dict[str, Mapping[str, JSON]]]:
    """The document with every record's field types checked, and its graph descriptions
    by version; ``InvalidRequest`` listing every problem found."""
    if not isinstance(document, Mapping) or document.get("format") != FORMAT:
        raise InvalidRequest(f"not an exported thread (expected \"format\": \"{FORMAT}\")")
    if document.get("version") != VERSION:
        raise InvalidRequest(f"exported thread version {document.get('version')!r} is not supported "
                             f"(this version reads {VERSION})")
    items = document.get("runs")
    if not isinstance(items, list) or not items:
        raise InvalidRequest("exported thread has no runs")
    found: list[Problem] = []
    bad = unstorable(document, MAX_DEPTH + DOCUMENT_LEVELS)
    if bad is not None:
        found.append(Problem("document", bad))
    thread_id = document.get("thread_id")
    problem = thread_id_problem(thread_id)
    if problem is not None:
        found.append(Problem("thread_id", problem))
    runs = [r for i, item in enumerate(items) if (r := _load_run(i, item, found)) is not None]
    descriptions = _descriptions(document.get("graphs", []), found)
    used = {r.run.graph_version for r in runs}
    graphs = {v: _graph_info(v, where, desc, store, registered, found)
              for v, (where, desc) in descriptions.items() if v in used}
    if found:
        raise InvalidRequest(_report(found))
    return (Thread(str(thread_id), tuple(runs), graphs),
            {v: desc for v, (_, desc) in descriptions.items()})


def _load_run(i: int, item: Any, found: list[Problem]) -> LoadedRun | None:
    where = f"runs[{i}]"
    if not isinstance(item, Mapping):
        found.append(Problem(where, "is not an object"))
        return None
    before = len(found)
    run = _load(Run, item.get("run"), f"{where}.run", found)
    parts: dict[str, list[Any]] = {}
    for key, cls in _PARTS.items():
        rows = item.get(key, [])
        if not isinstance(rows, list):
            found.append(Problem(f"{where}.{key}", "is not a list"))
            continue
        parts[key] = [_load(cls, row, f"{where}.{key}[{j}]", found) for j, row in enumerate(rows)]
        strangers = {r.run_id for r in parts[key] if r is not None} - {run.id if run else None}
        if run is not None and strangers and key != "journal":  # the journal is checked with the lineage
            found.append(Problem(f"{where}.{key} holds records of run(s) {', '.join(sorted(strangers))}",
                                 f"expected only records of run {run.id}"))
    if run is None or len(found) > before:
        return None
    batch = Batch(run_id=run.id, run=run, checkpoints=parts["checkpoints"], writes=parts["pending_writes"],
                  attempts=parts["attempts"], effects=parts["journal"], interrupts=parts["interrupts"],
                  events=parts["events"], durable=True)
    return LoadedRun(i, run, batch, item)


def _descriptions(graphs: Any, found: list[Problem]) -> dict[str, tuple[str, Mapping[str, JSON]]]:
    """The document's graph descriptions by version, with where each is."""
    if not isinstance(graphs, list):
        found.append(Problem("graphs", "is not a list"))
        return {}
    out: dict[str, tuple[str, Mapping[str, JSON]]] = {}
    for k, desc in enumerate(graphs):
        where = f"graphs[{k}]"
        if not isinstance(desc, Mapping) or not isinstance(desc.get("version"), str) or not desc["version"]:
            found.append(Problem(where, "must be an object with a \"version\" string"))
            continue
        version = desc["version"]
        if version in out:
            found.append(Problem(where, f"describes version {version} again (first at {out[version][0]})"))
        for field in ("name", "ref"):
            if desc.get(field) is not None and not isinstance(desc[field], str):
                found.append(Problem(f"{where}.{field}", f"must be a string, got {desc[field]!r}"))
        order = desc.get("order")
        if order is not None and not _node_list(order):
            found.append(Problem(f"{where}.order", "must be a list of distinct node names"))
        out.setdefault(version, (where, desc))
    return out


def _graph_info(version: str, where: str, desc: Mapping[str, JSON], store: CheckpointStore | None,
                registered: GraphLookup | None, found: list[Problem]) -> GraphInfo:
    """What is known of one version; what this Runtime and store know outranks the file."""
    stored = (store.graph_description(version) if store is not None else None) or {}
    graph = registered(version) if registered is not None else None
    # the graph later reads will use: registered, else by the stored ref (the file's, once stored)
    ref = stored.get("ref") or desc.get("ref")
    if graph is None and isinstance(ref, str) and ref:
        graph = _resolve(ref, version, stored or desc)
    if graph is not None:
        known: list[str] | None = list(graph.order)
    else:
        known = list(stored["order"]) if _node_list(stored.get("order")) else None
    listed = list(desc["order"]) if _node_list(desc.get("order")) else None
    if listed is not None and known is not None and set(listed) != set(known):
        found.append(Problem(f"{where}.order", f"lists nodes {', '.join(listed)} for graph version {version}, "
                                               f"which has nodes {', '.join(known)} here"))
    nodes = known if known is not None else listed
    name = desc.get("name")
    return GraphInfo(version, name if isinstance(name, str) else None,
                     tuple(nodes) if nodes is not None else None, graph)


def _resolve(ref: str, version: str, described: Mapping[str, Any]) -> ExecutableGraph | None:
    try:
        graph = resolve_ref(ref)
    except HarnessError:  # not importable here: its states are checked as JSON objects only
        return None
    # its code changed since, unless only its version's name did (recorded before versions named reducers)
    return graph if graph.version == version or made_as_described(graph, version, described) else None


def _node_list(value: Any) -> bool:
    return (isinstance(value, list) and all(isinstance(n, str) and n for n in value)
            and len(set(value)) == len(value))


def _check_new(store: CheckpointStore, thread: Thread) -> None:
    """The document's ids must be new here: an import never touches what a store holds."""
    for r in thread.runs:
        try:
            store.get_run(r.run.id)
        except NotFound:
            continue
        raise InvalidRequest(f"run {r.run.id} already exists in this store; import into another store")
    for r in thread.runs:
        for j, i in enumerate(r.batch.interrupts):
            try:   # one read each, by id: not every interrupt the store holds
                existing = store.interrupt(i.id)
            except NotFound:
                continue
            # a store would answer (or move) the interrupt it has
            raise InvalidRequest(f"{r.at('interrupts', j)}: interrupt {existing.id} already exists in this store "
                                 f"(run {existing.run_id}); import into another store")
    if store.list_runs(thread_id=thread.thread_id, limit=1):
        # the imported runs would join that conversation: its next turn would follow them
        raise InvalidRequest(f"thread {thread.thread_id} already exists in this store; import into another store")


def _report(found: list[Problem]) -> str:
    if len(found) == 1:
        return str(found[0])
    lines = [f"  - {p}" for p in found[:_SHOWN]]
    if len(found) > _SHOWN:
        lines.append(f"  … and {len(found) - _SHOWN} more")
    return f"invalid exported thread ({len(found)} problems):\n" + "\n".join(lines)


def _dump(record: Any) -> dict[str, JSON]:
    out = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    # a checkpoint's statuses may be a read-only Mapping (``StatusLayers``): as a dict
    return to_jsonable_python(out, fallback=_plain)  # type: ignore[no-any-return]


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"cannot export a value of type {type(value).__name__}")


def _load(cls: type[T], data: Any, where: str, found: list[Problem]) -> T | None:
    if not isinstance(data, Mapping):
        found.append(Problem(where, "is not an object"))
        return None
    fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - fields)
    if unknown:
        found.append(Problem(where, f"unknown field(s) {', '.join(map(str, unknown))}"))
        return None
    try:
        record = _ADAPTERS[cls].validate_python(data)
    except ValidationError as e:
        found.extend(Problem(f"{where}.{'.'.join(map(str, err['loc']))}", err["msg"]) for err in e.errors())
        return None
    # validation turns the strings "NaN" and "Infinity" into floats that have no JSON form
    # (non-finite floats themselves are reported with the whole document's)
    odd = [f.name for f in dataclasses.fields(record) if isinstance(v := getattr(record, f.name), float)
           and not math.isfinite(v) and not isinstance(data[f.name], float)]
    found.extend(Problem(f"{where}.{name}", f"is {data[name]!r}, which is not a finite number") for name in odd)
    # every whole number of a record (a seq, an attempt, a fence) counts up from 0, and a store
    # keeps at most MAX_SEQ (PostgreSQL's are 32-bit): refused here, not by the database midway
    wide = [f.name for f in dataclasses.fields(record) if type(v := getattr(record, f.name)) is int
            and not 0 <= v <= MAX_SEQ]
    found.extend(Problem(f"{where}.{name}", f"is {getattr(record, name)}, out of range: a whole number from 0 "
                                            f"to {MAX_SEQ}") for name in wide)
    # a time is seconds since 1970 that a calendar shows (not milliseconds, not before 1970)
    times = [f.name for f in dataclasses.fields(record) if (f.name == "at" or f.name.endswith("_at"))
             and isinstance(v := getattr(record, f.name), float) and math.isfinite(v) and not 0 <= v <= LAST_TIME]
    found.extend(Problem(f"{where}.{name}", f"is {getattr(record, name)!r}, not a time: seconds since "
                                            f"1970-01-01 UTC, before the year 10000") for name in times)
    # a run's, a checkpoint's or a question's id is a segment of the debugger's addresses
    unsafe = [f.name for f in dataclasses.fields(record) if f.name == "id"
              and isinstance(v := getattr(record, f.name), str) and (not v.strip() or _UNSAFE_IN_ADDRESS & set(v))]
    found.extend(Problem(f"{where}.{name}", f"is {getattr(record, name)!r}: an id names a page of the debugger, "
                                            f"so it is not blank and holds no '/', '?', '#', '%', '\\' "
                                            f"or control character") for name in unsafe)
    # text columns (ids, names, keys) cannot hold NUL on PostgreSQL: refused here on every store
    # (an error's or a decision's text is free text, which the stores keep as it is)
    nul = [f.name for f in dataclasses.fields(record) if str(f.type).startswith("str")
           and f.name not in ("error", "decision") and isinstance(v := getattr(record, f.name), str) and "\x00" in v]
    found.extend(Problem(f"{where}.{name}", "holds a NUL character, which no id or name may") for name in nul)
    return None if odd or wide or times or unsafe or nul else record
