"""Islands: the parts of a rewritten model that aotc compiles when onnxruntime runs the rest.

A node is compilable when aotc lowers its operator (a fused `ai.aotc` call: every node of its
body) and every value it reads or writes has an element type aotc knows and a static shape.
Compilable nodes are grouped, in topological order, into islands: a node joins an island of one
of its producers unless that would make a path leave the island and come back into it (through
a node onnxruntime runs, or through another island), which would be a cycle once each island
is one node. Constants and initializers are weights: an island reads them as its own, so they
never keep two nodes apart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import onnx_ir as ir

from aotc.compiler import DTYPE_NAMES, unsupported_nodes
from aotc.frontend.computed_lengths import computed_axis
from aotc.frontend.irutil import static_dims


@dataclass
class Island:
    index: int
    nodes: list[ir.Node] = field(default_factory=list)
    inputs: list[ir.Value] = field(default_factory=list)  # activations, in first-use order
    weights: list[ir.Value] = field(default_factory=list)  # initializers and constants it reads
    outputs: list[ir.Value] = field(default_factory=list)  # values read outside it
    # weights that onnxruntime's own nodes (or the graph's outputs) read too: the island's node
    # takes these as inputs; the others it owns (see rewrite.py)
    shared_weights: list[ir.Value] = field(default_factory=list)
    # nodes of `nodes` the island computes a copy of (find_islands' `copied`), and those of them
    # that onnxruntime's own nodes read too, which stay in the graph
    copied: list[ir.Node] = field(default_factory=list)
    kept: list[ir.Node] = field(default_factory=list)


@dataclass
class LeftOut:
    node: str
    op: str
    reason: str


def is_weight(value: ir.Value) -> bool:
    return value.const_value is not None


# Element types onnxruntime's tensors pack two or four to a byte: an island's tensors would
# not be laid out as its kernels read them, so nodes touching them stay onnxruntime's.
PACKED_BY_ORT = frozenset({ir.DataType.INT4, ir.DataType.UINT4, ir.DataType.INT2,
                           ir.DataType.UINT2, ir.DataType.FLOAT4E2M1})


def _static(value: ir.Value) -> bool:
    return static_dims(value.shape) is not None


def why_not(node: ir.Node, functions: Mapping[ir.OperatorIdentifier, ir.Function],
            static: Callable[[ir.Value], bool] = _static) -> str | None:
    """Why aotc cannot compile `node` (None: it can); `static(value)`: whether the value's
    shape is static when the island is compiled (default: its shape here)."""
    bad = unsupported_nodes([node], functions)
    if bad:
        return f"operator {bad[0][1]} is not compiled by aotc"
    for v in [*node.inputs, *node.outputs]:
        if v is None:
            continue
        if v.dtype not in DTYPE_NAMES:
            return f"value '{v.name}' has element type {v.dtype}"
        if v.dtype in PACKED_BY_ORT:
            return (f"value '{v.name}' has element type {v.dtype}, which onnxruntime packs "
                    "several to a byte (aotc keeps one a byte)")
        if not static(v):
            return f"value '{v.name}' has a shape known only at run time ({v.shape})"
        if computed_axis(v) is not None:
            return f"value '{v.name}' has a length that depends on the input data"
    if any(a.type == ir.AttributeType.GRAPH or a.type == ir.AttributeType.GRAPHS
           for a in node.attributes.values()):
        return "it holds subgraphs"
    return None


def find_islands(model: ir.Model, refuse: Callable[[ir.Node], str | None] | None = None,
                 copied: Callable[[ir.Node], bool] | None = None,
                 group: Callable[[ir.Node], object] | None = None
                 ) -> tuple[list[Island], list[LeftOut]]:
    """The islands of `model` (its top-level graph, topologically sorted) and the nodes left to
    onnxruntime with the reason (`refuse(node)`: why a node cannot be compiled; default
    `why_not`). A node for which `copied(node)` holds (shape arithmetic over a dimension left
    to run time) belongs to no island: every island that reads it computes its own copy (the
    chain back to the values it reads, which become the island's inputs), and it stays in the
    graph for onnxruntime's nodes; it never keeps two nodes apart. With `group`, a node joins
    only an island whose nodes have its group (a measured island split in parts: measure.py)."""
    functions = model.functions
    if refuse is None:
        def refuse(node: ir.Node) -> str | None:
            return why_not(node, functions)
    island_of: dict[ir.Node, int] = {}
    # islands that contain a node or one of its ancestors
    reach: dict[ir.Node, frozenset[int]] = {}
    # a copied node: the producers of the values its chain reads
    sources: dict[ir.Node, list[ir.Node]] = {}
    islands: list[Island] = []
    group_of: list[object] = []  # each island's group
    left: list[LeftOut] = []
    for node in model.graph:
        direct = [v.producer() for v in node.inputs
                  if v is not None and not is_weight(v) and v.producer() is not None]
        producers = [q for p in direct for q in sources.get(p, [p])]
        above = frozenset().union(*(reach[p] for p in producers)) if producers else frozenset()
        if node.op_type == "Constant" and node.domain == "" and is_weight(node.outputs[0]):
            reach[node] = above
            continue
        if copied is not None and copied(node):
            sources[node] = producers
            reach[node] = above
            continue
        why = refuse(node)
        if why is not None:
            left.append(LeftOut(node.name or "<unnamed>", node.op_type, why))
            reach[node] = above
            continue
        chosen = None
        key = group(node) if group is not None else None
        # a producer's island first, else the newest island (a side branch joins it)
        candidates = [island_of[p] for p in producers if p in island_of]
        if islands:
            candidates.append(len(islands) - 1)
        for cand in candidates:
            if group_of[cand] != key:
                continue
            # joining `cand` is safe when no producer outside it descends from it
            if all(island_of.get(q) == cand or cand not in reach[q] for q in producers):
                chosen = cand
                break
        if chosen is None:
            chosen = len(islands)
            islands.append(Island(chosen))
            group_of.append(key)
        islands[chosen].nodes.append(node)
        island_of[node] = chosen
        reach[node] = above | {chosen}
    if sources:
        _add_copies(model.graph, islands, sources)
    outputs = set(model.graph.outputs)
    # nodes onnxruntime runs: those of no island, and the copies its own nodes read
    by_onnxruntime = {n for n in model.graph if n not in island_of}
    for node in reversed(list(model.graph)):
        if node in sources and not any(
                v in outputs or any(u in by_onnxruntime for u, _ in v.uses())
                for v in node.outputs):
            by_onnxruntime.discard(node)

    # a copy: the islands and onnxruntime (-1) that run it
    runs_copy: dict[ir.Node, set[int]] = {n: {-1} if n in by_onnxruntime else set()
                                          for n in sources}
    for isl in islands:
        for n in isl.copied:
            runs_copy[n].add(isl.index)
        isl.kept = [n for n in isl.copied if n in by_onnxruntime]

    def read_by_onnxruntime(weight: ir.Value) -> bool:
        return weight in outputs or any(user in by_onnxruntime for user, _ in weight.uses())

    def read_outside(v: ir.Value, isl: Island, members: set[ir.Node]) -> bool:
        return v in outputs or any(
            runs_copy[user] - {isl.index} if user in runs_copy else user not in members
            for user, _ in v.uses())

    for isl in islands:
        members = set(isl.nodes)
        seen: set[ir.Value] = set()
        for node in isl.nodes:
            for v in node.inputs:
                if v is None or v in seen:
                    continue
                if v.producer() in members:
                    continue
                seen.add(v)
                (isl.weights if is_weight(v) else isl.inputs).append(v)
                if is_weight(v) and read_by_onnxruntime(v):
                    isl.shared_weights.append(v)
            if node in sources:
                continue  # (its readers outside compute their own copy)
            for v in node.outputs:
                if read_outside(v, isl, members):
                    isl.outputs.append(v)
    return [i for i in islands if i.outputs], left


def _add_copies(graph: ir.Graph, islands: list[Island],
                sources: dict[ir.Node, list[ir.Node]]) -> None:
    """Adds to each island the copied nodes its nodes read, transitively (`Island.copied`), its
    nodes kept in the graph's order."""
    order = {n: i for i, n in enumerate(graph)}
    for isl in islands:
        found: set[ir.Node] = set()
        todo = list(isl.nodes)
        while todo:
            for v in todo.pop().inputs:
                p = v.producer() if v is not None else None
                if p in sources and p not in found:
                    found.add(p)
                    todo.append(p)
        isl.copied = sorted(found, key=order.__getitem__)
        isl.nodes = sorted([*isl.nodes, *isl.copied], key=order.__getitem__)
