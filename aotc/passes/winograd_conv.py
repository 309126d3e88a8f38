"""Pass `winograd_conv`: a 3x3 stride-1 convolution as Winograd's F(4x4, 3x3), written in
standard operators whose kernels aotc already has.

F(m x m, r x r) computes an m x m output tile from an (m+r-1)^2 input tile with (m+r-1)^2
multiplications per input/output channel pair instead of m^2 r^2: for F(4x4, 3x3), 36 instead
of 144 (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2016; the
interpolation points 0, +-1, +-2 and infinity). With U = G g G^T (the weights, transformed at
compile time), V = B^T d B (each 6x6 input tile) and Y = A^T M A, the convolution becomes:

    input transform   Conv(x, B-kernels, 6x6, stride 4, group C, pads) -> [N, C*36, th, tw]
                      Reshape [N, C, 36, T] -> Transpose [36, C, N, T] -> Reshape [36, C, N*T]
    batched product   MatMul(U [36, K, C], V) -> [36, K, N*T]            (the GEMM template)
    output transform  MatMul(A [16, 36], M as [36, K*N*T]) -> [16, K*N*T]
                      Reshape [4, 4, K, N, th, tw] -> Transpose [N, K, th, 4, tw, 4]
                      -> Reshape [N, K, 4 th, 4 tw] -> Slice to the output -> Add the bias

The rewritten model computes the same values in plain onnxruntime (to within F(4x4)'s
rounding, a few units of 1e-6 relative on the models tested).

Where: a 2-D float32 Conv with constant weights, kernel 3x3, stride 1, dilation 1, group 1,
explicit pads, where the product saves more than the transforms and the layout passes cost:
at least MIN_CHANNELS input and output channels (the transforms' work per tile grows with C +
K, the product's with C x K) and MIN_TILES output tiles (the product's N; fewer leave its
micro-kernel starved while its 36 weight matrices stream from memory). The pass is for CPU
targets (the driver leaves it out for the GPU targets), and the folders `--emit onnx/ort`
write keep the original convolutions: U holds 4x the weights' bytes.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from aotc.frontend.irutil import bypass, const_array, fresh_name, new_initializer, value_names
from aotc.passes.fusion_regions import has_static_type
from aotc.passes.pad_in_producer import conv_pads

TILE = 4  # m: output tile side
WINDOW = TILE + 2  # m + r - 1: input tile side
MIN_CHANNELS = 128
MIN_TILES = 16

# F(4x4, 3x3): B^T (6x6), G (6x3), A^T (4x6)
B_T = np.array([[4, 0, -5, 0, 1, 0],
                [0, -4, -4, 1, 1, 0],
                [0, 4, -4, -1, 1, 0],
                [0, -2, -1, 2, 1, 0],
                [0, 2, -1, -2, 1, 0],
                [0, 4, 0, -5, 0, 1]], dtype=np.float64)
G = np.array([[1 / 4, 0, 0],
              [-1 / 6, -1 / 6, -1 / 6],
              [-1 / 6, 1 / 6, -1 / 6],
              [1 / 24, 1 / 12, 1 / 6],
              [1 / 24, -1 / 12, 1 / 6],
              [0, 0, 1]], dtype=np.float64)
A_T = np.array([[1, 1, 1, 1, 1, 0],
                [0, 1, -1, 2, -2, 0],
                [0, 1, 1, 4, 4, 0],
                [0, 1, -1, 8, -8, 1]], dtype=np.float64)


def tiles(n: int, oh: int, ow: int) -> tuple[int, int, int]:
    """(tile rows, tile columns, tiles in all) of an n x oh x ow output."""
    th, tw = -(-oh // TILE), -(-ow // TILE)
    return th, tw, n * th * tw


def eligible(conv: ir.Node) -> bool:
    """Whether `conv` is a convolution this pass rewrites (see the module)."""
    if conv.domain != "" or conv.op_type != "Conv" or len(conv.inputs) < 2:
        return False
    x, w, y = conv.inputs[0], conv.inputs[1], conv.outputs[0]
    if x is None or w is None or w.const_value is None or not has_static_type(x) \
            or not has_static_type(y) or len(x.shape) != 4 or x.dtype != ir.DataType.FLOAT:
        return False
    if len(conv.inputs) > 2 and conv.inputs[2] is not None and conv.inputs[2].const_value is None:
        return False
    if conv_pads(conv) is None or conv.attributes.get_int("group", 1) != 1:
        return False
    if list(conv.attributes.get_ints("strides", [1, 1])) != [1, 1] or \
            list(conv.attributes.get_ints("dilations", [1, 1])) != [1, 1]:
        return False
    if w.shape is None or len(w.shape) != 4:  # (a malformed model; the kernels refuse it)
        return False
    k, c, kh, kw = w.shape
    if (kh, kw) != (3, 3):
        return False
    n, _, oh, ow = y.shape
    return min(c, k) >= MIN_CHANNELS and tiles(n, oh, ow)[2] >= MIN_TILES


def transformed_weights(w: np.ndarray) -> np.ndarray:
    """U = G g G^T per output/input channel pair, as [36, K, C]."""
    k, c = w.shape[:2]
    u = np.einsum("xi,kcij,yj->xykc", G, w.astype(np.float64), G)
    return u.reshape(WINDOW * WINDOW, k, c).astype(np.float32)


def input_kernels(c: int) -> np.ndarray:
    """The grouped convolution's weights [C*36, 1, 6, 6]: kernel xi*6+nu of every group is
    B^T's rows xi and nu as an outer product, so its output is V = B^T d B's element."""
    per_group = np.einsum("xi,yj->xyij", B_T, B_T).reshape(WINDOW * WINDOW, 1, WINDOW, WINDOW)
    return np.tile(per_group, (c, 1, 1, 1)).astype(np.float32)


def output_matrix() -> np.ndarray:
    """[16, 36]: row r*4+s applies A^T's rows r and s to a tile's 36 products."""
    return np.einsum("rx,sy->rsxy", A_T, A_T).reshape(TILE * TILE, WINDOW * WINDOW
                                                       ).astype(np.float32)


class _Chain:
    """Nodes inserted before one convolution, each output typed and shaped."""

    def __init__(self, graph: ir.Graph, conv: ir.Node, taken: set[str]) -> None:
        self.graph, self.conv, self.taken = graph, conv, taken
        self.base = conv.name or conv.outputs[0].name or "conv"
        self.count = 0

    def const(self, array: np.ndarray, what: str) -> ir.Value:
        return new_initializer(self.graph, array, f"{self.base}_winograd_{what}")

    def shape(self, dims: list[int]) -> ir.Value:
        return self.const(np.array(dims, dtype=np.int64), "shape")

    def node(self, op: str, inputs: list[ir.Value], dims: list[int], **attrs) -> ir.Value:
        self.count += 1
        out = ir.Value(name=fresh_name(f"{self.base}_winograd_{self.count}", self.taken),
                       shape=ir.Shape(dims),
                       type=ir.TensorType(ir.DataType.FLOAT))
        node = ir.Node("", op, inputs, [_attr(k, v) for k, v in attrs.items()],
                       outputs=[out], name=f"{self.base}_winograd_{op.lower()}_{self.count}")
        self.conv.prepend(node)
        return out


def _attr(name: str, value) -> ir.Attr:
    return ir.AttrInt64s(name, value) if isinstance(value, list) else ir.AttrInt64(name, value)


def rewrite(graph: ir.Graph, conv: ir.Node, taken: set[str]) -> None:
    """Replace `conv` (eligible) by the chain of the module's docstring; `taken`: the value
    names in use (new ones are added)."""
    x, y = conv.inputs[0], conv.outputs[0]
    w = const_array(conv.inputs[1])
    bias = const_array(conv.inputs[2]) if len(conv.inputs) > 2 else None
    top, left, _bottom, _right = conv_pads(conv)  # type: ignore[misc]
    n, c, h, wd = x.shape
    _, k, oh, ow = y.shape
    th, tw, t = tiles(n, oh, ow)
    e = WINDOW * WINDOW
    ch = _Chain(graph, conv, taken)
    # the padded input covers whole tiles: rows top..top+h of 4 th + 2
    v = ch.node("Conv", [x, ch.const(input_kernels(c), "input_kernels")], [n, c * e, th, tw],
                kernel_shape=[WINDOW, WINDOW], strides=[TILE, TILE], group=c,
                pads=[top, left, TILE * th + 2 - h - top, TILE * tw + 2 - wd - left])
    v = ch.node("Reshape", [v, ch.shape([n, c, e, th * tw])], [n, c, e, th * tw])
    v = ch.node("Transpose", [v], [e, c, n, th * tw], perm=[2, 1, 0, 3])
    v = ch.node("Reshape", [v, ch.shape([e, c, t])], [e, c, t])
    m = ch.node("MatMul", [ch.const(transformed_weights(w), "weights"), v], [e, k, t])
    m = ch.node("Reshape", [m, ch.shape([e, k * t])], [e, k * t])
    o = ch.node("MatMul", [ch.const(output_matrix(), "output_matrix"), m], [TILE * TILE, k * t])
    o = ch.node("Reshape", [o, ch.shape([TILE, TILE, k, n, th, tw])], [TILE, TILE, k, n, th, tw])
    o = ch.node("Transpose", [o], [n, k, th, TILE, tw, TILE], perm=[3, 2, 4, 0, 5, 1])
    o = ch.node("Reshape", [o, ch.shape([n, k, TILE * th, TILE * tw])],
                [n, k, TILE * th, TILE * tw])
    if (TILE * th, TILE * tw) != (oh, ow):
        o = ch.node("Slice", [o, ch.shape([0, 0]), ch.shape([oh, ow]), ch.shape([2, 3])],
                    [n, k, oh, ow])
    if bias is not None:
        o = ch.node("Add", [o, ch.const(bias.astype(np.float32).reshape(1, k, 1, 1), "bias")],
                    [n, k, oh, ow])
    bypass(y, o)
    graph.remove(conv, safe=True)


def winograd_conv(model: ir.Model) -> ir.Model:
    graph = model.graph
    taken = value_names(graph)
    for conv in list(graph):
        if eligible(conv):
            rewrite(graph, conv, taken)
    return model
