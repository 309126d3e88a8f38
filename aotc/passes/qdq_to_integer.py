"""Pass `qdq_to_integer`: DequantizeLinear → Conv/MatMul/Gemm → QuantizeLinear chains (what
`onnxruntime.quantization.quantize_static` writes in QDQ format) become one integer node,
QLinearConv or QLinearMatMul, as onnxruntime runs them: the integer operands multiplied and
summed in int32 (the int32 bias added), requantized once. The float product between the two
quantisations is never computed.

Each rule below matches one product operator and returns the nodes that replace it (the last
one computes the QuantizeLinear's output) or the reason it does not apply; the driver inserts
them and drops the product and the QuantizeLinear. DequantizeLinear nodes left unread go with
`eliminate_dead_nodes`. Conditions shared by every rule: each float operand comes from a
DequantizeLinear of int8/uint8 with constant parameters, the product's one reader is a
per-tensor QuantizeLinear to int8/uint8, and a bias is an int32 constant dequantized with zero
point 0 and scale input scale × weight scale (so adding it to the int32 sum is exact).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from aotc.frontend.irutil import bypass, const_array, get_attr, new_initializer
from aotc.passes.qdq_operands import Dequantized, Quantizer, dequantized, requantized

# bias scale against input scale × weight scale: quantize_static writes the float32 product
BIAS_SCALE_RTOL = 1e-6


class _Build:
    """New nodes and initializers for one rewrite, named after the node they replace."""

    def __init__(self, graph: ir.Graph, base: str) -> None:
        self.graph, self.base, self.nodes = graph, base, []

    def const(self, array: np.ndarray, what: str) -> ir.Value:
        return new_initializer(self.graph, array, f"{self.base}_{what}")

    def zero_point(self, zp: ir.Value | None, dtype: ir.DataType, what: str) -> ir.Value:
        """The zero point, or an explicit 0 of `dtype` where the model left it out."""
        return zp if zp is not None else self.const(np.zeros((), dtype.numpy()), what)

    def node(self, op: str, inputs: list[ir.Value | None], shape: tuple[int, ...],
             dtype: ir.DataType, attrs: list[ir.Attr] = ()) -> ir.Value:
        out = ir.Value(name=f"{self.base}_{op}_{len(self.nodes)}", shape=ir.Shape(shape),
                       type=ir.TensorType(dtype))
        self.nodes.append(ir.Node("", op, inputs, list(attrs), outputs=[out],
                                  name=f"{self.base}_{op}_{len(self.nodes)}"))
        return out


def _bias(node: ir.Node, index: int, x: Dequantized, w: Dequantized) -> Dequantized | None | str:
    """The node's dequantized int32 bias (None when it has none), or why it cannot be added
    to the int32 sum."""
    if len(node.inputs) <= index or node.inputs[index] is None:
        return None
    b = dequantized(node.inputs[index], frozenset({ir.DataType.INT32}))
    if isinstance(b, str):
        return f"bias: {b}"
    if const_array(b.q) is None or not b.zero_points_are_zero():
        return "a bias computed at run time or with a zero point"
    want = x.scales * w.scales
    if not np.allclose(np.broadcast_to(b.scales, want.shape), want, rtol=BIAS_SCALE_RTOL, atol=0):
        return "a bias scale other than input scale × weight scale"
    return b


def _per_tensor(d: Dequantized, what: str) -> str | None:
    return None if d.axis is None else f"{what} quantized per axis"


def _conv(node: ir.Node, ins: list[Dequantized], y: Quantizer, b: _Build) -> str | None:
    x, w = ins[0], ins[1]
    if (why := _per_tensor(x, "input")) or (w.axis not in (None, 0)):
        return why or "weights quantized along an axis other than the output channel"
    bias = _bias(node, 2, x, w)
    if isinstance(bias, str):
        return bias
    out = node.outputs[0]
    b.node("QLinearConv", [x.q, x.scale, b.zero_point(x.zero_point, x.q.dtype, "x_zp"), w.q,
                           w.scale, b.zero_point(w.zero_point, w.q.dtype, "w_zp"), y.scale,
                           b.zero_point(y.zero_point, y.dtype, "y_zp"),
                           None if bias is None else bias.q],
           tuple(out.shape), y.dtype, list(node.attributes.values()))
    return None


def _matmul(node: ir.Node, ins: list[Dequantized], y: Quantizer, b: _Build) -> str | None:
    a, w = ins[0], ins[1]
    if (why := _per_tensor(a, "left operand")):
        return why
    if w.axis is not None and (len(w.q.shape) != 2 or w.axis != 1):
        return "right operand quantized along an axis other than its columns"
    out = node.outputs[0]
    b.node("QLinearMatMul", [a.q, a.scale, b.zero_point(a.zero_point, a.q.dtype, "a_zp"), w.q,
                             w.scale, b.zero_point(w.zero_point, w.q.dtype, "b_zp"), y.scale,
                             b.zero_point(y.zero_point, y.dtype, "y_zp")],
           tuple(out.shape), y.dtype)
    return None


def _gemm(node: ir.Node, ins: list[Dequantized], y: Quantizer, b: _Build) -> str | None:
    """Y = A @ op(B) + C as a 1x1 QLinearConv over A viewed as [M, K, 1, 1] (QLinearMatMul has
    no bias): constant B becomes the filters [N, K, 1, 1]."""
    a, w = ins[0], ins[1]
    trans_b = get_attr(node, "transB", 0)
    if get_attr(node, "transA", 0) or get_attr(node, "alpha", 1.0) != 1.0 \
            or get_attr(node, "beta", 1.0) != 1.0:
        return "Gemm with transA, alpha or beta"
    wq = const_array(w.q)
    if wq is None or len(a.q.shape) != 2:
        return "Gemm with weights computed at run time"
    if (why := _per_tensor(a, "input")) or w.axis not in (None, 0 if trans_b else 1):
        return why or "weights quantized along an axis other than the output channel"
    bias = _bias(node, 2, a, w)
    if isinstance(bias, str):
        return bias
    filters = (wq if trans_b else wq.T)[:, :, None, None]
    m, k = a.q.shape
    n = filters.shape[0]
    shape4 = b.const(np.array([m, k, 1, 1], np.int64), "shape4")
    a4 = b.node("Reshape", [a.q, shape4], (m, k, 1, 1), a.q.dtype)
    y4 = b.node("QLinearConv", [a4, a.scale, b.zero_point(a.zero_point, a.q.dtype, "a_zp"),
                                b.const(np.ascontiguousarray(filters), "filters"), w.scale,
                                b.zero_point(w.zero_point, w.q.dtype, "w_zp"), y.scale,
                                b.zero_point(y.zero_point, y.dtype, "y_zp"),
                                None if bias is None else bias.q], (m, n, 1, 1), y.dtype)
    b.node("Reshape", [y4, b.const(np.array([m, n], np.int64), "shape2")], (m, n), y.dtype)
    return None


Rule = Callable[[ir.Node, list[Dequantized], Quantizer, _Build], str | None]
# product operator -> (how many leading inputs are dequantized operands, its rule)
RULES: dict[str, tuple[int, Rule]] = {
    "Conv": (2, _conv),        # DQ(x), DQ(w), [DQ(b)] -> Conv -> Q  =>  QLinearConv
    "MatMul": (2, _matmul),    # DQ(a), DQ(b) -> MatMul -> Q  =>  QLinearMatMul
    "Gemm": (2, _gemm),        # DQ(a), DQ(B), [DQ(C)] -> Gemm -> Q  =>  QLinearConv 1x1
}


def rewrite(node: ir.Node) -> list[ir.Node] | str:
    """The nodes replacing `node` and the QuantizeLinear after it, or why there are none."""
    if node.domain != "" or node.op_type not in RULES or len(node.outputs) != 1:
        return "not a product operator"
    count, rule = RULES[node.op_type]
    ins = [dequantized(v) for v in node.inputs[:count]]
    why = next((d for d in ins if isinstance(d, str)), None)
    y = requantized(node.outputs[0])
    if why is not None or isinstance(y, str):
        return why or str(y)
    build = _Build(node.graph, node.name or node.outputs[0].name or node.op_type)
    why = rule(node, ins, y, build)  # type: ignore[arg-type]
    return why if why is not None else build.nodes


def qdq_to_integer(model: ir.Model) -> ir.Model:
    graph = model.graph
    for node in list(graph):
        nodes = rewrite(node)
        if isinstance(nodes, str):
            continue
        q = requantized(node.outputs[0])
        assert not isinstance(q, str)
        q.node.prepend(nodes)
        bypass(q.node.outputs[0], nodes[-1].outputs[0])
        graph.remove([q.node, node], safe=True)
    return model
