"""The model of an exported thread under import, and the checks of its runs as a whole.

``transfer`` loads the document (field types) and names the graph of every version.
The checks look at what a type cannot say, each returning the problems it finds, so
one error lists everything wrong with a document, as graph validation does: here,
ids, graph versions, statuses only a live run can have, references between runs, and
run settings; a run's records in ``transfer_records``; states in ``transfer_states``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Set
from dataclasses import dataclass
from typing import Any

from ..core.errors import Problem
from ..core.records import Batch, EffectsMode, Run, RunKind
from ..core.states import RunStatus
from ..graph.spec import ExecutableGraph
from ..history.state import DROPPED_FIELDS
from ..store.base import MAX_SEQ

__all__ = ["Check", "GraphInfo", "LoadedRun", "Thread", "check_graph_versions", "check_references", "check_settings",
           "check_statuses", "check_unique_ids", "is_integer", "is_member", "is_number", "names"]


@dataclass(frozen=True, slots=True)
class GraphInfo:
    """One graph version as the import knows it."""

    version: str
    name: str | None
    #: its node names: from this Runtime's graph when it has it, else from the document
    nodes: tuple[str, ...] | None
    #: the graph's code, when this Runtime has it (then states are checked against its model)
    graph: ExecutableGraph | None


@dataclass(frozen=True, slots=True)
class LoadedRun:
    """One run of the document with its records, loaded with their field types checked."""

    index: int
    run: Run
    batch: Batch
    #: the document's item for this run, for fields whose presence matters (a mocked result)
    raw: Mapping[str, Any]

    def at(self, key: str | None = None, j: int | None = None) -> str:
        """Where a record is: ``runs[0].checkpoints[3] (run run_…)``."""
        path = f"runs[{self.index}]" + (f".{key}" if key else "") + (f"[{j}]" if j is not None else "")
        return f"{path} (run {self.run.id})"


@dataclass(frozen=True, slots=True)
class Thread:
    thread_id: str
    runs: tuple[LoadedRun, ...]
    graphs: Mapping[str, GraphInfo]

    def find(self, run_id: str | None) -> LoadedRun | None:
        return next((r for r in self.runs if r.run.id == run_id), None)

    def nodes_of(self, r: LoadedRun) -> frozenset[str] | None:
        info = self.graphs.get(r.run.graph_version)
        return frozenset(info.nodes) if info is not None and info.nodes is not None else None

    def lineage(self, r: LoadedRun) -> list[str]:
        """The run and the runs it continues, nearest first (as far as the document holds them)."""
        out, seen = [r.run.id], {r.run.id}
        run: LoadedRun | None = r
        while run is not None and run.run.kind == RunKind.CONTINUATION and run.run.parent_run_id not in seen:
            run = self.find(run.run.parent_run_id)
            if run is not None:
                out.append(run.run.id)
                seen.add(run.run.id)
        return out


Check = Callable[[Thread], Iterator[Problem]]


def names(items: Iterable[str]) -> str:
    return ", ".join(repr(n) for n in items)


def is_member(value: Any, known: Set[str]) -> bool:
    return isinstance(value, str) and value in known


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_unique_ids(t: Thread) -> Iterator[Problem]:
    """Run, checkpoint and interrupt ids name one record each."""
    first: dict[tuple[str, str], str] = {}
    for r in t.runs:
        ids = [("run", r.at("run"), r.run.id)]
        ids += [("checkpoint", r.at("checkpoints", j), cp.id) for j, cp in enumerate(r.batch.checkpoints)]
        ids += [("interrupt", r.at("interrupts", j), i.id) for j, i in enumerate(r.batch.interrupts)]
        for kind, where, ident in ids:
            if (kind, ident) in first:
                yield Problem(where, f"{kind} id {ident} repeats {first[kind, ident]}")
            else:
                first[kind, ident] = where


def check_graph_versions(t: Thread) -> Iterator[Problem]:
    """Every run's graph version is described, with its nodes."""
    for r in t.runs:
        version = r.run.graph_version
        info = t.graphs.get(version)
        if info is None:
            yield Problem(r.at("run"), f"unknown graph version {version}: the document's graphs have no entry for it")
        elif info.nodes is None:
            yield Problem(r.at("run"), f"graph version {version} lists no nodes (order) in the document's "
                                       f"graphs, and this Runtime does not have that graph")
        elif info.name is not None and info.name != r.run.graph_name:
            yield Problem(r.at("run"), f"graph_name {r.run.graph_name!r} differs from {info.name!r}, the name "
                                       f"of graph version {version} in the document's graphs")


def check_statuses(t: Thread) -> Iterator[Problem]:
    """Exported runs are at rest: not running or queued, and holding no lease."""
    continued_by = {r.run.parent_run_id: r.run for r in t.runs if r.run.kind == RunKind.CONTINUATION}
    for r in t.runs:
        run = r.run
        if run.status in (RunStatus.RUNNING, RunStatus.QUEUED):
            yield Problem(r.at("run"), f"status {run.status.value!r}: an export holds stopped runs (a "
                                       f"{run.status.value} run here would look like one whose process died)")
        if run.lease_owner is None and run.lease_expires_at is None:
            continue
        # continuing a run takes its lease (to fence out a second resume) and leaves it to expire
        child = continued_by.get(run.id)
        if (child is not None and run.lease_owner is not None and run.lease_expires_at is not None
                and run.lease_expires_at <= child.created_at):
            continue
        yield Problem(r.at("run"), f"holds a lease (lease_owner {run.lease_owner!r}, lease_expires_at "
                                   f"{run.lease_expires_at!r}); a stopped run holds none")


def check_references(t: Thread) -> Iterator[Problem]:
    """Threads, parents and base checkpoints point at what the document holds."""
    owner = {cp.id: r for r in t.runs for cp in r.batch.checkpoints}
    earlier: set[str] = set()
    for r in t.runs:
        run = r.run
        if run.thread_id != t.thread_id:
            yield Problem(r.at("run"), f"belongs to thread {run.thread_id}, not to the exported thread {t.thread_id}")
        if run.kind == RunKind.MAIN and not run.options.get("turn"):
            if run.parent_run_id is not None or run.base_checkpoint_id is not None:
                yield Problem(r.at("run"), "a main run starts a lineage (unless it is a conversation turn): "
                                           "it has no parent_run_id or base_checkpoint_id")
        else:
            yield from _branch_references(t, r, earlier, owner)
        earlier.add(run.id)


def _branch_references(t: Thread, r: LoadedRun, earlier: set[str],
                       owner: Mapping[str, LoadedRun]) -> Iterator[Problem]:
    run = r.run
    parent = t.find(run.parent_run_id) if run.parent_run_id in earlier else None
    if run.parent_run_id is None:
        yield Problem(r.at("run"), f"a {run.kind.value} run needs a parent_run_id")
    elif parent is None:
        yield Problem(r.at("run"), f"parent {run.parent_run_id} is not earlier in the document")
    base = run.base_checkpoint_id
    if base is None:
        yield Problem(r.at("run"), f"a {run.kind.value} run needs a base_checkpoint_id")
    elif base not in owner:
        yield Problem(r.at("run"), f"base_checkpoint_id {base} is not a checkpoint in the document")
    elif parent is not None and owner[base].run.id not in t.lineage(parent):
        # a replay of a continued run starts at the first checkpoint of the run it continues
        yield Problem(r.at("run"), f"base checkpoint {base} belongs to run {owner[base].run.id}, not to its "
                                   f"parent {parent.run.id} (or a run that parent continues)")
    if parent is None:
        return
    if run.kind in (RunKind.FORK, RunKind.CONTINUATION) and parent.run.graph_version != run.graph_version:
        yield Problem(r.at("run"), f"a {run.kind.value} runs its parent's graph version "
                                   f"{parent.run.graph_version}, not {run.graph_version}")
    if run.kind == RunKind.CONTINUATION and parent.run.status not in (RunStatus.FAILED, RunStatus.CANCELLED):
        yield Problem(r.at("run"), f"continues run {parent.run.id}, which is {parent.run.status.value}; only "
                                   f"failed or cancelled runs are continued")


def check_settings(t: Thread) -> Iterator[Problem]:
    """Options, limits and usage hold the types the run loop reads."""
    run_ids = {r.run.id for r in t.runs}
    cps = {cp.id for r in t.runs for cp in r.batch.checkpoints}
    for r in t.runs:
        run, where = r.run, r.at("run")
        yield from (Problem(where, p) for p in _option_problems(run.options, run_ids, cps))
        for key in ("deadline_s", "deadline_at", "max_steps", "max_tokens", "max_cost"):  # null: no limit
            if run.limits.get(key) is not None and not is_number(run.limits[key]):
                yield Problem(where, f"limits.{key} must be a number, got {run.limits[key]!r}")
        for key in ("tokens", "cost", "steps"):  # resuming adds to them
            if key in run.usage and not is_number(run.usage[key]):
                yield Problem(where, f"usage.{key} must be a number, got {run.usage[key]!r}")
        if run.max_concurrency < 1:
            yield Problem(where, f"max_concurrency must be at least 1, got {run.max_concurrency}")


def _option_problems(opts: Mapping[str, Any], run_ids: Set[str], cps: Set[str]) -> Iterator[str]:
    modes = {m.value for m in EffectsMode}
    if "effects" in opts and not is_member(opts["effects"], modes):
        yield f"options.effects must be one of {names(sorted(modes))}, got {opts['effects']!r}"
    if "mocks" in opts and not isinstance(opts["mocks"], Mapping):
        yield "options.mocks must be an object of {effect name: result}"
    policy = opts.get("compensate_on", [])
    if not isinstance(policy, list) or any(s not in ("failed", "cancelled") for s in policy):
        yield f"options.compensate_on must list 'failed' and/or 'cancelled', got {policy!r}"
    dropped = opts.get(DROPPED_FIELDS, [])
    if not isinstance(dropped, list) or not all(isinstance(f, str) for f in dropped):
        yield f"options.{DROPPED_FIELDS} must list field names, got {dropped!r}"
    imported = opts.get("imported", {"at": 0.0, "effects": EffectsMode.LIVE.value})
    if not (isinstance(imported, Mapping) and is_number(imported.get("at"))
            and is_member(imported.get("effects"), modes)):
        yield f"options.imported must be an object {{at: time, effects: {names(sorted(modes))}}}, got {imported!r}"
    turn = opts.get("turn", 1)   # a thread's turn number: the next turn counts on from it
    if not is_integer(turn) or not 1 <= turn <= MAX_SEQ:
        yield f"options.turn must be a whole number from 1, got {turn!r}"
    for flag in ("patched", "compare"):
        if not isinstance(opts.get(flag, False), bool):
            yield f"options.{flag} must be true or false, got {opts[flag]!r}"
    source = opts.get("source", {})
    if not isinstance(source, Mapping):
        yield "options.source must be an object {run_id, checkpoint_id}"
        return
    if source.get("run_id") is not None and not is_member(source["run_id"], run_ids):
        yield f"options.source.run_id {source['run_id']!r} is not a run in the document"
    if source.get("checkpoint_id") is not None and not is_member(source["checkpoint_id"], cps):
        yield f"options.source.checkpoint_id {source['checkpoint_id']!r} is not a checkpoint in the document"
