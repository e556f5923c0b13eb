"""Layer 1: declaring graphs (decorators or plans), validating and compiling them.

Pure: turns declarations into an immutable ``ExecutableGraph``; imports only ``core``.
"""

from .builder import Graph
from .spec import AnyState, ExecutableGraph, FoldShape, NodeDecl, NodeOrder, NodeSpec, RetryPolicy

__all__ = ["AnyState", "ExecutableGraph", "FoldShape", "Graph", "NodeDecl", "NodeOrder", "NodeSpec",
           "RetryPolicy"]
