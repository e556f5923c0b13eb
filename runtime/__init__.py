"""Shadow Harness runtime: a durable execution kernel for agent and tool workflows."""

from .engine.compensation import CompensationReport
from .engine.context import NodeContext
from .travel.diff import Change
from .engine.effects import EffectInfo
from .core.errors import (
                     ErrorClass,
                     GraphError,
                     HarnessError,
                     IllegalTransition,
                     InvalidAnswer,
                     InvalidInputError,
                     InvalidRequest,
                     LeaseLost,
                     NodeError,
                     NotFound,
                     PermissionDeniedError,
                     SemanticError,
                     TransientError,
)
from .graph.spec import ExecutableGraph, Graph, RetryPolicy
from .graph.plan import Registry, compile_plan
from .core.records import Checkpoint, EffectsMode, Interrupt, Run, RunKind
from .graph.reducers import add, append, last_value, merge, reducer
from .travel.report import ReplayReport
from .runtime import Runtime
from .core.states import NodeStatus, RunStatus
from .store.memory import MemoryStore
from .store.sql.store import SqlStore

__all__ = [
    "Change", "Checkpoint", "CompensationReport", "EffectInfo", "EffectsMode", "ReplayReport", "ErrorClass", "ExecutableGraph", "Graph", "GraphError", "HarnessError",
    "IllegalTransition", "Interrupt", "InvalidAnswer", "InvalidInputError", "InvalidRequest",
    "LeaseLost", "MemoryStore", "NodeContext", "NodeError", "NodeStatus", "NotFound",
    "PermissionDeniedError", "Registry", "RetryPolicy", "Run", "RunKind", "RunStatus", "Runtime",
    "SemanticError", "SqlStore", "TransientError", "add", "append", "compile_plan", "last_value",
    "merge", "reducer",
]
