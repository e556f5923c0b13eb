"""The graphs and answer models a Runtime knows, by version and by reference.

A run stores its graph's name and structural version; to continue, inspect or
replay it, the code must be found again: registered here, or importable by the
``module:attr`` reference saved with the graph's description.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from ..core.errors import GraphError, GraphNotRegistered, InvalidRequest, NotFound
from ..core.jsonvalues import JSON
from ..core.records import Run
from ..graph import ExecutableGraph, FoldShape, Graph, NodeOrder
from ..graph.spec import made_as_described
from ..graph.locate import resolve_model
from ..graph.refs import resolve_ref
from ..store.base import CheckpointStore

#: what a stored graph description tells where the code is missing (``FoldShape``, ``NodeOrder``)
_D = TypeVar("_D")

#: the run option naming the code a run executes (``module:attr``) when it is not the
#: code of its version: a replay or fork given candidate code of the same structure
RUN_GRAPH_REF = "graph_ref"
#: how many runs keep the exact graph object they were started with (bounded memory)
RUN_GRAPHS_KEPT = 10_000
#: how many final states are kept in memory for the next turn of their thread
STATES_KEPT = 256


def compiled(graph: Graph | ExecutableGraph) -> ExecutableGraph:
    return graph.compile() if isinstance(graph, Graph) else graph


def found_ref(graph: Graph | ExecutableGraph, done: ExecutableGraph) -> str | None:
    """Where a graph given as an object can be imported from by another process (the CLI,
    the debugger, a worker resuming its runs): a module-level name bound to it in a module
    its nodes come from. None for one built by a factory or in a script run as __main__."""
    modules = dict.fromkeys(spec.fn_ref.partition(":")[0] for spec in done.nodes.values() if spec.fn_ref)
    for module in modules:
        found = sys.modules.get(module) if module != "__main__" else None
        for attr, value in list(vars(found).items()) if found is not None else ():
            if value is graph or value is done:
                return f"{module}:{attr}"
    return None


class GraphRegistry:
    def __init__(self, store: CheckpointStore):
        self.store = store
        self._graphs: dict[str, ExecutableGraph] = {}
        #: by the version they had before versions named reducers (``ExecutableGraph.legacy_version``)
        self._legacy: dict[str, list[ExecutableGraph]] = {}
        #: ``made_by``'s answers through a legacy version: (graph version, legacy version) -> made
        self._made: dict[tuple[str, str], bool] = {}
        #: graphs imported for runs that name their own code, by reference
        self._by_ref: dict[str, ExecutableGraph] = {}
        #: the graph object each run was started with here (factories may build several
        #: graphs of one structure and version that differ in their closures)
        self._run_graphs: dict[str, ExecutableGraph] = {}
        self._saved: set[tuple[str, str | None]] = set()
        self._models: dict[str, type[BaseModel]] = {}
        #: states at the last checkpoint of runs that ended or paused here, newest last:
        #: the next turn of a conversation starts from one without reading history back
        self._states: dict[str, Mapping[str, JSON]] = {}

    def register(self, graph: Graph | ExecutableGraph, *, current: bool = True) -> ExecutableGraph:
        """Make a graph known (and its description stored) so its runs can be resumed.

        A version names a structure, and code that changed inside its nodes keeps it. So
        ``current=False`` is for code given to one run (a replay's or a fork's candidate
        code): it never replaces the code already known for its version, here or in the
        store; that run keeps a reference to its own code instead (``RUN_GRAPH_REF``)."""
        done = compiled(graph)
        if not current and (done.version in self._graphs or self.store.graph_description(done.version) is not None):
            return done
        first = done.version not in self._graphs
        self._graphs[done.version] = done
        if done.legacy_version != done.version:
            self._add_legacy(done)
        ref = getattr(done, "ref", None)
        if not ref and first and not (self.store.graph_description(done.version) or {}).get("ref"):
            ref = found_ref(graph, done)   # only where the store knows of none (``harness run`` stores its own)
            if ref:
                done.ref = ref
        if (done.version, ref) in self._saved:
            return done
        self._saved.add((done.version, ref))
        desc = done.describe()
        if ref:
            desc["ref"] = ref
        self.store.save_graph(desc)
        return done

    def versions(self, name: str) -> list[ExecutableGraph]:
        """The registered versions of the graph called ``name``, in the order they were registered."""
        return [g for g in self._graphs.values() if g.name == name]

    def graph_for(self, run: Run) -> ExecutableGraph:
        """The graph a run was made by: the code it names itself (a replay or fork given
        other code), else the code registered for its version, or imported by the
        version's stored reference."""
        own = run.options.get(RUN_GRAPH_REF)
        if isinstance(own, str) and own:
            named = self._by_ref.get(own) or resolve_ref(own)
            if not self.made_by(named, run.graph_version):
                raise InvalidRequest(
                    f"run {run.id} was made by graph {run.graph_name!r} version {run.graph_version}, but "
                    f"{own} is now version {named.version} (its structure changed)")
            self._by_ref[own] = named
            return named
        graph = self._graphs.get(run.graph_version)
        if graph is not None:
            return graph
        graph = self.registered(run.graph_version)
        if graph is not None:
            return graph
        desc = self.store.graph_description(run.graph_version) or {}
        if desc.get("ref"):
            graph = resolve_ref(desc["ref"])
            if graph.version == run.graph_version:
                self._graphs[graph.version] = graph
                return graph
            if self.made_by(graph, run.graph_version):
                self._add_legacy(graph)
                return graph
            raise InvalidRequest(
                f"run {run.id} was made by graph {run.graph_name!r} version {run.graph_version}, but "
                f"{desc['ref']} is now version {graph.version} (its structure changed)")
        raise GraphNotRegistered(run.graph_name, run.graph_version)

    def made_by(self, graph: ExecutableGraph, version: str) -> bool:
        """Whether runs recorded as ``version`` were made by ``graph``'s structure: its version,
        or, for runs recorded before versions named reducers, its legacy version with the same
        reducers as the stored description of that version names (a reducer changed since is
        another structure: the states its runs recorded fold differently)."""
        if graph.version == version:
            return True
        if graph.legacy_version != version:
            return False
        key = (graph.version, version)
        found = self._made.get(key)
        if found is None:
            described = self.store.graph_description(version)
            if described is None:
                return False   # not stored yet (an import checks its code first): asked again later
            found = self._made[key] = made_as_described(graph, version, described)
        return found

    def shape_for(self, run: Run) -> ExecutableGraph | FoldShape:
        """What folding a run's states needs: its graph, or where the code cannot be found,
        the order and built-in reducers its stored description names."""
        return self._or_described(self.graph_for, run, FoldShape.from_description)

    def order_for(self, run: Run) -> ExecutableGraph | NodeOrder:
        """What reading a run's nodes in canonical order needs: the graph it ran with, or
        where that code cannot be found, the nodes and order its stored description names."""
        return self._or_described(self.run_graph, run, NodeOrder.from_description)

    def _or_described(self, code: Callable[[Run], ExecutableGraph], run: Run,
                      described: Callable[[Mapping[str, Any]], _D | None]) -> ExecutableGraph | _D:
        """The run's graph from ``code``; where it cannot be found, what ``described`` reads
        off the stored description (the lookup's own error when that cannot say either)."""
        try:
            return code(run)
        except (NotFound, InvalidRequest, GraphError):
            found = described(self.store.graph_description(run.graph_version) or {})
            if found is None:
                raise
            return found

    def registered(self, version: str) -> ExecutableGraph | None:
        """The graph registered (or already imported) here for a version, if any (for a version
        recorded before versions named reducers, the graph that made it)."""
        graph = self._graphs.get(version)
        if graph is None:   # several graphs may share a legacy version: their reducers tell them apart
            graph = next((g for g in self._legacy.get(version, ()) if self.made_by(g, version)), None)
        return graph

    def _add_legacy(self, graph: ExecutableGraph) -> None:
        same = self._legacy.setdefault(graph.legacy_version, [])
        if all(g.version != graph.version for g in same):
            same.append(graph)

    def run_graph(self, run: Run) -> ExecutableGraph:
        """The graph object to execute a run with: the one it was started with here, if any."""
        return self._run_graphs.get(run.id) or self.graph_for(run)

    def remember_run(self, run_id: str, graph: ExecutableGraph) -> None:
        self._run_graphs[run_id] = graph
        if len(self._run_graphs) > RUN_GRAPHS_KEPT:  # oldest runs fall back to the registry
            del self._run_graphs[next(iter(self._run_graphs))]

    def inherit_run_graph(self, parent_id: str, child_id: str, fallback: ExecutableGraph) -> None:
        """A continuation runs with the graph object its parent ran with here."""
        self.remember_run(child_id, self._run_graphs.get(parent_id, fallback))

    def remember_state(self, checkpoint_id: str, state: Mapping[str, JSON]) -> None:
        self._states[checkpoint_id] = state
        if len(self._states) > STATES_KEPT:
            del self._states[next(iter(self._states))]

    def known_state(self, checkpoint_id: str) -> Mapping[str, JSON] | None:
        return self._states.get(checkpoint_id)

    def remember_model(self, ref: str, model: type[BaseModel]) -> None:
        """An interrupt's answer model, defined perhaps where no import can reach it."""
        self._models[ref] = model

    def model(self, ref: str) -> type[BaseModel] | None:
        return self._models.get(ref) or resolve_model(ref)
