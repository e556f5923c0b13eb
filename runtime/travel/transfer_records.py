"""Checks of one run's records in an exported thread: sequences, node names, the trace,
outcomes, the effect journal and interrupts. See ``transfer_checks`` for the model."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ..core.errors import IllegalTransition, Problem
from ..core.records import Checkpoint, EffectStatus, InterruptKind, InterruptStatus, JournalEntry, RunKind, WriteKind
from ..core.states import NodeEvent, NodeStatus, RunStatus, next_node_status
from ..graph.instances import base_node
from .transfer_checks import LoadedRun, Thread, is_integer, is_member, is_number, names

__all__ = ["check_checkpoints", "check_events", "check_interrupts", "check_journal", "check_node_names",
           "check_pending_writes", "check_trace"]

_NODE_EVENTS = frozenset(e.value for e in NodeEvent)
_STATUSES = frozenset(s.value for s in NodeStatus)


def check_checkpoints(t: Thread) -> Iterator[Problem]:
    """Checkpoints are numbered 0..n-1, each the child of the one before, and agree with the run."""
    for r in t.runs:
        run, cps = r.run, r.batch.checkpoints
        if not cps:
            yield Problem(r.at("checkpoints"), f"run {run.id} has no checkpoints")
            continue
        nodes = t.nodes_of(r) or frozenset()   # unknown: reported by check_graph_versions
        held: dict[str, NodeStatus] = {}   # the statuses as a store reads them back at the checkpoint before
        # the state every later one is folded from (a turn folds from the turn before it)
        if cps[0].snapshot is None and not (run.kind == RunKind.MAIN and run.options.get("turn")):
            yield Problem(r.at("checkpoints", 0), "a run's first checkpoint holds the full state (snapshot)")
        for j, cp in enumerate(cps):
            where = r.at("checkpoints", j)
            if cp.seq != j:
                yield Problem(where, f"seq is {cp.seq}, expected {j}: a run's checkpoints are numbered "
                                     f"0, 1, 2, … with none missing")
            parent, what = ((run.base_checkpoint_id, "the run's base_checkpoint_id") if j == 0
                            else (cps[j - 1].id, "the checkpoint before it"))
            if cp.parent_id != parent:
                yield Problem(where, f"parent_id is {cp.parent_id!r}, expected {parent!r} ({what})")
            if j and cp.event_seq < cps[j - 1].event_seq:
                yield Problem(where, f"event_seq {cp.event_seq} is lower than that of the checkpoint before "
                                     f"it ({cps[j - 1].event_seq})")
            if not 0 <= cp.event_seq <= run.event_seq:
                yield Problem(where, f"event_seq {cp.event_seq} is not between 0 and the run's event_seq "
                                     f"{run.event_seq}")
            if j:
                yield from _status_changes(where, cp, held, nodes)
            held.update(cp.node_states)
        if run.head_seq != cps[-1].seq:
            yield Problem(r.at("run"), f"head_seq is {run.head_seq}, but its last checkpoint is seq {cps[-1].seq}")


def _status_changes(where: str, cp: Checkpoint, held: Mapping[str, NodeStatus],
                    nodes: frozenset[str]) -> Iterator[Problem]:
    """Stores keep a checkpoint's node statuses as its changes over the checkpoint before
    (the SQL store writes the status of each node ``changed`` names): every change must be
    there to write, and no status can be taken away."""
    states = cp.node_states

    def instance(n: str) -> bool:   # a graph's own node, or a stranger, is reported by check_node_names
        return n not in nodes and base_node(n) in nodes

    unheld = [n for n in cp.changed or () if n not in states and instance(n)]
    if unheld:
        yield Problem(where, f"changed names node(s) {names(unheld)}, which node_states lack: a checkpoint "
                             f"holds the status of every node it says changed")
    dropped = [n for n in held if n not in states and n not in unheld and instance(n)]
    if dropped:
        yield Problem(where, f"node_states lack node(s) {names(dropped)}, which the checkpoint before it "
                             f"holds: once a node has a status, every later checkpoint holds one")
    if cp.changed is not None:
        moved = [n for n, s in states.items() if held.get(n) != s and n not in cp.changed]
        if moved:  # a missing one would be lost
            yield Problem(where, f"changed omits node(s) {names(moved)}, whose status differs from "
                                 f"the checkpoint before it")


def check_events(t: Thread) -> Iterator[Problem]:
    """Events are numbered 1..m, the run's event_seq is the last; node events are known ones."""
    for r in t.runs:
        events = r.batch.events
        for j, ev in enumerate(events):
            where = r.at("events", j)
            if ev.seq != j + 1:
                yield Problem(where, f"seq is {ev.seq}, expected {j + 1}: a run's events are numbered "
                                     f"1, 2, 3, … with none missing")
            if ev.type.startswith("node."):
                if ev.type[5:] not in _NODE_EVENTS:
                    yield Problem(where, f"unknown node event type {ev.type!r}; known: "
                                         f"{', '.join('node.' + e for e in sorted(_NODE_EVENTS))}")
                elif ev.node is None:
                    yield Problem(where, f"a {ev.type} event names no node")
            if ev.type == "node.retry" and not is_number(ev.data.get("retry_in", 0.0)):
                yield Problem(where, f"retry_in must be a number, got {ev.data.get('retry_in')!r}")
        if r.run.event_seq != len(events):
            yield Problem(r.at("run"), f"event_seq is {r.run.event_seq}, but the run has {len(events)} event(s)")
        # every change of a run's status is a run event carrying the new status
        last = next((j for j in reversed(range(len(events)))
                     if events[j].type.startswith("run.") and "status" in events[j].data), None)
        if last is None:
            yield Problem(r.at("run"), "its events record no run status (run.created comes first)")
        elif events[last].data["status"] != r.run.status.value:
            yield Problem(r.at("run"), f"status is {r.run.status.value!r}, but its last run event "
                                       f"({r.at('events', last)}, {events[last].type}) recorded "
                                       f"{events[last].data['status']!r}")


def check_trace(t: Thread) -> Iterator[Problem]:
    """Every checkpoint's node states are what the node events up to its event_seq rebuild
    (the trace and the checkpoints tell one story); the first difference of a run is named."""
    for r in t.runs:
        nodes, events, cps = t.nodes_of(r), r.batch.events, r.batch.checkpoints
        if (nodes is None or [e.seq for e in events] != list(range(1, len(events) + 1))
                or any(not nodes <= set(cp.node_states) or any(base_node(n) not in nodes for n in cp.node_states)
                       for cp in cps)
                or any(a.event_seq > b.event_seq for a, b in zip(cps, cps[1:]))):
            continue  # reported by the checks of events, checkpoints and node names
        yield from _replay_trace(r, {n: NodeStatus.PENDING for n in nodes})


def _replay_trace(r: LoadedRun, states: dict[str, NodeStatus]) -> Iterator[Problem]:
    cps, k = r.batch.checkpoints, 0
    for j, ev in enumerate(r.batch.events):
        while k < len(cps) and cps[k].event_seq < ev.seq:  # the states as of each checkpoint
            found = _differs(r, k, cps[k], states)
            if found:
                yield found
                return
            k += 1
        where = r.at("events", j)
        if ev.type == "run.created":
            inherited = ev.data.get("inherited") or {}
            odd = ([f"{n}={s}" for n, s in inherited.items()   # a loop's or map's instances too
                    if (n not in states and base_node(n) not in states) or not is_member(s, _STATUSES)]
                   if isinstance(inherited, Mapping) else [repr(inherited)])
            if odd:
                yield Problem(where, f"inherited must map nodes of the graph to node statuses; got {', '.join(odd)}")
                return
            states.update({n: NodeStatus(s) for n, s in inherited.items()})
        elif (ev.type.startswith("node.") and ev.node is not None and ev.type[5:] in _NODE_EVENTS
              and (ev.node in states or base_node(ev.node) in states)):
            try:   # a loop's or map's instance is pending until its first event
                states[ev.node] = next_node_status(states.get(ev.node, NodeStatus.PENDING), NodeEvent(ev.type[5:]))
            except IllegalTransition as e:
                yield Problem(where, f"{e} (node {ev.node!r})")
                return
    for j in range(k, len(cps)):
        found = _differs(r, j, cps[j], states)
        if found:
            yield found
            return


def _differs(r: LoadedRun, j: int, cp: Checkpoint, states: Mapping[str, NodeStatus]) -> Problem | None:
    odd = [f"{n} is {s.value} (the events say {states.get(n, NodeStatus.PENDING).value})"
           for n, s in cp.node_states.items() if states.get(n, NodeStatus.PENDING) != s]
    if not odd:
        return None
    return Problem(r.at("checkpoints", j), f"node_states disagree with the run's events up to event_seq "
                                           f"{cp.event_seq}: {'; '.join(odd)}")


def check_node_names(t: Thread) -> Iterator[Problem]:
    """Every node a record names is a node of the run's graph; checkpoints hold every node's status."""
    for r in t.runs:
        nodes = t.nodes_of(r)
        if nodes is None:
            continue  # reported by check_graph_versions
        graph = f"graph {r.run.graph_name!r} version {r.run.graph_version}"
        for j, cp in enumerate(r.batch.checkpoints):
            where = r.at("checkpoints", j)
            for field, named in (("node_states", cp.node_states), ("nodes", cp.nodes), ("changed", cp.changed or ())):
                found = _unknown(named, nodes, graph)
                if found:
                    yield Problem(where, f"{field} {found}")
            missing = sorted(nodes - set(cp.node_states))
            if missing:
                yield Problem(where, f"node_states lack node(s) {names(missing)}: a checkpoint holds the status "
                                     f"of every node of {graph}")
        parts: tuple[tuple[str, list[Any]], ...] = (
            ("pending_writes", r.batch.writes), ("attempts", r.batch.attempts), ("journal", r.batch.effects),
            ("interrupts", r.batch.interrupts), ("events", r.batch.events))
        for key, records in parts:
            for j, record in enumerate(records):
                found = _unknown([record.node], nodes, graph)
                if found:
                    yield Problem(r.at(key, j), found)


def _unknown(named: Iterable[str | None], nodes: frozenset[str], graph: str) -> str | None:
    odd = [n for n in named if n is not None and n not in nodes and base_node(n) not in nodes]
    return f"names node(s) {names(odd)}, which {graph} does not have" if odd else None


def check_pending_writes(t: Thread) -> Iterator[Problem]:
    """Node outcomes belong to a checkpoint of the run, are objects, and name the run's interrupts."""
    for r in t.runs:
        interrupts = {i.id for i in r.batch.interrupts}
        for j, w in enumerate(r.batch.writes):
            where = r.at("pending_writes", j)
            if not 0 <= w.checkpoint_seq <= r.run.head_seq:
                yield Problem(where, f"checkpoint_seq {w.checkpoint_seq} is not a checkpoint of the run "
                                     f"(0 to head_seq {r.run.head_seq})")
            if not isinstance(w.value, Mapping):
                yield Problem(where, f"value of a {w.kind.value!r} outcome must be an object, "
                                     f"got {type(w.value).__name__}")
            elif w.kind == WriteKind.INTERRUPT and not is_member(w.value.get("interrupt_id"), interrupts):
                yield Problem(where, f"names interrupt {w.value.get('interrupt_id')!r}, which is not one of "
                                     f"the run's interrupts")


def check_journal(t: Thread) -> Iterator[Problem]:
    """Journal entries are the run's own (or a run it continues), and agree with its outcome."""
    for r in t.runs:
        own = t.lineage(r)
        latest: dict[tuple[str, str, str, int], tuple[int, JournalEntry]] = {}
        for j, e in enumerate(r.batch.effects):
            where = r.at("journal", j)
            if e.run_id not in own:
                yield Problem(where, f"belongs to run {e.run_id}, which is neither run {r.run.id} nor a run it "
                                     f"continues earlier in the document")
            if e.status == EffectStatus.MOCKED and "result" not in r.raw["journal"][j]:
                yield Problem(where, f"the entry of mocked effect {e.name!r} has no result field (the result "
                                     f"the run was served)")
            latest[(e.run_id, e.node, e.name, e.occurrence)] = (j, e)
        if r.run.status != RunStatus.SUCCEEDED:
            continue
        for j, e in latest.values():
            if e.status == EffectStatus.STARTED:
                yield Problem(r.at("journal", j), f"effect {e.name!r} #{e.occurrence} of node {e.node!r} ends "
                                                  f"'started' (outcome never recorded), but the run succeeded")


def check_interrupts(t: Thread) -> Iterator[Problem]:
    """Interrupts carry the payload readers expect; an interrupted run waits on one."""
    for r in t.runs:
        for j, i in enumerate(r.batch.interrupts):
            where = r.at("interrupts", j)
            payload = i.payload
            if payload is not None and not isinstance(payload, Mapping):
                yield Problem(where, f"payload must be an object, got {type(payload).__name__}")
                continue
            ref = (payload or {}).get("response_ref")
            if ref is not None and not isinstance(ref, str):
                yield Problem(where, f"payload.response_ref must be a string, got {type(ref).__name__}")
            if i.kind != InterruptKind.USER:  # the runtime's own questions about an effect
                value = (payload or {}).get("value")
                if not (isinstance(value, Mapping) and isinstance(value.get("effect"), str)
                        and is_integer(value.get("occurrence"))):
                    yield Problem(where, f"a {i.kind.value!r} interrupt's payload.value names the effect: "
                                         f"{{\"effect\": name, \"occurrence\": n, …}}")
        pending = [j for j, i in enumerate(r.batch.interrupts) if i.status == InterruptStatus.PENDING]
        if r.run.status == RunStatus.INTERRUPTED and not pending:
            yield Problem(r.at("run"), "the run is interrupted, but none of its interrupts is pending")
        elif r.run.status != RunStatus.INTERRUPTED:
            for j in pending:  # a run that ends closes its open questions
                yield Problem(r.at("interrupts", j), f"is pending, but the run is {r.run.status.value}: only a "
                                                     f"paused (interrupted) run waits for an answer")
