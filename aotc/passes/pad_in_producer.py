"""Pass `pad_in_producer`: a convolution's zero padding written by the kernel that produces its
input, instead of copied in by the convolution's own kernel.

A Conv with pads reads its input through a padded copy: one more pass over a tensor that its
producer has just written. When that producer is another convolution whose epilogue is only
ReLU/Clip (what `fuse_epilogue` fuses into its tile stores) and the padded convolution is the
value's one reader, the pass inserts an explicit zero `Pad` between them and sets the
consumer's pads to 0. `fuse_epilogue` then takes the Pad into the producer's region, whose
kernel stores its tiles inside the padded shape and zeros the border
(`lowering.templates.gemm`, `GemmPattern.out_begin`), and the consumer reads the padded
tensor in place. The rewritten model computes the same values in plain onnxruntime.

Only where the producer's kernel writes the padding at little cost: a 2-D group-1 Conv with
constant weights (the GEMM template's), an output row of at least MIN_PADDED_WIDTH pixels
(pixel mode's tiles then lie within one output row and store straight into the padded
output; other schedules copy their result in), and clamps only in its epilogue (what pixel
mode applies in registers).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from aotc.frontend.irutil import fresh_name, new_initializer, value_names
from aotc.passes.fusion_regions import has_static_type

# output rows at least this long hold a whole pixel-mode tile for the register blocks of up
# to 27 rows (narrower images put several rows in a tile, which is then copied in)
MIN_PADDED_WIDTH = 14
# element-wise nodes between the producing Conv and the Pad: the clamps its kernel applies
# to a tile in registers
CLAMP_OPS = frozenset({"Relu", "Clip"})


def conv_pads(conv: ir.Node) -> list[int] | None:
    """A 2-D Conv's explicit pads [top, left, bottom, right]; None for auto_pad SAME/VALID
    or another rank."""
    x = conv.inputs[0]
    if x is None or x.shape is None or len(x.shape) != 4:
        return None
    mode = conv.attributes.get("auto_pad")
    if mode is not None and mode.value not in ("NOTSET", ""):
        return None
    pads = list(conv.attributes.get_ints("pads", [0, 0, 0, 0]))
    return pads if len(pads) == 4 and min(pads) >= 0 else None


def writes_padding(conv: ir.Node) -> bool:
    """Whether `conv`'s kernel can store its output into a padded tensor (see the module)."""
    if conv.domain != "" or conv.op_type != "Conv" or len(conv.inputs) < 2:
        return False
    out, w = conv.outputs[0], conv.inputs[1]
    return (has_static_type(out) and len(out.shape) == 4 and out.dtype == ir.DataType.FLOAT
            and w is not None and w.const_value is not None
            and conv.attributes.get_int("group", 1) == 1
            and out.shape[3] >= MIN_PADDED_WIDTH)


def clamps_only(nodes: list[ir.Node]) -> bool:
    """Whether every node is ReLU or a Clip with constant bounds."""
    for n in nodes:
        if n.domain != "" or n.op_type not in CLAMP_OPS:
            return False
        if any(v is not None and v.const_value is None for v in n.inputs[1:]):
            return False
    return True


def zero_pad_hw(node: ir.Node) -> bool:
    """A constant-mode Pad by zero with constant, non-negative pads on the last two axes of a
    4-D tensor only (the Pad this pass writes)."""
    if node.domain != "" or node.op_type != "Pad" or len(node.inputs) < 2:
        return False
    mode = node.attributes.get("mode")
    if mode is not None and mode.value != "constant":
        return False
    x, pads = node.inputs[0], node.inputs[1]
    if x is None or not has_static_type(x) or len(x.shape) != 4 or pads is None \
            or pads.const_value is None:
        return False
    if len(node.inputs) > 3 and node.inputs[3] is not None:
        return False  # axes
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        fill = node.inputs[2].const_value
        if fill is None or np.any(fill.numpy() != 0):
            return False
    p = [int(x) for x in pads.const_value.numpy().reshape(-1)]
    return len(p) == 8 and min(p) >= 0 and p[0] == p[1] == p[4] == p[5] == 0


def _producer_chain(v: ir.Value) -> tuple[ir.Node, list[ir.Node]] | None:
    """The Conv that computes `v` and the clamps after it, each value read once."""
    chain: list[ir.Node] = []
    node = v.producer()
    while node is not None and node.op_type in CLAMP_OPS and node.domain == "":
        chain.insert(0, node)
        x = node.inputs[0]
        if x is None or len(x.uses()) != 1 or x.is_graph_output():
            return None
        node = x.producer()
    if node is None or not writes_padding(node) or not clamps_only(chain):
        return None
    return node, chain


def pad_in_producer(model: ir.Model) -> ir.Model:
    graph = model.graph
    taken = value_names(graph)
    for conv in list(graph):
        if conv.domain != "" or conv.op_type != "Conv":
            continue
        pads = conv_pads(conv)
        x = conv.inputs[0]
        if pads is None or not any(pads) or conv.attributes.get_int("group", 1) != 1:
            continue
        if x is None or x.is_graph_output() or len(x.uses()) != 1 or not has_static_type(x):
            continue
        if _producer_chain(x) is None:
            continue
        top, left, bottom, right = pads
        n, c, h, w = x.shape
        pad_values = new_initializer(
            graph, np.array([0, 0, top, left, 0, 0, bottom, right], dtype=np.int64),
            fresh_name(f"{x.name or 'x'}_pads", taken))
        padded = ir.Value(name=fresh_name(f"{x.name or 'x'}_padded", taken),
                          shape=ir.Shape([n, c, h + top + bottom, w + left + right]),
                          type=ir.TensorType(x.dtype))
        pad = ir.Node("", "Pad", [x, pad_values], [ir.AttrString("mode", "constant")],
                      outputs=[padded], name=f"pad_in_producer_{conv.name or x.name}")
        conv.prepend(pad)
        conv.replace_input_with(0, padded)
        conv.attributes["pads"] = ir.AttrInt64s("pads", [0, 0, 0, 0])
    return model
