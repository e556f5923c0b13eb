"""Domain records: frozen values the kernel produces and stores return.

They are kept apart from the SQL table rows in ``store/sql/schema.py``: the store
maps between the two, so the kernel never sees a database type.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .frozen import fast_init, fast_replace
from .jsonvalues import JSON
from .left import CompensationAsk, SentAnswer
from .states import NodeEvent, NodeStatus, RunEvent, RunStatus

__all__ = [
    "Batch",
    "COMPENSATION_STATUSES",
    "Checkpoint",
    "CheckpointSource",
    "CheckpointSummary",
    "CompensationAsk",
    "EffectStatus",
    "EffectsMode",
    "EventType",
    "Interrupt",
    "InterruptKind",
    "InterruptStatus",
    "JournalEntry",
    "MAX_THREAD_ID",
    "NodeAttempt",
    "PendingWrite",
    "Run",
    "RunKind",
    "SERVED_STATUSES",
    "SentAnswer",
    "TraceEvent",
    "WriteKind",
    "thread_id_problem",
]


class RunKind(StrEnum):
    MAIN = "main"
    FORK = "fork"
    REPLAY = "replay"
    CONTINUATION = "continuation"


class WriteKind(StrEnum):
    WRITES = "writes"
    ERROR = "error"
    INTERRUPT = "interrupt"


class EffectStatus(StrEnum):
    STARTED = "started"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    MOCKED = "mocked"
    # compensation of a succeeded effect, journaled like an effect (same identity)
    COMPENSATING = "compensating"
    COMPENSATED = "compensated"
    COMPENSATION_FAILED = "compensation_failed"


#: journal statuses that belong to compensation, not to the effect's own execution
COMPENSATION_STATUSES = frozenset({EffectStatus.COMPENSATING, EffectStatus.COMPENSATED,
                                   EffectStatus.COMPENSATION_FAILED})
#: outcomes whose recorded result is served again instead of calling the effect (to a
#: re-execution, and to a mocked branch from the source lineage's journal)
SERVED_STATUSES = frozenset({EffectStatus.SUCCEEDED, EffectStatus.MOCKED})


class EffectsMode(StrEnum):
    LIVE = "live"      # effects call the outside world (main runs; forks on request)
    MOCK = "mock"      # effects are served from the source lineage's journal, or the run pauses


class InterruptKind(StrEnum):
    USER = "user"                  # ctx.interrupt(...) in node code
    IN_DOUBT = "in_doubt"          # an effect started and its outcome is unknown
    UNRECORDED = "unrecorded"      # replay/fork met an effect with no recorded result


class InterruptStatus(StrEnum):
    PENDING = "pending"
    ANSWERED = "answered"
    CANCELLED = "cancelled"


class EventType(StrEnum):
    """Every trace event type. Node, run and effect events are named after the
    transition or journal status they record (``node.<NodeEvent>``, ``run.<RunEvent>``,
    ``effect.<EffectStatus>``), so a status can be rebuilt from the trace alone."""

    RUN_CREATED = "run.created"
    RUN_CLAIM = "run.claim"
    RUN_INTERRUPT = "run.interrupt"
    RUN_RESUME = "run.resume"
    RUN_QUEUE = "run.queue"
    RUN_RECOVER = "run.recover"
    RUN_SUCCEED = "run.succeed"
    RUN_FAIL = "run.fail"
    RUN_CANCEL = "run.cancel"
    NODE_START = "node.start"
    NODE_SUCCEED = "node.succeed"
    NODE_FAIL = "node.fail"
    NODE_RETRY = "node.retry"
    NODE_INTERRUPT = "node.interrupt"
    NODE_RESUME = "node.resume"
    NODE_SKIP = "node.skip"
    NODE_CANCEL = "node.cancel"
    NODE_LOST = "node.lost"
    EFFECT_STARTED = "effect.started"
    EFFECT_SUCCEEDED = "effect.succeeded"
    EFFECT_FAILED = "effect.failed"
    EFFECT_MOCKED = "effect.mocked"
    EFFECT_COMPENSATING = "effect.compensating"
    EFFECT_COMPENSATED = "effect.compensated"
    EFFECT_COMPENSATION_FAILED = "effect.compensation_failed"
    INTERRUPT_CREATED = "interrupt.created"
    INTERRUPT_ANSWERED = "interrupt.answered"
    INTERRUPT_REUSED = "interrupt.reused"    # a replay or continuation re-used a recorded answer
    STATE_PATCHED = "state.patched"          # a fork's patch, recorded as its own checkpoint
    USAGE = "usage"                          # tokens/cost an attempt reported
    CUSTOM = "custom"                        # a node's ctx.emit(payload)

    @classmethod
    def of_node(cls, event: NodeEvent) -> EventType:
        return _OF_NODE[event]

    @classmethod
    def of_run(cls, event: RunEvent) -> EventType:
        return _OF_RUN[event]

    @classmethod
    def of_effect(cls, status: EffectStatus) -> EventType:
        return cls(f"effect.{status.value}")

    @property
    def node_event(self) -> NodeEvent | None:
        """The node transition this event records, if it records one."""
        head, _, tail = self.value.partition(".")
        return NodeEvent(tail) if head == "node" else None


_BY_VALUE: dict[str, EventType] = {t.value: t for t in EventType}


def event_type(text: str) -> str:
    """An event type read back as text, as the EventType the kernel recorded (other
    text, which stores also accept, stays as it is)."""
    return _BY_VALUE.get(text, text)


#: the trace event of each transition (looked up on every step)
_OF_NODE = {e: EventType(f"node.{e.value}") for e in NodeEvent}
_OF_RUN = {e: EventType(f"run.{e.value}") for e in RunEvent}


class CheckpointSource(StrEnum):
    """How a checkpoint came to be."""

    INPUT = "input"                # the first checkpoint of a new run
    STEP = "step"                  # node outcomes folded by the run loop
    CONTINUATION = "continuation"  # the first checkpoint of a continuation
    FORK = "fork"                  # the first checkpoint of a fork: the state at its base
    PATCH = "patch"                # a fork's patch: the person's edit as a checkpoint of its own
    REPLAY = "replay"              # the first checkpoint of a replay
    TURN = "turn"                  # the first checkpoint of a conversation turn: the thread's
                                   # state with the turn's input applied (stored as a delta)


@fast_init
@dataclass(frozen=True, slots=True)
class Run:
    id: str
    thread_id: str
    graph_name: str
    graph_version: str
    status: RunStatus
    kind: RunKind
    input: Mapping[str, JSON]
    created_at: float
    updated_at: float
    parent_run_id: str | None = None
    base_checkpoint_id: str | None = None
    error: Mapping[str, JSON] | None = None
    limits: Mapping[str, JSON] = field(default_factory=dict)
    usage: Mapping[str, JSON] = field(default_factory=dict)
    max_concurrency: int = 8
    head_seq: int = 0
    event_seq: int = 0
    fence: int = 0
    lease_owner: str | None = None
    lease_expires_at: float | None = None
    #: how the run treats effects and what it does on failure: "effects" (EffectsMode),
    #: "mocks" ({effect name: result}), "compensate_on" ([statuses]), "source" (replay/fork origin),
    #: "imported" ({"at": time, "effects": EffectsMode}: brought from another store)
    options: Mapping[str, JSON] = field(default_factory=dict)

    @property
    def effects_mode(self) -> EffectsMode:
        return EffectsMode.MOCK if self.effects_elsewhere else EffectsMode(self.options.get("effects", EffectsMode.LIVE))

    @property
    def effects_elsewhere(self) -> bool:
        """Imported (or continuing a run imported) with its effects mocked: its live effects
        happened in the store it was exported from, and belong there (nothing here undoes them)."""
        imported = self.options.get("imported")
        return isinstance(imported, Mapping) and imported.get("effects") == EffectsMode.MOCK

    def evolve(self, **changes: Any) -> Run:
        return _replace_run(self, changes)


_replace_run = fast_replace(Run)


@fast_init
@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The run's state after folding some node outcomes: one row per step, never updated."""

    id: str
    run_id: str
    seq: int
    parent_id: str | None
    nodes: tuple[str, ...]                    # nodes whose writes were folded into it
    node_states: Mapping[str, NodeStatus]     # every node's status at this checkpoint
    event_seq: int                            # last trace event this checkpoint reflects
    created_at: float
    source: str = CheckpointSource.STEP       # a CheckpointSource value
    #: full state, kept on periodic snapshots only (None on delta checkpoints)
    snapshot: Mapping[str, JSON] | None = None
    #: nodes whose status changed since the parent checkpoint (None: not known)
    changed: tuple[str, ...] | None = field(default=None, compare=False)


@fast_init
@dataclass(frozen=True, slots=True)
class CheckpointSummary:
    """What a timeline shows of a checkpoint, without its node states or state."""

    id: str
    run_id: str
    seq: int
    nodes: tuple[str, ...]
    source: str
    created_at: float
    event_seq: int = 0


@fast_init
@dataclass(frozen=True, slots=True)
class PendingWrite:
    """A node attempt's outcome, recorded against the head checkpoint when it ended."""

    run_id: str
    checkpoint_seq: int
    node: str
    attempt: int
    kind: WriteKind
    value: JSON
    created_at: float


@fast_init
@dataclass(frozen=True, slots=True)
class NodeAttempt:
    run_id: str
    node: str
    attempt: int
    status: NodeStatus
    started_at: float
    ended_at: float
    error_class: str | None = None
    error: str | None = None
    decision: str | None = None   # what the runtime did about the outcome, in words


#: a journal entry's ``compensate`` when its undo cannot be imported (a lambda, a closure, a
#: bound method, a partial): only the process that ran the effect holds it
LOCAL_UNDO = "<local>"


@fast_init
@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One step of one effect: STARTED before the call, then its outcome."""

    run_id: str
    node: str
    name: str
    occurrence: int
    attempt: int
    key: str
    status: EffectStatus
    request: JSON
    result: JSON = None
    error: str | None = None
    at: float = 0.0
    #: for MOCKED entries: where the result came from ("run:<id>", "mocks", "answer:<interrupt id>")
    source: str | None = None
    #: the effect's compensation: "module:qualname", ``LOCAL_UNDO`` (in-process only), or None
    compensate: str | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class Interrupt:
    """A question waiting for (or given) an answer: one a node asked with ``ctx.interrupt``,
    or one the runtime asks about an effect (in doubt, unrecorded). What was asked is
    ``value``; ``payload`` is the stored form, ``{"value": ..., "response_ref": ...}``."""

    id: str
    run_id: str
    node: str
    slot: str                 # "0", "1", … for ctx.interrupt calls; "effect:NAME#N" for effects
    kind: InterruptKind
    payload: JSON
    status: InterruptStatus
    created_at: float
    response_schema: JSON = None   # the JSON schema an answer must fit, when the node gave a model
    answer: JSON = None
    answered_at: float | None = None

    @property
    def value(self) -> JSON:
        """What the node passed to ``ctx.interrupt`` (for an effect's question, what the runtime asks)."""
        return self.payload.get("value") if isinstance(self.payload, Mapping) else self.payload

    @property
    def response_ref(self) -> str | None:
        """The answer model as ``"module:qualname"`` (None: any JSON answers)."""
        ref = self.payload.get("response_ref") if isinstance(self.payload, Mapping) else None
        return ref if isinstance(ref, str) else None


@fast_init
@dataclass(frozen=True, slots=True)
class TraceEvent:
    run_id: str
    seq: int
    at: float
    type: str                 # an EventType value, e.g. "run.created", "node.succeed", "effect.started"
    node: str | None = None
    attempt: int | None = None
    data: Mapping[str, JSON] = field(default_factory=dict)


@dataclass(slots=True)
class Batch:
    """Everything that must commit in one transaction (a unit of work)."""

    run_id: str
    fence: int | None = None
    run: Run | None = None                   # the run row as it should be after the commit
    checkpoints: list[Checkpoint] = field(default_factory=list)
    writes: list[PendingWrite] = field(default_factory=list)
    attempts: list[NodeAttempt] = field(default_factory=list)
    effects: list[JournalEntry] = field(default_factory=list)
    interrupts: list[Interrupt] = field(default_factory=list)
    events: list[TraceEvent] = field(default_factory=list)
    #: force to disk before returning (output-commit rule); otherwise may group-commit
    durable: bool = False

    def empty(self) -> bool:
        return not (self.run or self.checkpoints or self.writes or self.attempts
                    or self.effects or self.interrupts or self.events)


#: the longest thread id: PostgreSQL's index on it takes at most 2704 bytes a row (4 a character at worst)
MAX_THREAD_ID = 500


def thread_id_problem(value: object) -> str | None:
    """What keeps ``value`` from being a thread id (None: nothing): it is text a store can
    hold as it is — not blank, no NUL character, not too long to index."""
    if isinstance(value, str) and not value.strip():   # said apart: the text below hides what is wrong
        return f"must not be {'blank (whitespace only)' if value else 'empty'}, got {value!r}"
    if not isinstance(value, str) or "\x00" in value:
        return f"must be a non-empty string without NUL characters, got {value!r}"
    if value in (".", "..") or not value.strip("/"):   # a URL's path would read it as a step up or nowhere
        return f"must not be {value!r}"
    if len(value) > MAX_THREAD_ID:
        return f"must be a non-empty string of at most {MAX_THREAD_ID} characters, got one of {len(value):,}"
    return None
