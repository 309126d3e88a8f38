"""Pass `fuse_epilogue`: Conv / Gemm / MatMul plus the element-wise chain on its output → one
`ai.aotc` node.

The chain is what a kernel can compute on the product's tile while it is still in registers:
element-wise nodes (bias Add, activations, Clip, residual Add of another tensor, ...) whose
output has the product's shape, each reading the product (or an earlier link) and any other
tensors that broadcast to it. Diamonds such as `y * sigmoid(y)` or an unrolled Gelu qualify as
long as every value but the last is used only inside the chain. The product's output must not
be used elsewhere. A Conv's chain of clamps may end in a zero Pad of the image (see
`pad_in_producer`): its kernel then stores the tiles inside the padded output.
"""

from __future__ import annotations

import onnx_ir as ir

from aotc.passes.fused_function import fuse_region
from aotc.passes.fusion_regions import (
    graph_order,
    grow_forward,
    has_static_type,
    is_elementwise,
    open_values,
)
from aotc.passes.pad_in_producer import clamps_only, writes_padding, zero_pad_hw

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

        def accept(n: ir.Node, shape: ir.Shape = shape, root: ir.Node = node) -> bool:
            if n.op_type == "Pad":
                return zero_pad_hw(n) and writes_padding(root)
            return is_elementwise(n, graph) and n.outputs[0].shape == shape

        region = grow_forward([node], accept, order)
        if region is not None:
            region = _padding_last(region)
        if region is None or len(region) < 2:
            continue
        call = fuse_region(model, region, "fuse_epilogue")
        order[id(call)] = order[id(region[-1])]
    return model


def _padding_last(region: list[ir.Node]) -> list[ir.Node] | None:
    """`region`, or the part before its first Pad unless that Pad ends a chain of clamps (the
    only padded epilogue a kernel stores); None when that part is no region."""
    pads = [i for i, n in enumerate(region) if n.op_type == "Pad"]
    if not pads or (pads[0] == len(region) - 1 and clamps_only(region[1:-1])):
        return region
    part = region[:pads[0]]
    return part if len(open_values(part)) == 1 else None
