"""Shadow Harness runtime: a durable execution kernel for agent and tool workflows."""

from .compensation import CompensationReport
from .context import NodeContext
from .diff import Change
from .effects import EffectInfo
from .errors import (
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
from .graph import ExecutableGraph, Graph, RetryPolicy
from .plan import Registry, compile_plan
from .records import Checkpoint, EffectsMode, Interrupt, Run, RunKind
from .reducers import add, append, last_value, merge, reducer
from .report import ReplayReport
from .runtime import Runtime
from .states import NodeStatus, RunStatus
from .store.memory import MemoryStore
from .store.sql import SqlStore

__all__ = [
    "Change", "Checkpoint", "CompensationReport", "EffectInfo", "EffectsMode", "ReplayReport", "ErrorClass", "ExecutableGraph", "Graph", "GraphError", "HarnessError",
    "IllegalTransition", "Interrupt", "InvalidAnswer", "InvalidInputError", "InvalidRequest",
    "LeaseLost", "MemoryStore", "NodeContext", "NodeError", "NodeStatus", "NotFound",
    "PermissionDeniedError", "Registry", "RetryPolicy", "Run", "RunKind", "RunStatus", "Runtime",
    "SemanticError", "SqlStore", "TransientError", "add", "append", "compile_plan", "last_value",
    "merge", "reducer",
]
