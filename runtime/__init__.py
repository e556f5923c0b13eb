"""Shadow Harness runtime: a durable execution kernel for agent and tool workflows.

Everything a user imports comes from here; ``__all__`` is exactly the public API
(a test keeps it so). Layers, lowest first: ``core`` (errors, states, records),
``graph`` (declaring and compiling graphs), ``store`` (checkpoint stores),
``history`` (lineage, state at a checkpoint), ``engine`` (driving runs),
``travel`` (forks, replays, diffs, export), and the ``Runtime`` facade.
"""

import logging

from .core.clock import Clock, IdSource, RandomIds, SystemClock
from .core.errors import (
    EndNotRecorded,
    ErrorClass,
    GraphError,
    GraphNotRegistered,
    HarnessError,
    IllegalTransition,
    InvalidAnswer,
    InvalidInputError,
    InvalidRequest,
    LeaseLost,
    NodeError,
    NotFound,
    PermissionDeniedError,
    Problem,
    SemanticError,
    StoreUnreachable,
    TransientError,
)
from .core.jsonvalues import JSON
from .core.records import (
    Checkpoint,
    CheckpointSource,
    EffectsMode,
    EffectStatus,
    EventType,
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
from .core.states import NodeStatus, RunStatus
from .core.streams import StreamEvent
from .engine.compensation import CompensationReport, CompensationStep, StepStatus
from .engine.context import NodeContext
from .engine.effects import EffectInfo
from .engine.streaming import RunStream
from .graph import ExecutableGraph, Graph, RetryPolicy
from .graph.plan import Registry, compile_plan
from .graph.reducers import add, append, last_value, merge, reducer
from .graph.refs import resolve_ref
from .runtime import Runtime
from .store.base import CheckpointStore
from .store.memory import MemoryStore
from .store.sql import SqlStore
from .travel.diff import Change
from .travel.report import EffectReport, EffectVerdict, NodeReport, ReplayReport, Verdict
from .travel.views import CheckpointView

# silent by default: an application that wants the runtime's log records configures logging
logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "Change",
    "Checkpoint",
    "CheckpointSource",
    "CheckpointStore",
    "CheckpointView",
    "Clock",
    "CompensationReport",
    "CompensationStep",
    "EffectInfo",
    "EffectReport",
    "EffectStatus",
    "EffectVerdict",
    "EffectsMode",
    "EndNotRecorded",
    "ErrorClass",
    "EventType",
    "ExecutableGraph",
    "Graph",
    "GraphError",
    "GraphNotRegistered",
    "HarnessError",
    "IdSource",
    "IllegalTransition",
    "Interrupt",
    "InterruptKind",
    "InterruptStatus",
    "InvalidAnswer",
    "InvalidInputError",
    "InvalidRequest",
    "JSON",
    "JournalEntry",
    "LeaseLost",
    "MemoryStore",
    "NodeAttempt",
    "NodeContext",
    "NodeError",
    "NodeReport",
    "NodeStatus",
    "NotFound",
    "PendingWrite",
    "PermissionDeniedError",
    "Problem",
    "RandomIds",
    "Registry",
    "ReplayReport",
    "RetryPolicy",
    "Run",
    "RunKind",
    "RunStatus",
    "RunStream",
    "Runtime",
    "SemanticError",
    "SqlStore",
    "StepStatus",
    "StoreUnreachable",
    "StreamEvent",
    "SystemClock",
    "TraceEvent",
    "TransientError",
    "Verdict",
    "WriteKind",
    "add",
    "append",
    "compile_plan",
    "last_value",
    "merge",
    "reducer",
    "resolve_ref",
]
