"""The replay report: what a re-execution did differently from the recording.

Pure: it compares two :class:`Recording` values (what the source lineage and the
replay recorded) node by node. For every node: its writes (with a field diff when
they differ), its effects compared by identity (node, name, occurrence) *and
request* — a changed prompt or API argument is a divergence even when the effect
has the same name — its error, and the recorded answers the replay re-used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ..core.jsonvalues import JSON, json_equal
from ..core.records import SERVED_STATUSES, EffectStatus, JournalEntry
from ..core.states import NodeStatus
from .diff import Change, diff


class Verdict(StrEnum):
    """What a replay found for one node, in words a person reads in the report."""

    SAME = "same"               # same outcome, writes and effect requests
    DIFFERENT = "different"     # writes, status or effects differ (see the diff)
    INHERITED = "inherited"     # finished at the replay's base: not re-executed
    NEW = "new"                 # the replayed graph has it, the recording does not
    MISSING = "missing"         # the recording has it, the replayed graph does not
    ERROR = "error"             # it failed in the replay (differently from the recording)
    NOT_RUN = "not run"         # it never ran in the replay
    PAUSED = "paused"           # it is waiting for an answer in the replay


class EffectVerdict(StrEnum):
    """What a replay found for one effect identity of a node."""

    SAME = "same"
    CHANGED = "changed"         # same identity, different request
    NEW = "new"
    MISSING = "missing"


V, EV = Verdict, EffectVerdict


@dataclass(frozen=True, slots=True)
class Recording:
    """What one side recorded, per node."""

    statuses: Mapping[str, NodeStatus]
    writes: Mapping[str, JSON]                      # succeeded nodes' writes
    errors: Mapping[str, str]                       # failed nodes' last error message
    effects: Mapping[str, Sequence[JournalEntry]]   # per node: the effective entry per identity


@dataclass(frozen=True, slots=True)
class EffectReport:
    name: str
    occurrence: int
    verdict: EffectVerdict
    request: JSON = None            # what the replay asked (None when missing)
    recorded_request: JSON = None   # what the recording asked (None when new)
    changes: tuple[Change, ...] = ()

    def to_json(self) -> dict[str, JSON]:
        return {"name": self.name, "occurrence": self.occurrence, "verdict": self.verdict,
                "request": self.request, "recorded_request": self.recorded_request,
                "diff": [c.to_json() for c in self.changes]}


@dataclass(frozen=True, slots=True)
class NodeReport:
    node: str
    verdict: Verdict
    recorded_status: str | None
    replay_status: str | None
    write_changes: tuple[Change, ...] = ()
    effects: tuple[EffectReport, ...] = ()
    error: str | None = None
    recorded_error: str | None = None
    reused_answers: tuple[str, ...] = ()   # interrupt ids whose recorded answers were given again

    def to_json(self) -> dict[str, JSON]:
        return {"node": self.node, "verdict": self.verdict, "recorded_status": self.recorded_status,
                "replay_status": self.replay_status, "writes_diff": [c.to_json() for c in self.write_changes],
                "effects": [e.to_json() for e in self.effects], "error": self.error,
                "recorded_error": self.recorded_error, "reused_answers": list(self.reused_answers)}


@dataclass(frozen=True, slots=True)
class ReplayReport:
    run_id: str                     # the replay run
    source_run_id: str              # the run it re-executed
    base_checkpoint_id: str
    status: str                     # the replay run's status
    nodes: tuple[NodeReport, ...]
    graph_version: str
    recorded_graph_version: str
    run: Any = field(default=None, compare=False)   # the replay Run record, for callers

    @property
    def same(self) -> bool:
        """True when every node did exactly what the recording did."""
        return all(n.verdict in (V.SAME, V.INHERITED) for n in self.nodes)

    def differences(self) -> list[NodeReport]:
        return [n for n in self.nodes if n.verdict not in (V.SAME, V.INHERITED)]

    def node(self, name: str) -> NodeReport:
        return next(n for n in self.nodes if n.node == name)

    def to_json(self) -> dict[str, JSON]:
        return {"run_id": self.run_id, "source_run_id": self.source_run_id,
                "base_checkpoint_id": self.base_checkpoint_id, "status": self.status, "same": self.same,
                "graph_version": self.graph_version, "recorded_graph_version": self.recorded_graph_version,
                "nodes": [n.to_json() for n in self.nodes]}


def effective_effects(entries: Sequence[JournalEntry]) -> dict[str, list[JournalEntry]]:
    """Per node, the effective record of each identity, in order: its last served one
    (succeeded or mocked), else its last failed call (a request was made; an effect that
    failed in the recording is not "new" to a replay that makes it again)."""
    latest: dict[tuple[str, str, int], JournalEntry] = {}
    for e in entries:
        ident = (e.node, e.name, e.occurrence)
        if e.status in SERVED_STATUSES:
            latest[ident] = e
        elif e.status == EffectStatus.FAILED:
            found = latest.get(ident)
            if found is None or found.status == EffectStatus.FAILED:
                latest[ident] = e
    out: dict[str, list[JournalEntry]] = {}
    for e in latest.values():
        out.setdefault(e.node, []).append(e)
    return out


def compare(order: Sequence[str], recorded: Recording, replayed: Recording, *,
            inherited: frozenset[str] = frozenset(),
            reused: Mapping[str, Sequence[str]] | None = None) -> list[NodeReport]:
    """One report per node of ``order`` (the replay graph's nodes, then any the recording
    had that the replay's graph does not)."""
    reused = reused or {}
    nodes = list(order) + [n for n in recorded.statuses if n not in set(order)]
    return [_node(n, n in order, recorded, replayed, n in inherited, tuple(reused.get(n, ())))
            for n in nodes]


def _node(node: str, in_graph: bool, rec: Recording, rep: Recording, inherited: bool,
          reused: tuple[str, ...]) -> NodeReport:
    before, after = rec.statuses.get(node), rep.statuses.get(node)
    base = {"node": node, "recorded_status": before.value if before else None,
            "replay_status": after.value if after and in_graph else None,
            "recorded_error": rec.errors.get(node), "reused_answers": reused}
    if inherited:
        return NodeReport(verdict=V.INHERITED, **base)  # type: ignore[arg-type]
    if not in_graph:
        return NodeReport(verdict=V.MISSING, **base)  # type: ignore[arg-type]
    effects = _effects(rec.effects.get(node, ()), rep.effects.get(node, ()))
    changes: tuple[Change, ...] = ()
    if after == NodeStatus.SUCCEEDED and before == NodeStatus.SUCCEEDED:
        changes = tuple(diff(rec.writes.get(node, {}), rep.writes.get(node, {})))
    error = rep.errors.get(node) if after == NodeStatus.FAILED else None
    if before is None:
        verdict = V.NEW
    elif after == NodeStatus.FAILED:
        verdict = V.SAME if before == NodeStatus.FAILED and error == rec.errors.get(node) else V.ERROR
    elif (after is None or after in (NodeStatus.PENDING, NodeStatus.RUNNING, NodeStatus.RETRYING,
                                     NodeStatus.CANCELLED)) and before != after:
        verdict = V.NOT_RUN   # (None: an instance the replay never created, e.g. a later loop iteration)
    elif after == NodeStatus.INTERRUPTED and before != after:
        verdict = V.PAUSED   # waiting for an answer (an unrecorded effect, a new question)
    elif before != after or changes or any(e.verdict != EV.SAME for e in effects):
        verdict = V.DIFFERENT
    else:
        verdict = V.SAME
    return NodeReport(verdict=verdict, write_changes=changes, effects=tuple(effects), error=error,
                      **base)  # type: ignore[arg-type]


def _effects(recorded: Sequence[JournalEntry], replayed: Sequence[JournalEntry]) -> list[EffectReport]:
    before = {(e.name, e.occurrence): e for e in recorded}
    after = {(e.name, e.occurrence): e for e in replayed}
    out: list[EffectReport] = []
    for ident, e in after.items():
        old = before.get(ident)
        if old is None:
            out.append(EffectReport(e.name, e.occurrence, EV.NEW, request=e.request))
        elif json_equal(old.request, e.request):   # (1 is not true: the diff would find no change)
            out.append(EffectReport(e.name, e.occurrence, EV.SAME, e.request, old.request))
        else:
            out.append(EffectReport(e.name, e.occurrence, EV.CHANGED, e.request, old.request,
                                    tuple(diff(old.request, e.request))))
    for ident, old in before.items():
        if ident not in after:
            out.append(EffectReport(old.name, old.occurrence, EV.MISSING, recorded_request=old.request))
    return out
