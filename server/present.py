"""Runs and their records as text lines and JSON-ready dicts.

The command line prints these lines and, with ``--json``, these dicts; the web
handlers render the same views, so a run reads the same everywhere. Everything
here is a function of values the runtime returned, except :func:`load_run_view`,
which gathers one run's view through the runtime's public reading API.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum
from typing import Any

from runtime import (
    JSON,
    Change,
    Checkpoint,
    CheckpointView,
    CompensationReport,
    EffectVerdict,
    Interrupt,
    InterruptKind,
    JournalEntry,
    NodeAttempt,
    NodeReport,
    ReplayReport,
    Run,
    RunKind,
    RunStatus,
    Runtime,
    StreamEvent,
)
from runtime.core.records import SentAnswer
from runtime.history.lineage import uncalled_mocks, unused_mocks

from .at_limit import limit_lines

#: longest value shown in a report row (the JSON views hold them whole)
LONG = 160


def plain(value: Any) -> Any:
    """``value`` as JSON-ready data: records become dicts, enums their values,
    tuples lists; anything else is left for the encoder."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def value_text(value: JSON, limit: int | None = None) -> str:
    """A value as compact JSON, cut to ``limit`` characters with an ellipsis."""
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if limit is None or len(text) <= limit else text[:limit - 1] + "…"


# ------------------------------------------------------------------ runs and checkpoints

def run_line(run: Run) -> str:
    """``run_…  status  kind  graph  (from parent)  class: message (node INSTANCE)``: the
    instance that failed is named, as on the run's page (which item of a map of 300)."""
    err = f"  {run.error.get('class')}: {run.error.get('message')}{failed_node(run)}" if run.error else ""
    parent = f"  (from {run.parent_run_id})" if run.parent_run_id else ""
    return f"{run.id}  {run.status.value:<11}  {run.kind.value:<12}  {run.graph_name}{parent}{err}"


def failed_node(run: Run) -> str:
    """`` (node INSTANCE)`` for an error recorded with the instance it came from."""
    node = (run.error or {}).get("node")
    return f" (node {node})" if isinstance(node, str) and node else ""


def dropped_line(run: Run) -> str | None:
    """What a turn of a new graph version left behind: said, since its value is gone from
    the thread from this turn on (``options["dropped_fields"]``)."""
    dropped = run.options.get("dropped_fields")
    if not dropped or not isinstance(dropped, list):
        return None
    return (f"dropped fields: {', '.join(map(repr, dropped))} (not in this graph version's state: "
            f"the thread's values of them were left behind)")


def event_line(ev: StreamEvent) -> str:
    """One streamed event: sequence, type, where, and what it carries."""
    where = f" {ev.node}" + (f" (attempt {ev.attempt})" if ev.attempt else "") if ev.node else ""
    data = {k: v for k, v in ev.data.items() if k not in ("status",)}
    shown = f" {value_text(data, LONG)}" if data else ""
    return f"{'~' if ev.ephemeral else '#'}{ev.seq:<5} {ev.type}{where}{shown}"


def checkpoint_line(cp: Checkpoint) -> str:
    """One checkpoint with the nodes folded into it and a count of node statuses."""
    counts: dict[str, int] = {}
    for s in cp.node_states.values():
        counts[s.value] = counts.get(s.value, 0) + 1
    summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    folded = ", ".join(cp.nodes) if cp.nodes else "-"
    return f"  #{cp.seq:<4} {cp.id}  folded: {folded:<28} [{summary}]"


def checkpoint_view_line(v: CheckpointView) -> str:
    """One checkpoint of a run's history: where it came from, what runs next, what waits."""
    cp = v.checkpoint
    origin = f" (from {cp.parent_id})" if cp.seq == 0 and cp.parent_id else ""
    folded = ", ".join(cp.nodes) or "-"
    # "?": the run's code is not loaded here, so what runs next cannot be decided (not "nothing")
    ready = "?" if v.ready is None else ", ".join(v.ready) or "-"
    waiting = f"  waiting: {', '.join(v.interrupted)}" if v.interrupted else ""
    return (f"  #{cp.seq:<4} {cp.id}  {cp.source:<12} folded: {folded:<20} next: {ready:<20} "
            f"pending writes: {len(v.pending_writes)}{waiting}{origin}")


@dataclass(frozen=True, slots=True)
class RunView:
    """What a person looks at for one run: the run, its checkpoints, its state at the
    last one, the questions it waits on, and the runs that continued it."""

    run: Run
    checkpoints: Sequence[Checkpoint]
    state: Mapping[str, JSON]
    interrupts: Sequence[Interrupt]
    children: Sequence[Run]
    orphaned: bool = False   # it looks running, but its process is gone
    #: names the branch's ``mocks`` gave that no effect called (see ``unused_mocks``)
    unused_mocks: Sequence[str] = ()
    #: answers another process left for questions of the running run, not taken yet
    sent: Mapping[str, SentAnswer] = field(default_factory=dict)
    #: names the branch's ``mocks`` gave that no effect has called yet (see ``uncalled_mock_lines``)
    uncalled_mocks: Sequence[str] = ()
    #: what can be done about a failure at a limit, until the run is continued (``at_limit``)
    limit_lines: Sequence[str] = ()

    def to_json(self) -> dict[str, JSON]:
        out: dict[str, JSON] = plain({"run": self.run, "checkpoints": self.checkpoints, "state": self.state,
                                      "interrupts": self.interrupts})
        out["children"] = [c.id for c in self.children]
        out["unused_mocks"] = list(self.unused_mocks)
        out["uncalled_mocks"] = list(self.uncalled_mocks)
        out["sent"] = {i: {"answer": a.answer, "by": a.by, "at": a.at} for i, a in self.sent.items()}
        return out

    def lines(self) -> list[str]:
        lines = [run_line(self.run), f"checkpoints ({len(self.checkpoints)}):",
                 *map(checkpoint_line, self.checkpoints), f"state: {json.dumps(self.state)}"]
        dropped = dropped_line(self.run)
        if dropped is not None:
            lines.append(dropped)
        if self.orphaned:
            lines.append(f"its process is gone: recover it with  harness resume {self.run.id}")
        if self.run.status == RunStatus.QUEUED:
            lines += queued_lines(self.run)
        lines += waiting_lines(self.run.id, self.interrupts, self.sent)
        lines += uncalled_mock_lines(self.uncalled_mocks, self.interrupts)
        lines += self.limit_lines
        if self.unused_mocks:
            names = ", ".join(map(repr, self.unused_mocks))
            lines.append(f"mocks never used: {names} (no effect of that name was called; check the name against "
                         f"the effects the run calls)")
        lines += [f"{_FOLLOWED[c.kind.value]}: {c.id} ({c.status.value})" for c in self.children]
        return lines


def queued_lines(run: Run) -> list[str]:
    """Who drives a queued run, and how to follow it from here (and read a replay's report)."""
    lines = [f"queued: the next harness worker that can import its graph drives it; "
             f"follow it with: harness watch {run.id}"]
    if run.kind == RunKind.REPLAY:
        lines.append(f"  its report, once it has ended: harness replay {run.id} --report")
    return lines


#: how ``show`` names the runs that came from a run, by their kind (a thread's next turn is "main")
_FOLLOWED = {"continuation": "continued by", "fork": "forked as", "replay": "replayed as", "main": "next turn"}


async def load_run_view(rt: Runtime, run_id: str) -> RunView:
    """Gather :class:`RunView` for ``run_id`` (``NotFound`` when there is no such run)."""
    run = await rt.get_run(run_id)
    cps = await rt.history(run_id)
    pending = await rt.interrupts(run_id)
    state = (await rt.state_at(cps[-1].id)).model_dump(mode="json") if cps else {}
    sent = rt.store.sent_answers(run_id) if run.status == RunStatus.RUNNING else {}
    children = rt.store.child_runs(run_id)
    continued = any(c.kind == RunKind.CONTINUATION for c in children)
    return RunView(run, cps, state, pending, children, rt.orphaned(run),
                   unused_mocks(rt.store, run), sent, uncalled_mocks(rt.store, run) if pending else (),
                   limit_lines(rt.store, run) if not continued else ())


async def load_waiting_lines(rt: Runtime, run_id: str) -> list[str]:
    """What the run waits for and how to answer it, with the mocks no effect called when it
    waits on an unrecorded effect: the lines ``show`` prints of a pause."""
    run = await rt.get_run(run_id)
    pending = await rt.interrupts(run_id)
    uncalled = uncalled_mocks(rt.store, run) if pending else []
    return waiting_lines(run_id, pending) + uncalled_mock_lines(uncalled, pending)


# ------------------------------------------------------------------ interrupts

#: the runtime's own questions about effects: (the usual answer, the other answers)
EFFECT_ANSWERS = {
    InterruptKind.UNRECORDED: ('{"action": "mock", "result": <json>}',
                               """'{"action": "live"}' (run it for real) or '{"action": "abort"}' (fail the branch)"""),
    InterruptKind.IN_DOUBT: ('{"action": "result", "result": <json>}',
                             """'{"action": "retry"}' (call it again, same key) or '{"action": "abort"}'"""),
}


def interrupt_question(i: Interrupt) -> str:
    """What the interrupt asks, in words (the effect and its request for the runtime's own)."""
    value = i.value
    if i.kind not in EFFECT_ANSWERS or not isinstance(value, dict):
        return json.dumps(value)
    recorded = value.get("recorded_request")
    doubt, failed = value.get("in_doubt"), value.get("failed")
    return (f"effect {value.get('effect')!r} #{value.get('occurrence')} "
            + ("has no recorded result" if i.kind == InterruptKind.UNRECORDED
               else "started but its outcome was never recorded")
            + (f" (run {doubt.get('run_id')} started it, key {doubt.get('key')}, and its outcome was never "
               "recorded: it may have happened)" if isinstance(doubt, dict) else "")
            + (f" (run {failed.get('run_id')} called it and it failed: {failed.get('error')})"
               if isinstance(failed, dict) else "")
            + f" for request {json.dumps(value.get('request'))}"
            + (f" (recorded: {json.dumps(recorded)})" if recorded is not None else ""))


def waiting_lines(run_id: str, pending: Sequence[Interrupt], sent: Mapping[str, SentAnswer] | None = None) -> list[str]:
    """What each pending interrupt asks, and the command that answers it (or the answer
    sent to the process driving the run, which it has not taken yet)."""
    lines = []
    for i in pending:
        answer, others = EFFECT_ANSWERS.get(i.kind, ("<json>", ""))
        lines.append(f"waiting: interrupt {i.id} from node {i.node!r} ({i.kind.value}): {interrupt_question(i)}")
        left = (sent or {}).get(i.id)
        if left is not None:
            lines.append(f"  answer sent{f' by {left.by}' if left.by else ''}: {json.dumps(left.answer)} "
                         f"(the process driving the run takes it within a heartbeat)")
            continue
        given = f"--response '{answer}'" if len(pending) == 1 else f"""--answers '{{"{i.id}": {answer}}}'"""
        lines.append(f"  answer with: harness resume {run_id} {given}")
        if others:
            lines.append(f"           or: {others}")
    return lines


def uncalled_mock_lines(uncalled: Sequence[str], pending: Sequence[Interrupt]) -> list[str]:
    """At a pause on an unrecorded effect, each mock no effect has called, with the effect
    asked about whose name is close to it: a misspelt mock is why that effect was not served,
    and once the branch ends it is too late to give it again."""
    asked = sorted({str(i.value["effect"]) for i in pending
                    if i.kind == InterruptKind.UNRECORDED and isinstance(i.value, dict) and "effect" in i.value})
    if not asked:
        return []
    lines = []
    for name in uncalled:
        close = difflib.get_close_matches(name, asked, n=1)
        lines.append(f"mock {name!r} was never used; did you mean {close[0]!r}?" if close else
                     f"mock {name!r} was not used so far (no effect of that name was called)")
    return lines


# ------------------------------------------------------------------ diffs and replay reports

def change_line(c: Change, limit: int | None = None) -> str:
    """``~ x: 2 -> 5``, ``+ notes[3]: "…"``, ``- field: …``."""
    if c.op == "added":
        return f"+ {c.dotted()}: {value_text(c.new, limit)}"
    if c.op == "removed":
        return f"- {c.dotted()}: {value_text(c.old, limit)}"
    return f"~ {c.dotted()}: {value_text(c.old, limit)} -> {value_text(c.new, limit)}"


def node_report_lines(n: NodeReport, width: int) -> list[str]:
    """One node of a replay report: its verdict, then what differs, indented."""
    head = f"  {n.node:<{width}}  {n.verdict}"
    if n.recorded_status != n.replay_status:
        head += f"  ({n.recorded_status or '-'} -> {n.replay_status or '-'})"
    lines = [head]
    pad = " " * (width + 6)
    if n.error:
        recorded = f" (recorded: {n.recorded_error})" if n.recorded_error else ""
        lines.append(f"{pad}error: {n.error}{recorded}")
    lines += [f"{pad}writes {change_line(c, LONG)}" for c in n.write_changes]
    for e in n.effects:
        if e.verdict == EffectVerdict.SAME:
            continue
        request = f": request {value_text(e.request, LONG)}" if e.verdict == EffectVerdict.NEW else ""
        lines.append(f"{pad}effect {e.name} #{e.occurrence}: {e.verdict}{request}")
        lines += [f"{pad}  request {change_line(c, LONG)}" for c in e.changes]
    if n.reused_answers:
        lines.append(f"{pad}reused recorded answers: {', '.join(n.reused_answers)}")
    return lines


def replay_report_lines(report: ReplayReport, waiting: Sequence[str] = ()) -> list[str]:
    """The whole report: a head line, each node, what the replay waits on, a verdict line."""
    versions = (f"graph version {report.graph_version}" if report.graph_version == report.recorded_graph_version
                else f"graph version {report.recorded_graph_version} -> {report.graph_version}")
    width = max((len(n.node) for n in report.nodes), default=4)
    head = f"replay {report.run_id} of {report.source_run_id} from {report.base_checkpoint_id}"
    lines = [f"{head}: {report.status} ({versions})"]
    for n in report.nodes:
        lines += node_report_lines(n, width)
    if waiting:
        lines += waiting
        lines.append(f"  then see the report again with: harness replay {report.run_id} --report")
    differ = len(report.differences())
    lines.append("replay matches the recording" if report.same else f"{differ} node(s) differ")
    return lines


# ------------------------------------------------------------------ compensation

def compensation_lines(report: CompensationReport) -> list[str]:
    """Each compensation step, newest effect first, then whether it is complete."""
    lines = []
    for s in report.steps:
        error = s.error
        if s.status == "in_doubt":  # the runtime's message names the Python argument
            error = (f"its compensation started and its outcome was never recorded; check it, then run "
                     f"harness compensate {report.run_id} --retry-in-doubt")
        status = "already compensated" if s.status == "already" else s.status
        lines.append(f"  {s.node}  {s.name} #{s.occurrence}  {status}" + (f": {error}" if error else ""))
    if report.queued:
        lines.append(f"compensation of run {report.run_id} left to a worker (harness worker): it undoes each "
                     f"effect once it takes it up, and prints what it made; the run's journal in the "
                     f"debugger shows each undo")
    elif not report.steps:
        lines.append(f"nothing to compensate: run {report.run_id} has no live effect with a compensation")
    elif report.complete:
        lines.append("compensation complete")
    else:
        lines.append("compensation incomplete: older effects are left as they are until this one is settled")
    return lines


# ------------------------------------------------------------------ attempts and the effect journal

def attempt_line(a: NodeAttempt) -> str:
    """``  node #2  failed      0.250s  TransientError: timeout  (retry in 2 s)``."""
    error = f"  {a.error_class}: {a.error}" if a.error else ""
    decision = f"  ({a.decision})" if a.decision else ""
    return f"  {a.node} #{a.attempt}  {a.status.value:<11} {a.ended_at - a.started_at:.3f}s{error}{decision}"


def attempt_json(a: NodeAttempt) -> dict[str, JSON]:
    out: dict[str, JSON] = plain(a)
    out["duration_s"] = a.ended_at - a.started_at
    return out


def journal_line(e: JournalEntry, limit: int | None = LONG) -> str:
    """One journal entry: the effect's identity, its status, its request and outcome."""
    where = f" from {e.source}" if e.source else ""
    outcome = f"  error: {e.error}" if e.error else (f"  result {value_text(e.result, limit)}"
                                                      if e.result is not None else "")
    return (f"  {e.node}  {e.name} #{e.occurrence} (attempt {e.attempt})  {e.status.value}{where}  "
            f"request {value_text(e.request, limit)}{outcome}")


def journal_json(e: JournalEntry) -> dict[str, JSON]:
    out: dict[str, JSON] = plain(e)
    return out
