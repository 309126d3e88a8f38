"""Pass `fuse_epilogue`: Conv / Gemm / MatMul plus the element-wise chain on its output → one
`ai.aotc` node.

The chain is what a kernel can compute on the product's tile while it is still in registers:
element-wise nodes (bias Add, activations, Clip, residual Add of another tensor, ...) whose
output has the product's shape, each reading the product (or an earlier link) and any other
tensors that broadcast to it. Diamonds such as `y * sigmoid(y)` or an unrolled Gelu qualify as
long as every value but the last is used only inside the chain. The product's output must not
be used elsewhere.
"""

from __future__ import annotations

import onnx_ir as ir

from aotc.passes.fused_function import fuse_region
from aotc.passes.fusion_regions import graph_order, grow_forward, has_static_type, is_elementwise

PRODUCERS = frozenset({"Conv", "Gemm", "MatMul"})


def _is_producer(node: ir.Node) -> bool:
    return (node.domain == "" and node.op_type in PRODUCERS and len(node.outputs) == 1
            and has_static_type(node.outputs[0]))


def fuse_epilogue(model: ir.Model) -> ir.Model:
    graph = model.graph
    order = graph_order(graph)
    for node in list(graph):
        if not _is_producer(node):
            continue
        shape = node.outputs[0].shape

        def accept(n: ir.Node, shape: ir.Shape = shape) -> bool:
            return is_elementwise(n, graph) and n.outputs[0].shape == shape

        region = grow_forward([node], accept, order)
        if region is None or len(region) < 2:
            continue
        call = fuse_region(model, region, "fuse_epilogue")
        order[id(call)] = order[id(region[-1])]
    return model
