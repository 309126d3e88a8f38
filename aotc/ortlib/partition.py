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

from collections.abc import Mapping
from dataclasses import dataclass, field

import onnx_ir as ir

from aotc.compiler import DTYPE_NAMES, unsupported_nodes
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


def _why_not(node: ir.Node, functions: Mapping[ir.OperatorIdentifier, ir.Function]) -> str | None:
    """Why aotc cannot compile `node` (None: it can)."""
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
        if static_dims(v.shape) is None:
            return f"value '{v.name}' has a shape known only at run time ({v.shape})"
    if any(a.type == ir.AttributeType.GRAPH or a.type == ir.AttributeType.GRAPHS
           for a in node.attributes.values()):
        return "it holds subgraphs"
    return None


def find_islands(model: ir.Model) -> tuple[list[Island], list[LeftOut]]:
    """The islands of `model` (its top-level graph, topologically sorted) and the nodes left to
    onnxruntime with the reason."""
    functions = model.functions
    island_of: dict[ir.Node, int] = {}
    # islands that contain a node or one of its ancestors
    reach: dict[ir.Node, frozenset[int]] = {}
    islands: list[Island] = []
    left: list[LeftOut] = []
    for node in model.graph:
        producers = [v.producer() for v in node.inputs
                     if v is not None and not is_weight(v) and v.producer() is not None]
        above = frozenset().union(*(reach[p] for p in producers)) if producers else frozenset()
        if node.op_type == "Constant" and node.domain == "" and is_weight(node.outputs[0]):
            reach[node] = above
            continue
        why = _why_not(node, functions)
        if why is not None:
            left.append(LeftOut(node.name or "<unnamed>", node.op_type, why))
            reach[node] = above
            continue
        chosen = None
        # a producer's island first, else the newest island (a side branch joins it)
        candidates = [island_of[p] for p in producers if p in island_of]
        if islands:
            candidates.append(len(islands) - 1)
        for cand in candidates:
            # joining `cand` is safe when no producer outside it descends from it
            if all(island_of.get(q) == cand or cand not in reach[q] for q in producers):
                chosen = cand
                break
        if chosen is None:
            chosen = len(islands)
            islands.append(Island(chosen))
        islands[chosen].nodes.append(node)
        island_of[node] = chosen
        reach[node] = above | {chosen}
    outputs = set(model.graph.outputs)
    in_islands = set(island_of)

    def read_by_onnxruntime(weight: ir.Value) -> bool:
        return weight in outputs or any(user not in in_islands for user, _ in weight.uses())

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
            for v in node.outputs:
                if v in outputs or any(user not in members for user, _ in v.uses()):
                    isl.outputs.append(v)
    return [i for i in islands if i.outputs], left
