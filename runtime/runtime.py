"""``Runtime``: the facade. It composes the layers below and nothing imports it.

start / submit / resume / cancel, time travel (history, checkpoint, diff, fork,
replay, compensate, export/import) and reads. Every method validates what it is
given before anything is written, so a rejected call leaves the store as it was.
The work is done in ``engine`` (driving runs), ``travel`` (branches and their
reports) and ``history`` (run creation, lineage, state at a checkpoint).
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import BaseModel

from .arguments import (answers_arg, bool_arg, call_of, check_cancel, check_stream, check_thread_id, close_call,
                        graph_arg, id_arg, seq_arg, start_options)
from .core.clock import Clock, IdSource, RandomIds, SystemClock
from .core.env import Environment
from .core.errors import GraphError, InvalidRequest, NotFound
from .core.jsonvalues import JSON
from .core.records import Checkpoint, CompensationAsk, Interrupt, InterruptStatus, NodeAttempt, PendingWrite, Run, TraceEvent
from .core.states import RunStatus
from .engine.answers import MISSING
from .engine.compensation import CompensationReport, ask_worker, compensate, make_asked
from .engine.deps import EngineDeps
from .engine.driver import Driver
from .engine.host import CompensationRegistry
from .engine.leases import make_owner
from .engine.slots import Slots
from .engine.streaming import DEFAULT_BUFFER, RunStream, follow, stream_call
from .graph import AnyState, ExecutableGraph, Graph
from .history.creation import check_concurrency, new_limits
from .history.events import with_writes
from .history.new_runs import create_run
from .history.registry import GraphRegistry, compiled
from .history.state import state_json, state_model_at
from .history.threads import thread_state
from .store.base import CheckpointStore
from .store.memory import MemoryStore
from .travel.branches import branch_code, new_fork, new_replay
from .travel.diff import Change, diff
from .travel.report import ReplayReport
from .travel.transfer import export_thread, import_thread
from .travel.views import CheckpointView, build_report, checkpoint_view


class Runtime:
    """Runs graphs durably against a store.

    ``max_concurrency`` bounds node attempts in flight across every run this
    Runtime drives (each run may set a lower bound of its own).
    """

    def __init__(self, store: CheckpointStore | None = None, *, max_concurrency: int = 8,
                 graphs: Iterable[Graph | ExecutableGraph] = (), clock: Clock | None = None,
                 ids: IdSource | None = None, lease_ttl: float = 30.0, heartbeat: float = 1.0,
                 group_commit: float = 0.005):
        check_concurrency(max_concurrency)
        self.store: CheckpointStore = store if store is not None else MemoryStore()
        ids = ids or RandomIds()
        # more threads than slots: a timed-out sync node keeps its thread until it returns
        self._pool = ThreadPoolExecutor(max_workers=max(32, 4 * max_concurrency), thread_name_prefix="harness-node")
        # the id's random tail: its head is the time, which two Runtimes started together share
        self.env = Environment(clock=clock or SystemClock(), ids=ids, owner=make_owner(ids.new("w")[-8:]),
                               lease_ttl=lease_ttl, heartbeat=min(heartbeat, lease_ttl / 3),
                               group_commit=group_commit, pool=self._pool, max_concurrency=max_concurrency)
        self.graphs = GraphRegistry(self.store)
        # a store that hears other processes at once (PostgreSQL's) tells the runs driven here
        slots = Slots(max_concurrency, getattr(self.store, "subscribe", None))
        self._deps = EngineDeps(store=self.store, env=self.env, slots=slots, graphs=self.graphs,
                                compensations=CompensationRegistry())
        self._driver = Driver(self._deps)
        for g in graphs:
            self.register(g)

    # the environment's parts, as earlier releases exposed them
    @property
    def max_concurrency(self) -> int:
        return self.env.max_concurrency

    @property
    def clock(self) -> Clock:
        return self.env.clock

    @property
    def ids(self) -> IdSource:
        return self.env.ids

    @property
    def owner(self) -> str:
        return self.env.owner

    @property
    def lease_ttl(self) -> float:
        return self.env.lease_ttl

    @property
    def heartbeat(self) -> float:
        return self.env.heartbeat

    @property
    def group_commit(self) -> float:
        return self.env.group_commit

    # ------------------------------------------------------------------ graphs

    def register(self, graph: Graph | ExecutableGraph) -> ExecutableGraph:
        """Make a graph known, so runs of its version can be resumed and inspected."""
        return self.graphs.register(graph)

    def graph_for(self, run: Run) -> ExecutableGraph:
        """The graph a run was made by (registered here, or importable by reference)."""
        return self.graphs.graph_for(run)

    # ------------------------------------------------------------------ running

    async def start(self, graph: Graph | ExecutableGraph, input: Mapping[str, JSON] | BaseModel | None = None,
                    **options: Any) -> Run:
        """Create a run and execute it here until it ends or pauses. ``options``: ``thread_id``
        (a conversation's next turn), the limits ``deadline`` (seconds from now), ``max_steps``,
        ``max_tokens`` and ``max_cost``, ``max_concurrency``, ``compensate_on`` (run statuses)."""
        graph = self.register(graph_arg(graph))
        run, head = self._create(graph, input, claim=True, **start_options(options))
        self.graphs.remember_run(run.id, graph)
        # the caller's graph object: a graph of the same structure may share its version
        return await self._driver.drive(run, graph, head)

    async def submit(self, graph: Graph | ExecutableGraph, input: Mapping[str, JSON] | BaseModel | None = None,
                     **options: Any) -> Run:
        """Create a QUEUED run for a worker (or a later ``resume``) to execute."""
        return self._create(self.register(graph_arg(graph)), input, claim=False, **start_options(options))[0]

    def _create(self, graph: ExecutableGraph, input: Mapping[str, JSON] | BaseModel | None, *,
                claim: bool, **options: Any) -> tuple[Run, Checkpoint]:
        if options.get("thread_id") is not None:
            check_thread_id(options["thread_id"])
        return create_run(self.store, self.graphs, self.env, graph, input, claim=claim, **options)

    async def resume(self, run_id: str, answer: JSON = MISSING, *,
                     answers: Mapping[str, JSON] | None = None,
                     graph: Graph | ExecutableGraph | None = None, deadline: float | None = None,
                     max_steps: int | None = None, max_tokens: int | None = None,
                     max_cost: float | None = None, answered_by: str | None = None, queue: bool = False) -> Run:
        """Continue a run: answer its interrupts, continue it after failure or
        cancellation (as a new continuation run), or recover it after a crash. ``queue=True``
        leaves the run (or continuation) QUEUED for a worker and returns at once.

        ``answers`` ({interrupt id: answer}) answers several questions at once, instead
        of ``answer``; the two together are refused.
        ``graph`` names the graph object to run with (it must have the run's version);
        by default the one the run was started with here, else the registered one.
        A continuation starts with its parent's usage and limits, so budgets count
        across the chain; ``deadline``, ``max_steps``, ``max_tokens`` and ``max_cost``
        replace the limits of those names (a continuation's, or the same run's from now
        on; one below the usage so far ends the run with ``limit_exceeded``). ``answered_by``
        names who answered; the trace's ``interrupt.answered`` events record it. A run still
        running other branches takes answers too (ADR 0011), from another process through the
        store within a heartbeat; the call returns once the run next pauses or ends."""
        run_id = id_arg(run_id, "run_id")
        answers = answers_arg(answer is not MISSING, answers)
        limits = new_limits(self.env.now(), deadline=deadline, max_steps=max_steps, max_tokens=max_tokens,
                            max_cost=max_cost)
        if graph is not None:
            run = self.store.get_run(run_id)
            given = compiled(graph_arg(graph))
            if not self.graphs.made_by(given, run.graph_version):   # refused before anything is stored
                raise InvalidRequest(f"run {run_id} was made by graph version {run.graph_version}; "
                                     f"the graph given is version {given.version}")
            given = self.graphs.register(given, current=False)   # for this run only
            self.graphs.remember_run(run_id, given)
        if answered_by is not None and (not isinstance(answered_by, str) or not answered_by or len(answered_by) > 200):
            raise InvalidRequest(f"answered_by must be a short non-empty string, got {answered_by!r}")
        return await self._driver.resume(run_id, answer, answers, limits, answered_by, bool_arg(queue, "queue"))

    async def cancel(self, run_id: str, reason: str = "cancelled by request", *, wait: float = 10.0,
                     queue: bool = False) -> Run:
        """Cancel a run: in-flight nodes are cancelled, nothing retries; ends CANCELLED. ``reason`` (at
        most 500 characters) becomes its error; ``wait``: seconds to wait for a run driven elsewhere;
        ``queue``: when the run ends here and its policy compensates a cancel, a worker does it."""
        run_id = id_arg(run_id, "run_id")
        check_cancel(reason, wait)
        return await self._driver.cancel(run_id, reason, wait, undo_here=not bool_arg(queue, "queue"))

    def stream(self, target: Graph | ExecutableGraph | Awaitable[object], input: Mapping[str, JSON] | BaseModel | None = None,
               *, buffer: int = DEFAULT_BUFFER, recorded: bool = True, **options: Any) -> RunStream:
        """Run a graph (as ``start`` does) and yield its events as they commit:
        ``run.created`` first (it names the run), node starts and outputs
        (``node.succeed`` carries the writes), checkpoints, interrupts, ``ctx.emit``
        payloads, and the run's end or pause.

        ``target`` may also be a call of this Runtime, to stream what it does:
        ``rt.stream(rt.resume(run_id, answer))``, ``rt.stream(rt.fork(cp))``,
        ``rt.stream(rt.replay(run_id))``; events of every run the call creates or
        drives are yielded, in order.

        The call stops (its run ends CANCELLED) when the stream is closed before it is
        done: leaving an inline ``async for``, the end of ``async with rt.stream(...) as
        events:``, or ``await events.aclose()`` (see ``RunStream``).

        The run never waits for its reader: the stream holds at most ``buffer`` events.
        A reader that falls further behind is handed the recorded events it missed from
        the store once it has taken the held ones (the same sequence, no gap, no
        duplicate); ephemeral events emitted meanwhile are dropped, and a
        ``stream.dropped`` event (itself ephemeral) says how many (``data["count"]``).

        ``recorded=False``: live progress only, for a reader that reads the trace itself:
        each run's first event (it names the run) and the ephemeral ones (token chunks);
        nothing is ever read back from the store."""
        check_stream(target, buffer, recorded)
        if isinstance(target, (Graph, ExecutableGraph)):
            return stream_call(self.start(target, input, **options), self.store, buffer, recorded)
        streamable = (Runtime.start, Runtime.resume, Runtime.fork, Runtime.replay)
        if not call_of(target, self, streamable):
            close_call(target)   # never awaited: say so once, here, not as a warning later
            raise InvalidRequest(f"stream takes a graph or a call of this Runtime (rt.resume(...), rt.fork(...), "
                                 f"rt.replay(...)), got {type(target).__name__}")
        if input is not None or options:
            close_call(target)
            raise InvalidRequest("stream(call) takes the call alone; give the input and options to the call")
        return stream_call(target, self.store, buffer, recorded)

    def follow(self, run_id: str, *, after_seq: int = 0, poll: float = 0.1) -> RunStream:
        """The stream of a run that another process (or another call) drives, read from
        the store every ``poll`` seconds until it ends or pauses; the same events as its
        live stream, except ephemeral ones."""
        self.store.get_run(id_arg(run_id, "run_id"))  # NotFound now, not at the first iteration
        seq_arg(after_seq)
        if isinstance(poll, bool) or not isinstance(poll, (int, float)) or not 0 < poll < float("inf"):
            raise InvalidRequest(f"poll must be a positive number of seconds, got {poll!r}")
        return follow(self.store, run_id, after_seq=after_seq, poll=poll)

    def orphaned(self, run: Run) -> bool:
        """A RUNNING run whose process is gone (lease expired or its PID dead here)."""
        return self._driver.orphaned(run)

    def drives(self, run_id: str) -> bool:
        """Whether this Runtime drives the run now: it takes answers while the run goes on."""
        return self._driver.driven_here(run_id)

    # ------------------------------------------------------------------ time travel

    async def fork(self, checkpoint_id: str, patch: Mapping[str, JSON] | None = None, *,
                   effects: str = "mock", mocks: Mapping[str, JSON] | None = None,
                   graph: Graph | ExecutableGraph | None = None, deadline: float | None = None,
                   max_steps: int | None = None, max_tokens: int | None = None,
                   max_cost: float | None = None, queue: bool = False) -> Run:
        """Branch off at a checkpoint: a new run in the same thread whose input is the
        state there with ``patch`` applied; nodes finished there are not run again.

        ``effects="mock"`` serves effects from the source lineage's journal and pauses
        on any it has no record of; ``mocks={name: result}`` answers those up front;
        ``effects="live"`` runs them for real with keys of this branch. The fork copies
        the source run's limits, except those given here; its usage starts at zero.
        ``queue=True`` creates the fork QUEUED for a worker (``harness worker``) and returns
        it at once: nothing of it runs here (``graph`` must then be importable by reference)."""
        queue = bool_arg(queue, "queue")
        limits = new_limits(self.env.now(), deadline=deadline, max_steps=max_steps, max_tokens=max_tokens,
                            max_cost=max_cost)
        run, graph_used, head = new_fork(self._deps, id_arg(checkpoint_id, "checkpoint_id"), patch, effects, mocks,
                                         branch_code(graph_arg(graph) if graph is not None else None, queue),
                                         limits, claim=not queue)
        self.graphs.remember_run(run.id, graph_used)
        return run if queue else await self._driver.drive(run, graph_used, head)

    async def replay(self, run_or_checkpoint_id: str, graph: Graph | ExecutableGraph | None = None, *,
                     mocks: Mapping[str, JSON] | None = None) -> ReplayReport:
        """Re-execute a recorded run (or everything after a checkpoint) with every effect
        mocked — with the same code, or ``graph`` (a new version) — and report per node
        what differs from the recording."""
        run, graph_used, head = new_replay(self._deps, id_arg(run_or_checkpoint_id, "run_or_checkpoint_id"),
                                           branch_code(graph_arg(graph) if graph is not None else None), mocks)
        self.graphs.remember_run(run.id, graph_used)
        await self._driver.drive(run, graph_used, head)
        return await self.replay_report(run.id)

    async def submit_replay(self, run_or_checkpoint_id: str, graph: Graph | ExecutableGraph | None = None, *,
                            mocks: Mapping[str, JSON] | None = None) -> Run:
        """The replay ``replay`` makes, created QUEUED for a worker (``harness worker``) and
        returned at once: nothing of it runs here, so there is no report yet;
        ``replay_report(run.id)`` gives it once the replay has ended (or paused). As ``submit``
        is to ``start``; ``graph`` must be importable by reference, as the worker runs it."""
        run, graph_used, _ = new_replay(self._deps, id_arg(run_or_checkpoint_id, "run_or_checkpoint_id"),
                                        branch_code(graph_arg(graph) if graph is not None else None, True), mocks,
                                        claim=False)
        self.graphs.remember_run(run.id, graph_used)
        return run

    async def replay_report(self, replay_run_id: str) -> ReplayReport:
        """The report of a replay run (again after resuming one that paused)."""
        return build_report(self._deps, self.store.get_run(id_arg(replay_run_id, "run_id")))

    async def diff(self, checkpoint_a: str, checkpoint_b: str) -> list[Change]:
        """Field-level changes from the state at ``checkpoint_a`` to the state at
        ``checkpoint_b`` (any two checkpoints: of one run, or of sibling branches)."""
        a = state_json(self.store, self.graphs, self.store.get_checkpoint(id_arg(checkpoint_a, "checkpoint_id")))
        b = state_json(self.store, self.graphs, self.store.get_checkpoint(id_arg(checkpoint_b, "checkpoint_id")))
        return diff(a, b)

    async def checkpoint(self, checkpoint_id: str | Checkpoint) -> CheckpointView:
        """One checkpoint with its state, the outcomes recorded against it, and what
        would be ready to run next from it (given its id, or the checkpoint already read)."""
        cp = (checkpoint_id if isinstance(checkpoint_id, Checkpoint)
              else self.store.get_checkpoint(id_arg(checkpoint_id, "checkpoint_id")))
        return checkpoint_view(self._deps, cp)

    async def compensate(self, run_id: str, *, retry_in_doubt: bool = False, queue: bool = False) -> CompensationReport:
        """Undo the run's live, succeeded effects that registered a ``compensate``,
        newest first, each once; see ``runtime.engine.compensation``. ``queue``: leave it to
        a worker (``harness worker``), which can import the undo functions; the report says
        ``queued`` and has no steps: the journal records each undo as the worker makes it."""
        run_id, again = id_arg(run_id, "run_id"), bool_arg(retry_in_doubt, "retry_in_doubt")
        if bool_arg(queue, "queue"):
            return ask_worker(self._deps, run_id, again)
        return await compensate(self._deps, run_id, again)

    async def compensate_asked(self, ask: CompensationAsk) -> CompensationReport | None:
        """Make a compensation left to workers (one of ``store.compensation_asks()``), as
        ``harness worker`` does: None if another worker made it first; the ask is forgotten
        once made, under the run's lease, or kept when an undo cannot be imported here."""
        return await make_asked(self._deps, ask)

    async def export_thread(self, run_id: str) -> dict[str, JSON]:
        """The whole thread of ``run_id`` as one versioned, JSON-serialisable document."""
        return export_thread(self.store, id_arg(run_id, "run_id"))

    async def import_thread(self, document: Mapping[str, JSON], *, effects: str = "mock") -> list[Run]:
        """Load an exported thread into this store (its ids and its thread id must be new
        here); a bad one writes nothing. Going on from its runs here mocks the effects that
        happened where it came from, unless ``effects="live"`` (ADR 0012)."""
        return import_thread(self.store, document, self.graphs.registered, effects=effects, at=self.env.now())

    # ------------------------------------------------------------------ reading

    async def get_run(self, run_id: str) -> Run:
        return self.store.get_run(id_arg(run_id, "run_id"))

    async def runs(self, status: RunStatus | str | None = None, limit: int = 100, *,
                   thread_id: str | None = None) -> list[Run]:
        """Runs, newest first, optionally of one status and of one thread."""
        if status is not None and status not in set(RunStatus):
            raise InvalidRequest(f"unknown status {status!r}; one of: {', '.join(RunStatus)}")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LISTED:
            raise InvalidRequest(f"limit must be a whole number from 1 to {MAX_LISTED:,}, got {limit!r}")
        if thread_id is not None:
            check_thread_id(thread_id)
        return self.store.list_runs(RunStatus(status) if status else None, thread_id=thread_id, limit=limit)

    async def thread_state(self, thread_id: str) -> BaseModel:
        """The state of a conversation thread: where its latest run (not a replay) is now,
        which is where the thread's next turn starts."""
        check_thread_id(thread_id)
        found = thread_state(self.store, self.graphs, thread_id)
        if found is None:
            raise NotFound(f"no thread {thread_id!r}")
        run, state = found
        try:
            model: type[BaseModel] = self.graphs.graph_for(run).state_model
        except (NotFound, InvalidRequest, GraphError):
            model = AnyState
        return model.model_validate(state)

    async def history(self, run_id: str) -> list[Checkpoint]:
        """The run's checkpoints, oldest first."""
        return self.store.checkpoints(id_arg(run_id, "run_id"))

    async def state_at(self, checkpoint_id: str) -> BaseModel:
        """The state at a checkpoint, as the graph's state model."""
        cp = self.store.get_checkpoint(id_arg(checkpoint_id, "checkpoint_id"))
        return state_model_at(self.store, self.graphs, cp)

    async def events(self, run_id: str, after_seq: int = 0) -> list[TraceEvent]:
        """The run's trace after ``after_seq``; ``node.succeed`` carries ``data["writes"]`` as streamed."""
        run_id = id_arg(run_id, "run_id")
        return with_writes(self.store, run_id, self.store.events(run_id, seq_arg(after_seq)))

    async def interrupts(self, run_id: str | None = None, pending: bool = True) -> list[Interrupt]:
        run_id = None if run_id is None else id_arg(run_id, "run_id")   # None: every run's
        return self.store.interrupts(run_id, InterruptStatus.PENDING if bool_arg(pending, "pending") else None)

    async def attempts(self, run_id: str) -> list[NodeAttempt]:
        return self.store.node_attempts(id_arg(run_id, "run_id"))

    async def pending_writes(self, run_id: str) -> list[PendingWrite]:
        return self.store.pending_writes(id_arg(run_id, "run_id"))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.store.close()


#: the most runs one listing returns
MAX_LISTED = 1_000_000
