"""Pass `fuse_elementwise`: maximal regions of element-wise nodes → one `ai.aotc` node each.

A region starts at the earliest element-wise node not fused yet, takes consumers forward (while
the region can still end in one value used outside) and the producers of its inputs backward
(the branches of a tree), until neither adds a node. Every value inside the region is used only
inside it, so the region computes one tensor and the compiler makes it one loop nest. Regions
of a single node stay as they are.
"""

from __future__ import annotations

import onnx_ir as ir

from aotc.passes.fused_function import fuse_region
from aotc.passes.fusion_regions import absorb_producers, graph_order, grow_forward, is_elementwise


def _region_from(seed: ir.Node, graph: ir.Graph, order: dict[int, int]) -> list[ir.Node]:
    def accept(n: ir.Node) -> bool:
        return is_elementwise(n, graph)

    region = [seed]
    while True:
        grown = absorb_producers(grow_forward(region, accept, order) or region, accept)
        if len(grown) == len(region):
            return region
        region = grown


def fuse_elementwise(model: ir.Model) -> ir.Model:
    graph = model.graph
    order = graph_order(graph)
    for node in list(graph):
        if node.graph is not graph or not is_elementwise(node, graph):
            continue  # already moved into an earlier region, or not element-wise
        region = _region_from(node, graph, order)
        if len(region) < 2:
            continue
        call = fuse_region(model, region, "fuse_elementwise")
        order[id(call)] = order[id(max(region, key=lambda n: order[id(n)]))]
    return model
