"""The graph layer's data types: node declarations, retry policies, compiled nodes and
the immutable ``ExecutableGraph``.

Only data lives here, so that validation (which builds these) and the builders (which
call validation) can both import it without importing each other.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..core.errors import ErrorClass
from .instances import InstanceKey, canonical_instances, instance_key, loop_blocks, loop_paths
from .reducers import BUILTIN, Reducer, last_value, reducers_for


class AnyState(BaseModel):
    """State used when a graph declares none: any field, last-value everywhere."""

    model_config = ConfigDict(extra="allow")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how soon a failed attempt is tried again, by error class."""

    max_attempts: int = 3
    initial_interval: float = 0.5
    backoff: float = 2.0
    max_interval: float = 30.0
    retry_on: frozenset[ErrorClass] = frozenset({ErrorClass.TRANSIENT, ErrorClass.DEADLINE})

    def delay(self, failed_attempt: int) -> float:
        """Seconds to wait after attempt number ``failed_attempt`` (1-based) failed."""
        return min(self.max_interval, self.initial_interval * self.backoff ** (failed_attempt - 1))

    def to_json(self) -> dict[str, Any]:
        return {
            "max_attempts": self.max_attempts,
            "initial_interval": self.initial_interval,
            "backoff": self.backoff,
            "max_interval": self.max_interval,
            "retry_on": sorted(self.retry_on),
        }


NO_RETRY = RetryPolicy(max_attempts=1)


@dataclass(frozen=True, slots=True)
class NodeDecl:
    """A node as declared, before validation (from a decorator or a plan entry)."""

    name: Any
    fn: Any
    after: Any = ()
    retry: Any = None
    timeout: Any = None
    when: Any = None
    args: Any = field(default_factory=dict)
    response: Any = None
    location: str = ""
    fn_ref: str = ""
    when_ref: str | None = None
    #: a loop's entry: how many iterations the loop may run
    max_iterations: Any = None
    #: a map worker: the state field whose list it runs over, one instance per item
    map_over: Any = None
    #: a subgraph's node: the child's state model it sees (a view of the parent's state)
    view: Any = None
    #: declared by a subgraph: its name may contain '/' (the subgraph's path)
    scoped: bool = False
    #: a subgraph's end (the node its name stands for): one of its first nodes
    subgraph_root: Any = None


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """A validated node of a compiled graph."""

    name: str
    fn: Callable[..., Any]
    after: tuple[str, ...]
    retry: RetryPolicy
    timeout: float | None
    when: Callable[[Any], bool] | None
    args: Mapping[str, Any]        # as declared (JSON, part of the structure)
    bound: Mapping[str, Any]       # converted to the function's annotated types, passed on call
    is_async: bool
    wants_ctx: bool
    fn_ref: str
    when_ref: str | None
    location: str
    max_iterations: int | None = None
    map_over: str | None = None
    view: type[BaseModel] | None = None
    wants_item: bool = False
    #: a subgraph's end: one of the subgraph's first nodes. The end is skipped only when
    #: the subgraph was never entered, not when its last nodes were skipped by their ``when``
    subgraph_root: str | None = None

    def structure(self) -> dict[str, Any]:
        """What identifies the node in a graph version (defaults left out, to stay small)."""
        out: dict[str, Any] = {"name": self.name, "fn": self.fn_ref}
        if self.after:
            out["after"] = sorted(self.after)
        if self.args:
            out["args"] = dict(self.args)
        if self.when_ref:
            out["when"] = self.when_ref
        if self.timeout is not None:
            out["timeout"] = self.timeout
        if self.retry != NO_RETRY:
            out["retry"] = self.retry.to_json()
        if self.max_iterations is not None:
            out["max_iterations"] = self.max_iterations
        if self.map_over is not None:
            out["map_over"] = self.map_over
        return out


class ExecutableGraph:
    """An immutable, validated graph: nodes, dependencies, canonical order, reducers.

    Build it with ``Graph.compile()`` (builder) or ``compile_plan()`` (plan); both validate first.
    """

    __slots__ = ("name", "state_model", "nodes", "order", "index", "reducers", "version", "legacy_version", "ref",
                 "loops", "loop_of", "loop_path", "back_sources", "block", "_ancestors", "_children", "_frozen")

    def __init__(self, name: str, state_model: type[BaseModel], nodes: Sequence[NodeSpec],
                 order: Sequence[str], loops: Mapping[str, Sequence[str]] | None = None):
        self.name = name
        self.state_model = state_model
        self.ref: str | None = None   # where it can be imported from, when known (for resume elsewhere)
        self.nodes: Mapping[str, NodeSpec] = {n.name: n for n in nodes}
        self.order: tuple[str, ...] = tuple(order)
        self.index: Mapping[str, int] = {n: i for i, n in enumerate(self.order)}
        self.reducers: Mapping[str, Reducer] = reducers_for(state_model)
        #: loops by entry node (the node with max_iterations): their members in canonical order
        self.loops: Mapping[str, tuple[str, ...]] = {e: tuple(m) for e, m in (loops or {}).items()}
        #: the loops around a node, outermost first (an inner loop's members are its outer one's too)
        self.loop_path: Mapping[str, tuple[str, ...]] = loop_paths(self.loops)
        #: the innermost loop a node is in
        self.loop_of: Mapping[str, str] = {m: path[-1] for m, path in self.loop_path.items()}
        #: the loop members an entry runs again after (its back-edges)
        self.back_sources: Mapping[str, tuple[str, ...]] = {
            e: tuple(d for d in self.nodes[e].after if d in ms) for e, ms in self.loops.items()}
        #: where the blocks of the loops around a node start in the order, outermost first
        self.block: Mapping[str, tuple[int, ...]] = loop_blocks(self.index, self.loops)
        children: dict[str, list[str]] = {n: [] for n in self.order}
        for n in nodes:
            for d in self.forward_deps(n.name):
                children[d].append(n.name)
        self._children: Mapping[str, tuple[str, ...]] = {
            k: tuple(sorted(v, key=self.index.__getitem__)) for k, v in children.items()}
        # Ancestor sets as bitmasks over canonical positions: cheap to test and to iterate.
        anc: dict[str, int] = {}
        for name in self.order:
            mask = 0
            for d in self.forward_deps(name):
                mask |= anc[d] | (1 << self.index[d])
            anc[name] = mask
        self._ancestors: Mapping[str, int] = anc
        self.version, self.legacy_version = self._structural_hashes()
        self.nodes = MappingProxyType(dict(self.nodes))
        self.index = MappingProxyType(dict(self.index))
        self.reducers = MappingProxyType(dict(self.reducers))
        self._children = MappingProxyType(self._children)
        self._ancestors = MappingProxyType(self._ancestors)
        self.loops = MappingProxyType(dict(self.loops))
        self.loop_of = MappingProxyType(dict(self.loop_of))
        self.loop_path = MappingProxyType(dict(self.loop_path))
        self.back_sources = MappingProxyType(dict(self.back_sources))
        self.block = MappingProxyType(dict(self.block))
        self._frozen = True

    def __setattr__(self, name: str, value: Any) -> None:
        # compiled graphs are values: only ``ref`` (where it can be imported from) is settable
        if getattr(self, "_frozen", False) and name != "ref":
            raise AttributeError(f"ExecutableGraph is immutable; cannot set {name!r}")
        object.__setattr__(self, name, value)

    def _structural_hashes(self) -> tuple[str, str]:
        """(version, legacy version). A field's reducer is structure: it decides every state
        folded from the recorded writes. A version named no reducer before (the JSON schema
        leaves them out); that older version is kept as the legacy one, by which runs
        recorded then are still found (``GraphRegistry.made_by``). Every version names the
        reducers, none included, so no graph's version is another's legacy one."""
        doc: dict[str, Any] = {
            "name": self.name,
            "state": self.state_model.model_json_schema(),
            "nodes": [self.nodes[n].structure() for n in sorted(self.nodes)],
        }
        folding = folding_reducers({f: r.name for f, r in self.reducers.items()})
        return _digest({**doc, "reducers": folding}), _digest(doc)

    def reducer(self, field_name: str) -> Reducer:
        return self.reducers.get(field_name, last_value)

    def forward_deps(self, node: str) -> tuple[str, ...]:
        """``after`` without a loop entry's back-edges (those start the next iteration)."""
        back = self.back_sources.get(node) if self.loops else None
        after = self.nodes[node].after
        return after if not back else tuple(d for d in after if d not in back)

    @property
    def dynamic(self) -> bool:
        """Whether runs of this graph create instances beyond one per node."""
        return bool(self.loops) or any(s.map_over is not None for s in self.nodes.values())

    def key(self, instance: str) -> InstanceKey:
        return instance_key(self.index, self.block, instance)

    def is_ancestor(self, a: str, b: str) -> bool:
        """True when ``a`` must finish before ``b`` can start (transitively)."""
        return bool(self._ancestors[b] >> self.index[a] & 1)

    def ancestor_mask(self, node: str) -> int:
        """Ancestors of ``node`` as a bitmask over canonical positions."""
        return self._ancestors[node]

    def ancestors(self, node: str) -> list[str]:
        """Ancestors of ``node`` in canonical order."""
        mask = self._ancestors[node]
        return [n for i, n in enumerate(self.order) if mask >> i & 1]

    def children(self, node: str) -> tuple[str, ...]:
        return self._children[node]

    def canonical(self, names: Sequence[str]) -> list[str]:
        """Node instances in canonical (fold) order."""
        if not self.dynamic and all(n in self.index for n in names):
            return sorted(names, key=self.index.__getitem__)
        return canonical_instances(self.index, self.block, names)

    def describe(self) -> dict[str, Any]:
        """A JSON description of the structure (for stores, exports and the UI)."""
        return {
            "name": self.name,
            "version": self.version,
            "order": list(self.order),
            "nodes": [self.nodes[n].structure() for n in self.order],
            # not part of the version: lets states be rebuilt without the code (see FoldShape)
            "reducers": {f: r.name for f, r in self.reducers.items()},
            **({"loops": {e: list(m) for e, m in self.loops.items()}} if self.loops else {}),
        }

    def __repr__(self) -> str:
        return f"<ExecutableGraph {self.name!r} v{self.version} {len(self.order)} nodes>"


@dataclass(frozen=True, slots=True)
class NodeOrder:
    """A graph's nodes and the canonical order of their instances, as its stored description
    names them: what reading a run's nodes in order (a replay's report) needs where the
    graph's code cannot be imported. Unlike ``FoldShape`` it needs no reducers, so custom
    ones do not stop it."""

    name: str
    order: tuple[str, ...]
    index: Mapping[str, int]
    block: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def canonical(self, names: Sequence[str]) -> list[str]:
        return canonical_instances(self.index, self.block, names)

    @classmethod
    def from_description(cls, desc: Mapping[str, Any]) -> NodeOrder | None:
        order = desc.get("order")
        if not isinstance(order, list) or not all(isinstance(n, str) for n in order):
            return None
        index = {n: i for i, n in enumerate(order)}
        loops = desc.get("loops") or {}
        block = loop_blocks(index, loops) if isinstance(loops, dict) else {}
        return cls(str(desc.get("name", "?")), tuple(order), index, block)


@dataclass(frozen=True, slots=True)
class FoldShape:
    """What folding writes into a state needs of a graph: its canonical order and its
    reducers. An ``ExecutableGraph`` has these; ``from_description`` rebuilds them from a
    stored description where the graph's code cannot be imported (built-in reducers only)."""

    name: str
    order: tuple[str, ...]
    index: Mapping[str, int]
    reducers: Mapping[str, Reducer]
    block: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def key(self, instance: str) -> InstanceKey:
        return instance_key(self.index, self.block, instance)

    def canonical(self, names: Sequence[str]) -> list[str]:
        return canonical_instances(self.index, self.block, names)

    @classmethod
    def from_description(cls, desc: Mapping[str, Any]) -> FoldShape | None:
        nodes, named = NodeOrder.from_description(desc), desc.get("reducers")
        if nodes is None or not isinstance(named, dict):
            return None   # described before reducers were recorded
        if not all(isinstance(n, str) for n in named.values()) or not set(named.values()) <= set(BUILTIN):
            return None   # a custom reducer: only its code can fold
        return cls(nodes.name, nodes.order, nodes.index, {f: BUILTIN[n] for f, n in named.items()}, nodes.block)


def folding_reducers(names: Mapping[str, Any]) -> dict[str, str]:
    """The fields of a description's ``reducers`` (field: reducer name) that are not last-value."""
    return {f: str(n) for f, n in names.items() if n != last_value.name}


def made_as_described(graph: ExecutableGraph, version: str, described: Mapping[str, Any]) -> bool:
    """Whether runs recorded as ``version``, a graph's legacy version (before versions named
    reducers), of the stored description ``described``, were made by ``graph``'s structure: the
    reducers it names are the graph's. A description written before descriptions named
    reducers cannot tell: the same legacy version is taken as the same structure, as it was."""
    if graph.legacy_version != version:
        return False
    reducers = described.get("reducers")
    if reducers is None:
        return True
    return isinstance(reducers, Mapping) and \
        folding_reducers(reducers) == folding_reducers({f: r.name for f, r in graph.reducers.items()})


def _digest(doc: Mapping[str, Any]) -> str:
    raw = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]
