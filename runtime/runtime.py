"""``Runtime``: the facade over graphs, the store and the run loop.

start / submit / resume / cancel / history / state_at / get_run / runs. Every
method validates what it is given before it writes anything, so a rejected call
leaves the store exactly as it was.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import BaseModel, ValidationError

from .travel.branches import new_fork, new_replay
from .core.clock import Clock, IdSource, RandomIds, SystemClock
from .engine.compensation import CompensationReport, compensate
from .travel.diff import Change, diff
from .core.jsonvalues import JSON
from .core.errors import GraphError, InvalidAnswer, InvalidRequest, LeaseLost, NotFound
from .graph.spec import ExecutableGraph, Graph
from .graph.refs import resolve_model, resolve_ref
from .core.records import (
    COMPENSATION_STATUSES,
    Batch,
    Checkpoint,
    EffectsMode,
    Interrupt,
    InterruptKind,
    InterruptStatus,
    NodeAttempt,
    PendingWrite,
    Run,
    RunKind,
    TraceEvent,
    WriteKind,
)
from .graph.reducers import fold
from .travel.report import ReplayReport
from .engine.loop import RunLoop
from .core.states import (
    TERMINAL_RUN,
    NodeEvent,
    NodeStatus,
    RunEvent,
    RunStatus,
    next_node_status,
)
from .store.base import CheckpointStore
from .store.memory import MemoryStore
from .travel.transfer import export_thread, import_thread
from .travel.views import CheckpointView, build_report, checkpoint_view


_MISSING: Any = object()
_RUN_GRAPHS_KEPT = 10_000


class Runtime:
    """Runs graphs durably against a store.

    ``max_concurrency`` bounds node attempts in flight across every run this
    Runtime drives (each run may set a lower bound of its own).
    """

    def __init__(self, store: CheckpointStore | None = None, *, max_concurrency: int = 8,
                 graphs: Iterable[Graph | ExecutableGraph] = (), clock: Clock | None = None,
                 ids: IdSource | None = None, lease_ttl: float = 30.0, heartbeat: float = 1.0,
                 group_commit: float = 0.005):
        if max_concurrency < 1:
            raise InvalidRequest("max_concurrency must be at least 1")
        self.store: CheckpointStore = store if store is not None else MemoryStore()
        self.max_concurrency = max_concurrency
        self.clock: Clock = clock or SystemClock()
        self.ids: IdSource = ids or RandomIds()
        self.lease_ttl = lease_ttl
        self.heartbeat = min(heartbeat, lease_ttl / 3)
        #: how long pure node outcomes may wait to share a commit (0: commit every step)
        self.group_commit = group_commit
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{self.ids.new('w')[2:10]}"
        self._graphs: dict[str, ExecutableGraph] = {}
        #: the graph object each run was started with here (factories may build several
        #: graphs of one structure and version that differ in their closures)
        self._run_graphs: dict[str, ExecutableGraph] = {}
        self._fresh: dict[str, Checkpoint] = {}   # first checkpoint of runs created here, not yet driven
        self._saved: set[tuple[str, str | None]] = set()
        self._models: dict[str, type[BaseModel]] = {}
        #: compensation functions of effects run here, by effect key (lambdas and closures
        #: can only be compensated by the process that ran them)
        self._compensations: dict[str, Any] = {}
        self._compensating: set[str] = set()   # runs being compensated by this Runtime
        self._active: dict[str, RunLoop] = {}
        self._in_flight = 0
        # more threads than slots: a timed-out sync node keeps its thread until it returns,
        # and must not starve the attempts that follow (the scheduler bounds concurrency)
        self._pool = ThreadPoolExecutor(max_workers=max(32, 4 * max_concurrency), thread_name_prefix="harness-node")
        for g in graphs:
            self.register(g)

    # ------------------------------------------------------------------ graphs

    def register(self, graph: Graph | ExecutableGraph) -> ExecutableGraph:
        """Make a graph known, so runs of its version can be resumed and inspected."""
        compiled = graph.compile() if isinstance(graph, Graph) else graph
        self._graphs[compiled.version] = compiled
        ref = getattr(compiled, "ref", None)
        if (compiled.version, ref) in self._saved:
            return compiled
        self._saved.add((compiled.version, ref))
        desc = compiled.describe()
        if ref:
            desc["ref"] = ref
        self.store.save_graph(desc)
        return compiled

    def graph_for(self, run: Run) -> ExecutableGraph:
        graph = self._graphs.get(run.graph_version)
        if graph is not None:
            return graph
        desc = self.store.graph_description(run.graph_version) or {}
        if desc.get("ref"):
            graph = resolve_ref(desc["ref"])
            if graph.version == run.graph_version:
                self._graphs[graph.version] = graph
                return graph
            raise InvalidRequest(
                f"run {run.id} was made by graph {run.graph_name!r} version {run.graph_version}, but "
                f"{desc['ref']} is now version {graph.version} (its structure changed)")
        raise NotFound(f"graph {run.graph_name!r} version {run.graph_version} is not registered with "
                       f"this Runtime; pass it in Runtime(graphs=[...])")

    def _remember_graph(self, run_id: str, graph: ExecutableGraph) -> None:
        self._run_graphs[run_id] = graph
        if len(self._run_graphs) > _RUN_GRAPHS_KEPT:  # bounded: oldest runs fall back to the registry
            del self._run_graphs[next(iter(self._run_graphs))]

    def remember_model(self, ref: str, model: type[BaseModel]) -> None:
        self._models[ref] = model

    # ------------------------------------------------------------------ starting

    async def start(self, graph: Graph | ExecutableGraph, input: Mapping[str, JSON] | BaseModel | None = None,
                    **options: Any) -> Run:
        """Create a run and execute it here until it ends or pauses."""
        compiled = self.register(graph)
        run = self._create(compiled, input, claim=True, **options)
        self._remember_graph(run.id, compiled)
        # drive with the caller's graph object: another graph of the same structure
        # (say, built by a factory with different closures) may share its version
        return await self._drive(run, compiled)

    async def submit(self, graph: Graph | ExecutableGraph, input: Mapping[str, JSON] | BaseModel | None = None,
                     **options: Any) -> Run:
        """Create a QUEUED run for a worker (or a later ``resume``) to execute."""
        return self._create(graph, input, claim=False, **options)

    def _create(self, graph: Graph | ExecutableGraph, input: Mapping[str, JSON] | BaseModel | None, *,
                claim: bool, thread_id: str | None = None, deadline: float | None = None,
                max_steps: int | None = None, max_tokens: int | None = None,
                max_cost: float | None = None, max_concurrency: int | None = None,
                compensate_on: Iterable[str] = ()) -> Run:
        compiled = self.register(graph)
        state = _validate_input(compiled, input)
        policy = sorted(set(compensate_on))
        wrong = [s for s in policy if s not in (RunStatus.FAILED.value, RunStatus.CANCELLED.value)]
        if wrong or isinstance(compensate_on, str):
            raise InvalidRequest(f"compensate_on takes a list of 'failed' and/or 'cancelled', got {compensate_on!r}")
        now = self.clock.time()
        limits = _limits(now, deadline, max_steps, max_tokens, max_cost, max_concurrency)
        run_id = self.ids.new("run")
        run = Run(id=run_id, thread_id=thread_id or run_id, graph_name=compiled.name,
                  graph_version=compiled.version, status=RunStatus.QUEUED, kind=RunKind.MAIN,
                  input=state, created_at=now, updated_at=now, limits=limits,
                  max_concurrency=max_concurrency or self.max_concurrency,
                  options={"compensate_on": policy} if policy else {})
        statuses = {n: NodeStatus.PENDING for n in compiled.order}
        return self._insert(run, statuses, snapshot=state, claim=claim, source="input")

    def _insert(self, run: Run, statuses: Mapping[str, NodeStatus], *, snapshot: Mapping[str, JSON],
                claim: bool, source: str, inherited: Mapping[str, str] | None = None,
                patch: Mapping[str, JSON] | None = None) -> Run:
        now = self.clock.time()
        events = [TraceEvent(run.id, 1, now, "run.created", data={
            "status": RunStatus.QUEUED.value, "kind": run.kind.value, "parent_run_id": run.parent_run_id,
            "base_checkpoint_id": run.base_checkpoint_id, "inherited": dict(inherited or {})})]
        if claim:
            run = run.evolve(status=RunStatus.RUNNING, lease_owner=self.owner,
                             lease_expires_at=now + self.lease_ttl, fence=1)
            events.append(TraceEvent(run.id, 2, now, "run.claim", data={"status": RunStatus.RUNNING.value,
                                                                        "owner": self.owner}))
        cps = [Checkpoint(id=self.ids.new("cp"), run_id=run.id, seq=0, parent_id=run.base_checkpoint_id,
                          nodes=(), node_states=dict(statuses), event_seq=len(events), created_at=now,
                          source=source, snapshot=dict(snapshot))]
        if patch is not None:  # the person's edit is a checkpoint of its own: diffable, undoable by a fork
            events.append(TraceEvent(run.id, len(events) + 1, now, "state.patched", data={"patch": dict(patch)}))
            cps.append(Checkpoint(id=self.ids.new("cp"), run_id=run.id, seq=1, parent_id=cps[0].id, nodes=(),
                                  node_states=dict(statuses), event_seq=len(events), created_at=now,
                                  source="patch", snapshot=dict(run.input), changed=()))
        run = run.evolve(event_seq=len(events), head_seq=cps[-1].seq)
        # not forced to disk: nothing outside has seen the run yet (output-commit rule);
        # the first effect, a pause or the end of the run forces it
        self.store.create_run(Batch(run_id=run.id, run=run, checkpoints=cps, events=events))
        if claim:
            self._fresh[run.id] = cps[-1]  # _load needs no reads of its own history
        return run

    # ------------------------------------------------------------------ resuming

    async def resume(self, run_id: str, answer: JSON = _MISSING, *,
                     answers: Mapping[str, JSON] | None = None,
                     graph: Graph | ExecutableGraph | None = None) -> Run:
        """Continue a run: answer its interrupts, continue it after failure or
        cancellation (as a new continuation run), or recover it after a crash.

        ``graph`` names the graph object to run with (it must have the run's version);
        by default the one the run was started with here, else the registered one."""
        run = self.store.get_run(run_id)
        if graph is not None:
            compiled = self.register(graph)
            if compiled.version != run.graph_version:
                raise InvalidRequest(f"run {run_id} was made by graph version {run.graph_version}; "
                                     f"the graph given is version {compiled.version}")
            self._remember_graph(run_id, compiled)
        if run.status == RunStatus.INTERRUPTED:
            return await self._answer(run, answer, answers)
        if (answer is not _MISSING or answers) and run.status == RunStatus.RUNNING and self.orphaned(run):
            # its process died while a question was open: recover it (it pauses again), then answer
            run = await self._finished(await self._take_lease(run, RunEvent.RECOVER).drive())
            if run.status == RunStatus.INTERRUPTED:
                return await self._answer(run, answer, answers)
        if answer is not _MISSING or answers:
            raise InvalidRequest(f"run {run_id} is {run.status.value}, not interrupted: there is nothing to answer")
        if run.status in (RunStatus.FAILED, RunStatus.CANCELLED):
            return await self._drive(self._continuation(run))
        if run.status == RunStatus.SUCCEEDED:
            raise InvalidRequest(f"run {run_id} already succeeded; a succeeded run never changes")
        if run.status == RunStatus.QUEUED:
            return await self._finished(await self._take_lease(run, RunEvent.CLAIM).drive())
        if run_id in self._active:
            _raise_busy(run, "in this process")
        if not self._lease_expired(run):
            _raise_busy(run, f"by {run.lease_owner} until its lease expires")
        return await self._finished(await self._take_lease(run, RunEvent.RECOVER).drive())

    async def _answer(self, run: Run, answer: JSON, answers: Mapping[str, JSON] | None) -> Run:
        pending = self.store.interrupts(run.id, InterruptStatus.PENDING)
        given = self._match_answers(run, pending, answer, answers)
        checked = {i.id: self._validate_answer(i, value) for i, value in given}
        return await self._finished(await self._take_lease(run, RunEvent.RESUME, answered=checked).drive())

    def _match_answers(self, run: Run, pending: list[Interrupt], answer: JSON,
                       answers: Mapping[str, JSON] | None) -> list[tuple[Interrupt, JSON]]:
        by_id = {i.id: i for i in pending}
        if answers:
            unknown = sorted(set(answers) - set(by_id))
            if unknown:
                raise InvalidAnswer(f"run {run.id} has no pending interrupt {', '.join(unknown)}; "
                                    f"pending: {', '.join(by_id) or 'none'}")
            return [(by_id[k], v) for k, v in answers.items()]
        if answer is _MISSING:
            raise InvalidAnswer(f"run {run.id} is waiting for an answer to {', '.join(by_id)}")
        if len(pending) != 1:
            raise InvalidAnswer(f"run {run.id} has {len(pending)} pending interrupts "
                                f"({', '.join(by_id)}); answer them by id with answers={{id: value}}")
        return [(pending[0], answer)]

    def _validate_answer(self, interrupt: Interrupt, value: JSON) -> JSON:
        from .core.jsonvalues import to_json
        from .engine.effects import validate_in_doubt_answer, validate_unrecorded_answer

        if interrupt.kind == InterruptKind.IN_DOUBT:
            return validate_in_doubt_answer(value).model_dump(mode="json")
        if interrupt.kind == InterruptKind.UNRECORDED:
            return validate_unrecorded_answer(value).model_dump(mode="json")
        ref = (interrupt.payload or {}).get("response_ref")
        if not ref:
            return to_json(value, "answer")
        model = self._models.get(ref) or resolve_model(ref)
        if model is None:
            raise InvalidAnswer(f"interrupt {interrupt.id} expects a {ref} answer, and that model "
                                f"cannot be imported here")
        try:
            return model.model_validate(value).model_dump(mode="json")
        except ValidationError as e:
            problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'answer'}: {err['msg']}"
                                 for err in e.errors())
            raise InvalidAnswer(f"answer to interrupt {interrupt.id} is invalid: {problems}") from None

    def _continuation(self, parent: Run) -> Run:
        graph = self.graph_for(parent)
        self._check_not_continued(parent)
        if any(e.status in COMPENSATION_STATUSES for e in self.store.journal(self._lineage(parent))):
            raise InvalidRequest(f"run {parent.id} was compensated (its effects were undone, or may have "
                                 f"been); it cannot be continued; fork it to try again")
        try:  # claiming the parent's fence makes a concurrent second resume fail here
            self.store.acquire_lease(parent.id, self.owner, self.clock.time(), parent.fence)
        except LeaseLost:
            raise InvalidRequest(f"run {parent.id} is being continued by another caller") from None
        self._check_not_continued(parent)
        head = self._head(parent.id)
        keep = (NodeStatus.SUCCEEDED, NodeStatus.SKIPPED)
        statuses = {n: (s if s in keep else NodeStatus.PENDING) for n, s in head.node_states.items()}
        now = self.clock.time()
        limits = dict(parent.limits)
        if limits.get("deadline_s") is not None:
            limits["deadline_at"] = now + limits["deadline_s"]
        run = Run(id=self.ids.new("run"), thread_id=parent.thread_id, graph_name=graph.name,
                  graph_version=graph.version, status=RunStatus.QUEUED, kind=RunKind.CONTINUATION,
                  input=parent.input, created_at=now, updated_at=now, parent_run_id=parent.id,
                  base_checkpoint_id=head.id, limits=limits, max_concurrency=parent.max_concurrency,
                  options=parent.options)
        inherited = {n: s.value for n, s in statuses.items() if s != NodeStatus.PENDING}
        self._remember_graph(run.id, self._run_graphs.get(parent.id, graph))
        return self._insert(run, statuses, snapshot=self._state_json(head), claim=True,
                            source="continuation", inherited=inherited)

    def _check_not_continued(self, parent: Run) -> None:
        done = [c for c in self.store.child_runs(parent.id) if c.kind == RunKind.CONTINUATION]
        if done:
            raise InvalidRequest(f"run {parent.id} was already continued by {done[-1].id}; "
                                 f"resume that run instead")

    def orphaned(self, run: Run) -> bool:
        """A RUNNING run whose process is gone (lease expired or its PID dead here)."""
        return run.status == RunStatus.RUNNING and run.id not in self._active and self._lease_expired(run)

    def _lease_expired(self, run: Run) -> bool:
        if run.lease_expires_at is None or run.lease_expires_at <= self.clock.time():
            return True
        if run.lease_owner == self.owner and run.id not in self._active:
            return True  # ours, and nothing here drives it any more
        host, _, rest = (run.lease_owner or "").partition(":")
        pid = rest.partition(":")[0]
        if host == socket.gethostname() and pid.isdigit() and int(pid) != os.getpid():
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                return True  # the owner died on this machine: no need to wait out its lease
            except PermissionError:
                return False
        return False

    def _take_lease(self, run: Run, event: RunEvent, answered: Mapping[str, JSON] | None = None) -> RunLoop:
        """Acquire the run's lease (bumping its fencing token), then record why."""
        run = self.store.acquire_lease(run.id, self.owner, self.clock.time() + self.lease_ttl, run.fence)
        loop = self._load(run)
        loop.begin(event, answered or {})
        return loop

    # ------------------------------------------------------------------ driving

    async def _drive(self, run: Run, graph: ExecutableGraph | None = None) -> Run:
        return await self._finished(await self._load(run, graph).drive())

    async def _finished(self, run: Run) -> Run:
        """A run's opt-in policy: compensate its effects when it ends failed or cancelled."""
        if run.status.value in (run.options.get("compensate_on") or ()):
            await compensate(self, run.id)
            run = self.store.get_run(run.id)
        return run

    def _load(self, run: Run, graph: ExecutableGraph | None = None) -> RunLoop:
        graph = graph or self._run_graphs.get(run.id) or self.graph_for(run)
        fresh = self._fresh.pop(run.id, None)
        sources = self._sources(run)
        source_journal = self.store.journal(sources) if sources and run.effects_mode == EffectsMode.MOCK else []
        # a replay re-uses the answers people gave to the run it re-executes
        source_interrupts = ([i for rid in reversed(sources) for i in self.store.interrupts(rid)]
                             if run.options.get("compare") else [])
        if fresh is not None and fresh.run_id == run.id and run.kind != RunKind.CONTINUATION:
            lineage = self._writes_lineage(run)[1:]
            writes = self.store.node_writes(lineage) if lineage else {}
            return RunLoop(self, graph, run, head=fresh, statuses=fresh.node_states, writes=writes, failures={},
                           lineage=[run.id], key_scope=run.id, journal=[], interrupts=source_interrupts,
                           attempts={}, source_journal=source_journal)
        lineage = self._lineage(run)
        head = self._head(run.id)
        attempts: dict[str, int] = {}
        retry_at: dict[str, float] = {}
        statuses = dict(head.node_states)
        for ev in self.store.events(run.id):
            if ev.type == "node.start" and ev.node and ev.attempt:
                attempts[ev.node] = max(attempts.get(ev.node, 0), ev.attempt)
            if ev.type == "node.retry" and ev.node:  # a backoff survives a crash
                retry_at[ev.node] = ev.at + float(ev.data.get("retry_in", 0.0))
            if ev.seq > head.event_seq and ev.type.startswith("node.") and ev.node:
                # started after the last checkpoint (a crash came before the next one)
                statuses[ev.node] = next_node_status(statuses[ev.node], NodeEvent(ev.type[5:]))
        retry_at = {n: t for n, t in retry_at.items() if statuses.get(n) == NodeStatus.RETRYING}
        interrupts = source_interrupts + [i for rid in reversed(lineage) for i in self.store.interrupts(rid)]
        failures: dict[str, int] = {}
        for attempt in self.store.node_attempts(run.id):  # retry budgets hold across resumes
            if attempt.status == NodeStatus.FAILED:
                failures[attempt.node] = failures.get(attempt.node, 0) + 1
        loop = RunLoop(self, graph, run, head=head, statuses=statuses,
                       writes=self.store.node_writes(self._writes_lineage(run)), failures=failures,
                       lineage=lineage, key_scope=self._key_scope(run),
                       journal=self.store.journal(list(reversed(lineage))), interrupts=interrupts,
                       attempts=attempts, source_journal=source_journal)
        loop.restore(retry_at, self._stopping_reason(run, statuses))
        return loop

    def _stopping_reason(self, run: Run, statuses: Mapping[str, NodeStatus]) -> tuple[str, dict[str, JSON]] | None:
        """Whether a run taken over mid-way had already begun to stop, and why: a crash
        while siblings of a failure were finishing must not start anything new."""
        if run.status != RunStatus.RUNNING:
            return None
        if NodeStatus.FAILED in statuses.values():
            errors = {w.node: w.value for w in self.store.pending_writes(run.id) if w.kind == WriteKind.ERROR}
            graph_order = [n for n in statuses if statuses[n] == NodeStatus.FAILED]
            first = next((n for n in graph_order if n in errors), graph_order[0])
            error = dict(errors.get(first) or {"class": "internal", "message": "failed before a crash"})
            return ("fail", {**error, "node": first})
        if NodeStatus.CANCELLED in statuses.values():
            return ("cancel", {"class": "cancelled", "message": "cancelled before its process stopped"})
        return None

    def _head(self, run_id: str) -> Checkpoint:
        head = self.store.find_checkpoint(run_id)
        if head is None:
            raise NotFound(f"run {run_id} has no checkpoints")
        return head

    def _lineage(self, run: Run) -> list[str]:
        """The run and the runs it inherits outcomes from, nearest first."""
        out = [run.id]
        while run.parent_run_id is not None and run.kind == RunKind.CONTINUATION:
            run = self.store.get_run(run.parent_run_id)
            out.append(run.id)
        return out

    def _writes_lineage(self, run: Run) -> list[str]:
        """The runs whose node writes a run's state folds, nearest first: continuations,
        replays and forks inherit the outcomes of the nodes they did not re-execute; a
        patched fork does not (the patched state at its base is its input)."""
        out = [run.id]
        # (a continuation copies its parent's options: only the fork itself was patched)
        while (run.parent_run_id is not None and run.kind != RunKind.MAIN
               and not (run.kind == RunKind.FORK and run.options.get("patched"))):
            run = self.store.get_run(run.parent_run_id)
            out.append(run.id)
        return out

    def _sources(self, run: Run) -> list[str]:
        """The source lineage of a fork or replay: every ancestor past its own
        continuation chain, nearest first (their journals serve its mocked effects)."""
        while run.kind == RunKind.CONTINUATION and run.parent_run_id is not None:
            run = self.store.get_run(run.parent_run_id)
        out: list[str] = []
        while run.parent_run_id is not None:
            run = self.store.get_run(run.parent_run_id)
            out.append(run.id)
        return out

    def _key_scope(self, run: Run) -> str:
        """Continuations keep their origin's effect keys: they are the same execution."""
        while run.kind == RunKind.CONTINUATION and run.parent_run_id is not None:
            run = self.store.get_run(run.parent_run_id)
        return run.id

    # concurrency across every run of this Runtime
    def _attach(self, loop: RunLoop) -> None:
        self._active[loop.run.id] = loop

    def _detach(self, loop: RunLoop) -> None:
        if self._active.get(loop.run.id) is loop:
            del self._active[loop.run.id]

    def _room(self, loop: RunLoop) -> int:
        own = loop.run.max_concurrency - len(loop._in_flight)
        return min(own, self.max_concurrency - self._in_flight)

    def _acquire(self, loop: RunLoop) -> None:
        self._in_flight += 1

    def _release(self, loop: RunLoop) -> None:
        self._in_flight -= 1
        for other in self._active.values():
            if other is not loop:
                other.wake()

    # ------------------------------------------------------------------ cancel

    async def cancel(self, run_id: str, reason: str = "cancelled by request", *, wait: float = 10.0) -> Run:
        """Cancel a run: in-flight nodes are cancelled, nothing retries; ends CANCELLED."""
        run = self.store.get_run(run_id)
        if run.status in TERMINAL_RUN:
            raise InvalidRequest(f"run {run_id} is already {run.status.value}; terminal runs never change")
        loop = self._active.get(run_id)
        if loop is not None:
            loop.request_cancel(reason)
            return await self._wait_terminal(run_id, wait)
        if run.status == RunStatus.RUNNING and not self._lease_expired(run):
            self.store.request_cancel(run_id, reason)
            run = await self._wait_terminal(run_id, wait)
            if run.status in TERMINAL_RUN or (run.status == RunStatus.RUNNING and not self._lease_expired(run)):
                return run
            # it paused (or its owner died) before seeing the request: cancel it here
        run = self.store.acquire_lease(run.id, self.owner, self.clock.time() + self.lease_ttl, run.fence)
        loop = self._load(run)
        loop.begin_cancel(reason)
        return await self._finished(await loop.drive())

    async def _wait_terminal(self, run_id: str, wait: float) -> Run:
        """Poll until the run ends or stops being RUNNING (or ``wait`` seconds pass)."""
        step, waited = 0.02, 0.0
        while True:
            run = self.store.get_run(run_id)
            if run.status != RunStatus.RUNNING or waited >= wait:
                return run
            await asyncio.sleep(step)
            waited += step

    # ------------------------------------------------------------------ time travel

    async def fork(self, checkpoint_id: str, patch: Mapping[str, JSON] | None = None, *,
                   effects: str = "mock", mocks: Mapping[str, JSON] | None = None,
                   graph: Graph | ExecutableGraph | None = None) -> Run:
        """Branch off at a checkpoint: a new run in the same thread whose input is the
        state there with ``patch`` applied; nodes finished there are not run again.

        ``effects="mock"`` serves effects from the source lineage's journal and pauses
        on any it has no record of; ``mocks={name: result}`` answers those up front;
        ``effects="live"`` runs them for real with keys of this branch."""
        compiled = _compile(graph) if graph is not None else None
        run, compiled = new_fork(self, checkpoint_id, patch, effects, mocks, compiled)
        self._remember_graph(run.id, compiled)
        return await self._drive(run, compiled)

    async def replay(self, run_or_checkpoint_id: str, graph: Graph | ExecutableGraph | None = None, *,
                     mocks: Mapping[str, JSON] | None = None) -> ReplayReport:
        """Re-execute a recorded run (or everything after a checkpoint) with every effect
        mocked — with the same code, or ``graph`` (a new version) — and report per node
        what differs from the recording."""
        compiled = _compile(graph) if graph is not None else None
        run, compiled, _ = new_replay(self, run_or_checkpoint_id, compiled, mocks)
        self._remember_graph(run.id, compiled)
        await self._drive(run, compiled)
        return await self.replay_report(run.id)

    async def replay_report(self, replay_run_id: str) -> ReplayReport:
        """The report of a replay run (again after resuming one that paused)."""
        return build_report(self, self.store.get_run(replay_run_id))

    async def diff(self, checkpoint_a: str, checkpoint_b: str) -> list[Change]:
        """Field-level changes from the state at ``checkpoint_a`` to the state at
        ``checkpoint_b`` (any two checkpoints: of one run, or of sibling branches)."""
        a = self._state_json(self.store.get_checkpoint(checkpoint_a))
        b = self._state_json(self.store.get_checkpoint(checkpoint_b))
        return diff(a, b)

    async def checkpoint(self, checkpoint_id: str) -> CheckpointView:
        """One checkpoint with its state, the outcomes recorded against it, and what
        would be ready to run next from it."""
        return checkpoint_view(self, self.store.get_checkpoint(checkpoint_id))

    async def compensate(self, run_id: str, *, retry_in_doubt: bool = False) -> CompensationReport:
        """Undo the run's live, succeeded effects that registered a ``compensate``,
        newest first, each once; see ``runtime.compensation``."""
        return await compensate(self, run_id, retry_in_doubt)

    async def export_thread(self, run_id: str) -> dict[str, JSON]:
        """The whole thread of ``run_id`` as one versioned, JSON-serialisable document."""
        return export_thread(self.store, run_id)

    async def import_thread(self, document: Mapping[str, JSON]) -> list[Run]:
        """Load an exported thread into this store (its ids must be new here); a bad one writes nothing."""
        return import_thread(self.store, document, self._graphs.get)

    # ------------------------------------------------------------------ reading

    async def get_run(self, run_id: str) -> Run:
        return self.store.get_run(run_id)

    async def runs(self, status: RunStatus | str | None = None, limit: int = 100) -> list[Run]:
        """Runs, newest first, optionally of one status."""
        if status is not None and status not in set(RunStatus):
            raise InvalidRequest(f"unknown status {status!r}; one of: {', '.join(RunStatus)}")
        return self.store.list_runs(RunStatus(status) if status else None, limit=limit)

    async def history(self, run_id: str) -> list[Checkpoint]:
        """The run's checkpoints, oldest first."""
        return self.store.checkpoints(run_id)

    async def state_at(self, checkpoint_id: str) -> BaseModel:
        cp = self.store.get_checkpoint(checkpoint_id)
        state = self._state_json(cp)
        try:
            model = self.graph_for(self.store.get_run(cp.run_id)).state_model
        except (NotFound, InvalidRequest, GraphError):  # the code is not importable here
            from .graph.spec import AnyState
            model = AnyState
        return model.model_validate(state)

    def _state_json(self, cp: Checkpoint) -> dict[str, JSON]:
        if cp.snapshot is not None:
            return dict(cp.snapshot)
        run = self.store.get_run(cp.run_id)
        graph = self.graph_for(run)
        done = [n for n in graph.order if cp.node_states.get(n) == NodeStatus.SUCCEEDED]
        writes = self.store.node_writes(self._writes_lineage(run))
        base: Mapping[str, JSON] = run.input
        snap = self.store.find_checkpoint(run.id, cp.seq - 1, with_snapshot=True)
        if snap is not None:
            had = {n for n, s in snap.node_states.items() if s == NodeStatus.SUCCEEDED}
            top = max((graph.index[n] for n in had), default=-1)
            extra = [n for n in done if n not in had]
            if had <= set(done) and all(graph.index[n] > top for n in extra):
                base, done = snap.snapshot or {}, extra
        # nodes a patched fork inherited have no writes: their writes are in its input
        return fold(base, [(n, writes[n]) for n in done if n in writes], graph.reducers)

    async def events(self, run_id: str, after_seq: int = 0) -> list[TraceEvent]:
        return self.store.events(run_id, after_seq)

    async def interrupts(self, run_id: str | None = None, pending: bool = True) -> list[Interrupt]:
        return self.store.interrupts(run_id, InterruptStatus.PENDING if pending else None)

    async def attempts(self, run_id: str) -> list[NodeAttempt]:
        return self.store.node_attempts(run_id)

    async def pending_writes(self, run_id: str) -> list[PendingWrite]:
        return self.store.pending_writes(run_id)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.store.close()


def _compile(graph: Graph | ExecutableGraph) -> ExecutableGraph:
    return graph.compile() if isinstance(graph, Graph) else graph


def _raise_busy(run: Run, where: str) -> None:
    raise InvalidRequest(f"run {run.id} is running {where}; cancel it or wait for it to finish")


def _validate_input(graph: ExecutableGraph, input: Mapping[str, JSON] | BaseModel | None) -> dict[str, JSON]:
    if isinstance(input, BaseModel):
        input = input.model_dump()
    try:
        return graph.state_model.model_validate(dict(input or {})).model_dump(mode="json")
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'input'}: {err['msg']}" for err in e.errors())
        raise InvalidRequest(f"input does not fit {graph.state_model.__name__}: {problems}") from None
    except (TypeError, ValueError) as e:
        raise InvalidRequest(f"input must be an object of state fields: {e}") from None


def _limits(now: float, deadline: float | None, max_steps: int | None, max_tokens: int | None,
            max_cost: float | None, max_concurrency: int | None) -> dict[str, JSON]:
    for name, value in (("deadline", deadline), ("max_steps", max_steps), ("max_tokens", max_tokens),
                        ("max_cost", max_cost), ("max_concurrency", max_concurrency)):
        if value is not None and (not isinstance(value, (int, float)) or value <= 0):
            raise InvalidRequest(f"{name} must be a positive number, got {value!r}")
    limits: dict[str, JSON] = {}
    if deadline is not None:
        limits["deadline_s"] = deadline
        limits["deadline_at"] = now + deadline
    for name, value in (("max_steps", max_steps), ("max_tokens", max_tokens), ("max_cost", max_cost)):
        if value is not None:
            limits[name] = value
    return limits


