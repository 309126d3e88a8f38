"""What a QDQ model says about a value: the DequantizeLinear that gives a float operand from
integers, the QuantizeLinear that takes a float result back to them (`qdq_to_integer` reads
these). Only constant scales and zero points, per tensor or along one axis, are understood."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from aotc.frontend.irutil import const_array, get_attr

# integer types the QLinear operators take for their data
DATA_TYPES = frozenset({ir.DataType.INT8, ir.DataType.UINT8})


@dataclass(frozen=True)
class Dequantized:
    """`float = (q - zero_point) * scale` by a DequantizeLinear node."""

    q: ir.Value
    scale: ir.Value
    zero_point: ir.Value | None
    axis: int | None  # None: per tensor; else the axis of q its 1-D parameters run along

    @property
    def scales(self) -> np.ndarray:
        return np.asarray(const_array(self.scale), np.float32).reshape(-1)

    def zero_points_are_zero(self) -> bool:
        zp = const_array(self.zero_point)
        return zp is None or not zp.any()


@dataclass(frozen=True)
class Quantizer:
    """The QuantizeLinear node that takes a product's float result, per tensor."""

    node: ir.Node
    scale: ir.Value
    zero_point: ir.Value | None
    dtype: ir.DataType


def _params_axis(node: ir.Node, rank: int) -> int | None | str:
    """None per tensor, the axis of per-axis parameters, or why they do not qualify."""
    if get_attr(node, "block_size", 0):
        return "blocked parameters"
    scale, zp = node.inputs[1], node.inputs[2] if len(node.inputs) > 2 else None
    values = [const_array(v) for v in (scale, zp) if v is not None]
    if scale is None or any(a is None for a in values):
        return "a scale or zero point computed at run time"
    if all(a.size == 1 for a in values):
        return None
    if any(a.ndim != 1 for a in values):
        return "parameters of rank > 1"
    axis = int(get_attr(node, "axis", 1))
    return axis + rank if axis < 0 else axis


def dequantized(v: ir.Value | None, types: frozenset = DATA_TYPES) -> Dequantized | str:
    """The DequantizeLinear computing `v`, or why `v` is not one (of integers of `types`)."""
    node = v.producer() if v is not None else None
    if node is None or node.domain != "" or node.op_type != "DequantizeLinear":
        return "an operand not computed by DequantizeLinear"
    q = node.inputs[0]
    if q is None or q.dtype not in types or q.shape is None:
        return f"dequantized data of type {None if q is None else q.dtype}"
    axis = _params_axis(node, len(q.shape))
    if isinstance(axis, str):
        return axis
    zp = node.inputs[2] if len(node.inputs) > 2 else None
    return Dequantized(q, node.inputs[1], zp, axis)


def requantized(v: ir.Value) -> Quantizer | str:
    """The QuantizeLinear that is `v`'s one reader (per tensor, to int8 or uint8), or why not."""
    users = v.uses()
    if v.is_graph_output() or len(users) != 1:
        return "a result read by more than one node (or a graph output)"
    node = users[0].node
    if node.domain != "" or node.op_type != "QuantizeLinear" or users[0].idx != 0:
        return "a result not read by QuantizeLinear"
    if _params_axis(node, 0 if v.shape is None else len(v.shape)) is not None:
        return "a result quantized per axis or by block"
    out = node.outputs[0]
    if out.dtype not in DATA_TYPES:
        return f"a result quantized to {out.dtype}"
    zp = node.inputs[2] if len(node.inputs) > 2 else None
    return Quantizer(node, node.inputs[1], zp, out.dtype)
