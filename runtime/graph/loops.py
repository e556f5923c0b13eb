"""Cycles, loops and the canonical order of a graph's nodes.

A cycle is legal when it is a loop: one entry bounded by ``max_iterations``, where the
cycle is entered from the rest of the graph (when it is entered at all), a ``when=``
that can end it, and inside it only loops by the same rule. The canonical order keeps a loop's
members together, so an instance's place in the fold (``instances.instance_key``)
extends the dependency order.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence

from ..core.errors import Problem
from .spec import NodeDecl


def cycles(deps: dict[str, list[str]]) -> list[tuple[set[str], list[str]]]:
    """Each strongly connected component that has a cycle, with one named cycle (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[tuple[set[str], list[str]]] = []
    counter = 0

    def visit(root: str) -> None:
        nonlocal counter
        work = [(root, iter(sorted(deps.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in deps:
                    continue
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(deps.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1 or v in deps.get(v, ()):
                    out.append((set(comp), _cycle_path(set(comp), deps)))

    for n in sorted(deps):
        if n not in index:
            visit(n)
    return sorted(out, key=lambda c: c[1])


def _cycle_path(comp: set[str], deps: dict[str, list[str]]) -> list[str]:
    """A concrete cycle through the component, read in execution order."""
    start = min(comp)
    path, seen = [start], {start}
    node = start
    while True:
        # follow edges backwards (dep -> node) so the printed cycle reads "a runs before b"
        nxt = sorted(n for n in comp if node in deps.get(n, ()))
        step = next((n for n in nxt if n == start), None) if len(path) > 1 else None
        if step is not None:
            return path
        candidates = [n for n in nxt if n not in seen]
        if not candidates:
            # close the loop at the first node already on the path
            back = next(n for n in nxt if n in seen)
            return path[path.index(back):]
        node = candidates[0]
        path.append(node)
        seen.add(node)


def check_loop(comp: set[str], cycle: list[str], deps: Mapping[str, Sequence[str]],
               decls: Mapping[str, NodeDecl], loops: dict[str, list[str]]) -> Problem | None:
    """A cycle is a loop when one member bounds it (``max_iterations``: the node each
    iteration starts at, which is where the cycle is entered when anything outside leads
    into it), some member decides with ``when=`` whether it goes on, and without the
    edges back to its entry what is left is acyclic or made of loops inside it, each a
    loop by the same rule. A loop found is added to ``loops`` (entry -> members, an
    outer loop's members including those of the loops inside it)."""
    where = f"node {cycle[0]!r}"
    shown = " → ".join([*cycle, cycle[0]])
    entries = sorted(n for n in comp if decls[n].max_iterations is not None)
    # the members that wait for a node outside the cycle: the run reaches the cycle there
    # (for a loop inside another, from the outer loop's body)
    entered = sorted(n for n in comp if any(d not in comp for d in deps[n]))
    if not any(decls[n].when is not None for n in comp):
        return _no_exit(comp, entries, entered, deps, decls)
    if not entries:
        if len(entered) == 1:
            where, shown = f"node {entered[0]!r}", " → ".join([*_through(entered[0], comp, deps), entered[0]])
        return Problem(where, f"cycle: {shown} has no iteration bound: set max_iterations on "
                              f"{_start_hint(entered, comp, deps)}")
    # A loop's first iteration starts at its entry, so the entry is where the cycle is
    # entered. A bound only on a node it reaches later would be read as a loop starting
    # there: run before the nodes it was declared after, and (a loop inside another whose
    # own bound was left out) counting both loops' iterations as one.
    starts = [e for e in entries if e in entered] if entered else entries
    if not starts:
        return _not_where_entered(entries, entered, comp, deps)
    # entered at one bounded member: that is the entry, and the other bounds must start
    # loops inside it (checked below); else choose among the readings
    outer: list[str] | str = starts
    if not entered or len(starts) > 1:
        outer = _reading(starts, entries, comp, deps)
    if isinstance(outer, str):
        return Problem(where, f"cycle: {shown} has max_iterations on {', '.join(map(repr, entries))}, and {outer}: "
                              "set it on the node each iteration starts at only, or nest the loops (without "
                              "the edges back to the outer entry, an inner loop is a cycle of its own, entered "
                              "from the outer loop's body, whose edges back to the outer entry come from after it)")
    entry = outer[0]
    if decls[entry].map_over is not None:
        return Problem(f"node {entry!r}", "a map worker cannot be the entry of a loop")
    forward = _without_back_edges(entry, comp, deps)
    inner_cycles = cycles(forward)
    in_inner = set().union(*(c for c, _ in inner_cycles))
    for extra in (e for e in entries if e != entry and e not in in_inner):
        return Problem(f"node {extra!r}", f"cycle: {' → '.join([*_through(entry, comp, deps), entry])} starts at "
                                          f"{entry!r}, where it is entered, and {extra!r} runs later in each "
                                          f"iteration, on no loop of its own: its max_iterations bounds nothing; "
                                          f"keep it on {entry!r} only")
    found: dict[str, list[str]] = {}
    for inner, inner_cycle in inner_cycles:
        problem = check_loop(inner, inner_cycle, forward, decls, found)
        if problem is not None:
            return problem
    # each member's innermost loop: smaller loops, inside larger ones, written last
    nested = {m: e for e, ms in sorted(found.items(), key=lambda f: -len(f[1])) for m in ms}
    # name the loop by a cycle through its entry (not one of the loops inside it)
    where, shown = f"node {entry!r}", " → ".join([*_through(entry, comp, deps), entry])
    # A subgraph once entered always ends (its end node runs even when its own when= skipped
    # its nodes, its first one included): no condition inside it ends a loop around it.
    deciding = [n for n in comp if decls[n].when is not None]
    around = {n: _subgraph_around(n, comp, decls) for n in deciding}
    if not any(n not in nested or n in found for n in deciding if around[n] is None):
        why = []
        if in_loops := sorted({nested[n] for n in deciding if around[n] is None}):
            why.append(f"inside the loop of {', '.join(map(repr, in_loops))}, and end only that loop")
        if in_subgraphs := sorted({s for s in around.values() if s is not None}):
            why.append(f"inside subgraph {', '.join(map(repr, in_subgraphs))}, which once entered always ends")
        return Problem(where, f"cycle: {shown} has no exit of its own: its when= conditions are {'; or '.join(why)}; "
                              "give one of the outer loop's nodes a when= condition (an inner loop's entry will do, "
                              "unless it starts a subgraph: a subgraph once entered always ends)")
    for source in sorted(d for d in deps[entry] if d in nested):
        return Problem(f"node {entry!r}", f"cycle: {shown}: {source!r} leads back to {entry!r} from inside the loop "
                                          f"of {nested[source]!r}; an inner loop ends within an iteration of the "
                                          f"outer one: lead back from a node after it")
    loops.update(found)
    loops[entry] = sorted(comp)
    return None


def _no_exit(comp: set[str], entries: list[str], entered: list[str], deps: Mapping[str, Sequence[str]],
             decls: Mapping[str, NodeDecl]) -> Problem:
    """A cycle without a ``when=``: named from where it starts, with where a condition can go
    (not inside a subgraph on it) and, when it has none, where its bound goes."""
    subgraphs = sorted(n for n in comp if decls[n].subgraph_root is not None and _subgraph_around(n, comp, decls) is None)
    outside = sorted(n for n in comp if decls[n].subgraph_root is None and _subgraph_around(n, comp, decls) is None)
    start = ([e for e in entries if e in entered] or entered[:1] or entries or outside[:1] or [min(comp)])[0]
    shown = " → ".join([*_through(start, comp, deps), start])
    bound = "" if entries else f"; it needs max_iterations too, on {_start_hint(entered, comp, deps)}"
    if not subgraphs:
        return Problem(f"node {start!r}", f"cycle: {shown} has no exit: give one of its nodes a when= condition "
                                          f"to make it a loop{bound}")
    names = f"subgraph{'s' if len(subgraphs) > 1 else ''} {', '.join(map(repr, subgraphs))}"
    whom = (f"one of its nodes outside {names} ({', '.join(map(repr, outside))})" if outside
            else f"a node outside {names}, added to it,")
    return Problem(f"node {start!r}", f"cycle: {shown} has no exit: give {whom} a when= condition to make it a "
                                      f"loop (a condition inside {names} is no exit: a subgraph once entered "
                                      f"always ends){bound}")


def _subgraph_around(node: str, comp: set[str], decls: Mapping[str, NodeDecl]) -> str | None:
    """The outermost subgraph ``node`` is inside whose end is a member of ``comp``, if any
    (a subgraph's nodes are named ``sub/node``, its end ``sub``)."""
    parts = node.split("/")
    for i in range(1, len(parts)):
        name = "/".join(parts[:i])
        if name in comp and decls[name].subgraph_root is not None:
            return name
    return None


def _reading(starts: list[str], entries: list[str], comp: set[str],
             deps: Mapping[str, Sequence[str]]) -> list[str] | str:
    """The one of ``starts`` that can be the outer entry, with the loops the other bounded
    members start inside it, as a one-item list; or why there is none."""
    holding = [e for e in starts if _holds(e, comp, deps, entries)]
    # the readings where every way back to the outer entry comes from outside the loops
    # inside it, and each of those loops is entered at its bounded nodes only
    clean = [e for e in holding if not _back_from_inside(e, comp, deps)]
    outer = [e for e in clean if _entered_at_entries(e, comp, deps, entries)]
    if not outer and len(holding) == 1:
        outer = holding   # the one reading: checked by the caller, which names what is wrong with it
    elif not outer:
        # a reading with a way back from inside an inner loop is what was meant, when the
        # others pass only by entering their inner loops beside the entry: say what is wrong
        outer = [e for e in holding if e not in clean][:1]
    if len(outer) != 1:
        return "more than one could hold the others' loops" if outer else "none holds the others' loops"
    return outer


def _start_hint(entered: list[str], comp: set[str], deps: Mapping[str, Sequence[str]]) -> str:
    """Which node a cycle's bound belongs on, as far as the graph tells."""
    if len(entered) == 1:
        return f"{entered[0]!r}, the node each iteration starts at: where it is entered{_after(entered[0], comp, deps)}"
    if entered:
        return f"the node each iteration starts at: one of {', '.join(map(repr, entered))}, where it is entered"
    return "the node each iteration starts at"


def _after(node: str, comp: set[str], deps: Mapping[str, Sequence[str]]) -> str:
    """`` (after 'x', 'y')``: what ``node`` waits for outside ``comp``."""
    return f" (after {', '.join(repr(d) for d in deps[node] if d not in comp)})"


def _not_where_entered(entries: list[str], entered: list[str], comp: set[str],
                       deps: Mapping[str, Sequence[str]]) -> Problem:
    """The cycle is entered at unbounded members only: its bounds are on nodes it reaches later."""
    start = entered[0]
    shown = " → ".join([*_through(start, comp, deps), start])
    where = f"node {start!r}"
    if len(entered) > 1:
        return Problem(where, f"cycle: {shown} is entered at {', '.join(map(repr, entered))}, and max_iterations is "
                              f"on {', '.join(map(repr, entries))}, where it is not: set it on the node each iteration "
                              "starts at, where the cycle is entered (a loop inside another needs its own bound too)")
    # read with ``start`` as the entry: which bounds start loops inside it, and which bound nothing
    forward = _without_back_edges(start, comp, deps)
    inner = [c for c, _ in cycles(forward) if c & set(entries)]
    held = [e for e in entries if any(e in c for c in inner)]
    later = [e for e in entries if e not in held]
    # each inner loop shown from a bounded node where it is entered, if there is one
    firsts = [min(c & set(entries), key=lambda e: (all(d in c for d in forward[e]), e)) for c in inner]
    shown_inner = [" → ".join([*_through(e, c, forward), e]) for c, e in zip(inner, firsts)]
    inside = (f"the bound{'s' if len(held) > 1 else ''} on {', '.join(map(repr, held))} "
              f"{'are' if len(held) > 1 else 'is'} only for the loop{'s' if len(inner) > 1 else ''} inside it "
              f"({'; '.join(shown_inner)})") if held else ""
    if not later:
        return Problem(where, f"cycle: {shown} has no iteration bound of its own: it is entered at {start!r}"
                              f"{_after(start, comp, deps)}, and {inside}; set max_iterations on {start!r} too: "
                              "each loop needs its own")
    return Problem(where, f"cycle: {shown} is entered at {start!r}{_after(start, comp, deps)}: set max_iterations "
                          f"on {start!r}, the node each iteration starts at, instead of on "
                          f"{', '.join(map(repr, later))}, which {'comes' if len(later) == 1 else 'come'} after it "
                          f"in each iteration{f'; {inside}' if inside else ''}")


def _without_back_edges(entry: str, comp: set[str], deps: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """The dependencies among a loop's members, without the edges back to its entry."""
    return {n: [d for d in deps[n] if d in comp] if n != entry else [] for n in comp}


def _through(entry: str, comp: set[str], deps: Mapping[str, Sequence[str]]) -> list[str]:
    """A shortest cycle through ``entry`` within ``comp``, read in execution order."""
    came: dict[str, str] = {}
    queue = [entry]
    for node in queue:
        for child in sorted(n for n in comp if node in deps.get(n, ())):
            if child == entry:
                path = [node]
                while path[-1] != entry:
                    path.append(came[path[-1]])
                return path[::-1]
            if child not in came:
                came[child] = node
                queue.append(child)
    return [entry]


def _back_from_inside(entry: str, comp: set[str], deps: Mapping[str, Sequence[str]]) -> bool:
    """Whether a way back to ``entry`` would come from inside a loop it holds."""
    inner = set().union(*(c for c, _ in cycles(_without_back_edges(entry, comp, deps))))
    return any(d in inner for d in deps[entry] if d in comp)


def _entered_at_entries(entry: str, comp: set[str], deps: Mapping[str, Sequence[str]],
                        entries: list[str]) -> bool:
    """Whether, without the edges back to ``entry``, the loops inside are entered from the
    rest of the body at their bounded nodes only."""
    for c, _ in cycles(_without_back_edges(entry, comp, deps)):
        for m in c:
            if m not in entries and any(d in comp and d not in c for d in deps[m]):
                return False
    return True


def _holds(entry: str, comp: set[str], deps: Mapping[str, Sequence[str]], entries: list[str]) -> bool:
    """Whether ``entry`` can start the loop of ``comp`` with the loops the other bounded
    members start inside it: without the edges back to ``entry``, each of them is on a
    cycle, and each such cycle is entered from the rest of the outer loop's body (one of
    its entries depends on a member off the cycle)."""
    inner = [c for c, _ in cycles(_without_back_edges(entry, comp, deps))]
    if not all(any(x in c for c in inner) for x in entries if x != entry):
        return False
    return all(any(d in comp and d not in c for x in entries if x in c for d in deps[x])
               for c in inner if any(x in c for x in entries))


def canonical_order(deps: Mapping[str, Sequence[str]], loops: Mapping[str, Sequence[str]] | None = None) -> list[str]:
    """Topological order with ties broken by node id, so it is the same for any
    declaration order of the same structure. A loop is one block, named by its entry,
    whose members follow each other (without the edges back to its entry), and so is a
    loop inside it, within its block."""
    return _order(deps, {e: set(ms) for e, ms in (loops or {}).items()})


def _order(deps: Mapping[str, Sequence[str]], loops: Mapping[str, set[str]]) -> list[str]:
    """``loops``: those among the nodes of ``deps``."""
    top = {e: ms for e, ms in loops.items() if not any(ms < other for other in loops.values())}
    block = {m: e for e, ms in top.items() for m in ms}
    blocks: dict[str, set[str]] = {}
    for n, ds in deps.items():
        b = block.get(n, n)
        blocks.setdefault(b, set()).update(block.get(d, d) for d in ds if d in deps and block.get(d, d) != b)
    order: list[str] = []
    for b in _kahn(blocks):
        if b in top:
            members = top[b]
            inside = {e: ms for e, ms in loops.items() if ms < members}
            order.extend(_order(_without_back_edges(b, members, deps), inside))
        else:
            order.append(b)
    return order


def _kahn(deps: Mapping[str, Iterable[str]]) -> list[str]:
    remaining = {n: 0 for n in deps}
    children: dict[str, list[str]] = {n: [] for n in deps}
    for n, ds in deps.items():
        for d in ds:
            children[d].append(n)
            remaining[n] += 1
    heap = [n for n, k in remaining.items() if k == 0]
    heapq.heapify(heap)
    order: list[str] = []
    while heap:
        n = heapq.heappop(heap)
        order.append(n)
        for c in children[n]:
            remaining[c] -= 1
            if remaining[c] == 0:
                heapq.heappush(heap, c)
    return order
