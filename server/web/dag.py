"""The graph drawn once per graph version with graphviz, and coloured per checkpoint.

``dot`` lays a version out once (cached); stepping through checkpoints changes only
a small style sheet (``status_css``) that colours node ids, never the layout. Fan-outs
wider than ``FOLD_AT`` siblings are drawn as one group node with a count; a loop is
drawn once with its edge back to its entry; a subgraph's nodes sit in a cluster.
Every label is escaped for the dot language and again by the SVG writer, so a name
like ``<script>`` shows as text.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from functools import lru_cache

from runtime.core.states import NodeStatus
from runtime.graph.instances import base_node, group_of, loop_paths, parse_instance

#: siblings with the same dependencies and dependents beyond this are one group node
FOLD_AT = 12
#: precedence when a node's instances differ: the most telling status colours it
PRECEDENCE = ("failed", "running", "retrying", "interrupted", "cancelled", "succeeded", "pending", "skipped")
#: what a map's items show instead of the map's own record (see ``status_css``)
ITEM_LED = frozenset(PRECEDENCE[:5])


@dataclass(frozen=True, slots=True)
class Layout:
    svg: str                        # the drawing, ``__RUN__`` where links name the run
    ids: Mapping[str, str]          # graph node -> its id in the drawing ("n3"), groups share one
    groups: Mapping[str, tuple[str, ...]]   # group id -> the nodes folded into it
    loops: Mapping[str, tuple[str, ...]]    # loop entry -> its members


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def _folds(order: Sequence[str], after: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """Groups of more than FOLD_AT nodes that share dependencies and dependents."""
    children: dict[str, list[str]] = {n: [] for n in order}
    for n in order:
        for d in after[n]:
            children[d].append(n)
    by_shape: dict[tuple[tuple[str, ...], tuple[str, ...]], list[str]] = {}
    for n in order:
        by_shape.setdefault((tuple(sorted(after[n])), tuple(sorted(children[n]))), []).append(n)
    return {f"g{i}": members for i, members in enumerate(m for m in by_shape.values() if len(m) > FOLD_AT)}


def dot_source(description: Mapping[str, object]) -> tuple[str, dict[str, str], dict[str, tuple[str, ...]]]:
    """The dot program for a stored graph description, the drawing id of each node and the groups."""
    raw = description.get("nodes")
    nodes = [n for n in raw if isinstance(n, dict)] if isinstance(raw, list) else []
    order = [str(n["name"]) for n in nodes]
    after = {str(n["name"]): [str(d) for d in n.get("after", [])] for n in nodes}
    spec = {str(n["name"]): n for n in nodes}
    loops_raw = description.get("loops") or {}
    loops = {str(e): [str(m) for m in ms] for e, ms in loops_raw.items()} if isinstance(loops_raw, dict) else {}
    loop_of = {m: path[-1] for m, path in loop_paths(loops).items()}   # the innermost loop
    groups = _folds(order, after)
    ids: dict[str, str] = {}
    for gid, members in groups.items():
        for m in members:
            ids[m] = gid
    for i, n in enumerate(order):
        ids.setdefault(n, f"n{i}")
    lines = ['digraph G {', 'graph [rankdir=TB, bgcolor="transparent", fontname="sans-serif", nodesep=0.3, ranksep=0.45];',
             'node [shape=box, style="filled", fillcolor="white", fontname="sans-serif", fontsize=11, height=0.3];',
             'edge [color="#8a8f98", arrowsize=0.6];']
    drawn: set[str] = set()
    clusters: dict[str, list[str]] = {}
    for n in order:
        if "/" in n:
            clusters.setdefault(n.rsplit("/", 1)[0], []).append(n)

    def node_line(n: str) -> str:
        nid = ids[n]
        if nid in drawn:
            return ""
        drawn.add(nid)
        if nid in groups:
            first = groups[nid][0]
            label = f"{base_label(first)} … ×{len(groups[nid])}"
        else:
            label = base_label(n)
            extra = []
            if spec[n].get("map_over"):
                extra.append(f"map over {spec[n]['map_over']}")
            if n in loops:
                extra.append(f"loop ≤ {spec[n].get('max_iterations')}")
            if extra:
                label += "\n" + ", ".join(extra)
        return (f'{nid} [id={_quote(nid)}, label={_quote(label)}, tooltip={_quote(n)}, '
                f'URL={_quote("/runs/__RUN__?node=" + (groups[nid][0] if nid in groups else n))}, target="_top"];')

    def base_label(n: str) -> str:
        return n.rsplit("/", 1)[-1]

    for path, members in sorted(clusters.items()):
        lines.append(f"subgraph {_quote('cluster_' + path)} {{ label={_quote(path)}; style=dashed; color=\"#b9bec7\";")
        lines += [line for m in members if (line := node_line(m))]
        lines.append("}")
    lines += [line for n in order if (line := node_line(n))]
    edges: set[tuple[str, str]] = set()
    for n in order:
        for d in after[n]:
            a, b = ids[d], ids[n]
            if a == b or (a, b) in edges:
                continue
            edges.add((a, b))
            back = loop_of.get(n) == n and loop_of.get(d) == n
            lines.append(f"{a} -> {b}" + (' [style=dashed, constraint=false, color="#5b6ee1"];' if back else ";"))
    lines.append("}")
    return "\n".join(lines), ids, {g: tuple(m) for g, m in groups.items()}


@lru_cache(maxsize=128)
def _render(source: str) -> str:
    out = subprocess.run(["dot", "-Tsvg"], input=source.encode(), capture_output=True, timeout=60, check=True)
    svg = out.stdout.decode()
    return svg[svg.index("<svg"):]   # drop the XML prologue and doctype: it is inlined in HTML


_layouts: dict[str, Layout] = {}


def layout(version: str, description: Mapping[str, object]) -> Layout:
    """The drawing of a graph version (laid out once per process)."""
    found = _layouts.get(version)
    if found is None:
        source, ids, groups = dot_source(description)
        svg = re.sub(r"<title>.*?</title>|<!--.*?-->", "", _render(source), flags=re.S)
        svg = re.sub(r"\n\s*\n", "\n", svg)   # what is dropped leaves blank lines: a big graph is sent whole
        loops_raw = description.get("loops") or {}
        loops = {str(e): tuple(map(str, ms)) for e, ms in loops_raw.items()} if isinstance(loops_raw, dict) else {}
        found = _layouts[version] = Layout(svg, ids, groups, loops)
    return found


def node_summary(statuses: Mapping[str, NodeStatus], skip: Set[str] = frozenset()) -> dict[str, dict[str, int]]:
    """Per graph node: how many of its instances have each status (not counting ``skip``)."""
    out: dict[str, dict[str, int]] = {}
    for inst, st in statuses.items():
        counts = out.setdefault(base_node(inst), {})   # in the order of its first instance, even skipped
        if inst not in skip:
            counts[st.value] = counts.get(st.value, 0) + 1
    return out


def instance_summary(statuses: Mapping[str, NodeStatus]) -> dict[str, dict[str, int]]:
    """``node_summary`` of a node's instances only: a map's group record is the map itself,
    so once it has items they are what is counted (a loop's iterations each still count)."""
    groups = {group_of(n) for i in statuses if "[" in i and (n := parse_instance(i)).item is not None}
    return node_summary(statuses, groups)


def map_nodes(description: Mapping[str, object]) -> frozenset[str]:
    """The graph nodes of a stored graph description that map over a list."""
    raw = description.get("nodes")
    nodes = [n for n in raw if isinstance(n, dict)] if isinstance(raw, list) else []
    return frozenset(str(n["name"]) for n in nodes if n.get("map_over"))


def map_records(statuses: Mapping[str, NodeStatus], maps: Set[str] = frozenset()) -> frozenset[str]:
    """The instances of ``statuses`` that are a map's group record: the map itself, never
    one of its items (a map's instance without an item, and the record any item names)."""
    return frozenset(i for i in statuses if (n := parse_instance(i)).item is None and n.node in maps) | {
        group_of(n) for i in statuses if "[" in i and (n := parse_instance(i)).item is not None}


def headline(counts: Mapping[str, int]) -> str:
    return next((s for s in PRECEDENCE if counts.get(s)), "pending")


def status_css(lay: Layout, statuses: Mapping[str, NodeStatus], selected: str | None = None) -> str:
    """A style sheet colouring each drawn node by its instances' statuses at a checkpoint."""
    summary = node_summary(statuses)
    items = instance_summary(statuses)
    per_id: dict[str, dict[str, int]] = {}
    for node, all_counts in summary.items():
        # a map's own record stays "running" until its items end: when an item failed, runs,
        # waits or was cancelled, that is what the map is doing; otherwise it is still going on
        counts = items.get(node, all_counts) if headline(items.get(node, {})) in ITEM_LED else all_counts
        nid = lay.ids.get(node)
        if nid is None:
            continue
        merged = per_id.setdefault(nid, {})
        for k, v in counts.items():
            merged[k] = merged.get(k, 0) + v
    by_status: dict[str, list[str]] = {}
    for nid, c in per_id.items():
        by_status.setdefault(headline(c), []).append(nid)
    # one rule per status: the sheet grows by a few bytes per node, not a rule per node
    rules = [",".join(f"#{nid} path,#{nid} polygon" for nid in ids) + f"{{fill:var(--st-{st})}}"
             for st, ids in by_status.items()]
    if selected is not None and base_node(selected) in lay.ids:
        nid = lay.ids[base_node(selected)]
        rules.append(f"#{nid} path, #{nid} polygon {{ stroke: var(--accent); stroke-width: 3px; }}")
    return "\n".join(rules)
