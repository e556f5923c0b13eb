"""The graph layer's public types under the path other layers import them from.

The data types live in ``definitions`` and the decorator builder in ``builder``; this
module only names them together, so ``runtime.graph.spec.Graph`` keeps working.
"""

from __future__ import annotations

from .builder import Graph
from .definitions import NO_RETRY, AnyState, ExecutableGraph, NodeDecl, NodeSpec, RetryPolicy

__all__ = ["NO_RETRY", "AnyState", "ExecutableGraph", "Graph", "NodeDecl", "NodeSpec", "RetryPolicy"]
