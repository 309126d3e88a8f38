"""Small float models and their int8 forms by onnxruntime.quantization, for the quantized
model tests and the int8 timing: a CNN (convolutions, a residual Add, pooling, a Gemm head)
and a transformer-like block (projections, an attention product of two activations, softmax,
an MLP with a residual), each quantized static QDQ (MinMax calibration) and dynamic."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)


class _Builder:
    """Nodes and initializers of a graph; weights drawn from one seeded generator."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def weight(self, name: str, *shape: int, scale: float | None = None) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        s = scale if scale is not None else 1.0 / np.sqrt(fan_in)
        self.inits.append(numpy_helper.from_array(
            (self.rng.standard_normal(shape) * s).astype(np.float32), name))
        return name

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def node(self, op: str, inputs: list[str], out: str, **attrs) -> str:
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def model(self, x: tuple[str, list[int]], y: str) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, "g", [helper.make_tensor_value_info(x[0], TensorProto.FLOAT, x[1])],
            [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)],
                                  ir_version=10)
        return onnx.shape_inference.infer_shapes(model)


def cnn(size: int = 32) -> onnx.ModelProto:
    """Conv-ReLU stem, a stride-2 conv, a residual 3x3/1x1 block, global pool, Gemm head."""
    b = _Builder(1)
    h = b.node("Conv", ["x", b.weight("w1", 16, 3, 3, 3), b.weight("b1", 16, scale=0.1)],
               "c1", pads=[1, 1, 1, 1])
    h = b.node("Relu", [h], "r1")
    h = b.node("Conv", [h, b.weight("w2", 32, 16, 3, 3), b.weight("b2", 32, scale=0.1)],
               "c2", pads=[1, 1, 1, 1], strides=[2, 2])
    h = b.node("Relu", [h], "r2")
    t = b.node("Conv", [h, b.weight("w3", 32, 32, 3, 3), b.weight("b3", 32, scale=0.1)],
               "c3", pads=[1, 1, 1, 1])
    t = b.node("Relu", [t], "r3")
    t = b.node("Conv", [t, b.weight("w4", 32, 32, 1, 1), b.weight("b4", 32, scale=0.1)], "c4")
    h = b.node("Add", [h, t], "res")
    h = b.node("Relu", [h], "r4")
    h = b.node("MaxPool", [h], "pool", kernel_shape=[2, 2], strides=[2, 2])
    h = b.node("GlobalAveragePool", [h], "gap")
    h = b.node("Flatten", [h], "flat")
    b.node("Gemm", [h, b.weight("wf", 10, 32), b.weight("bf", 10, scale=0.1)], "y", transB=1)
    return b.model(("x", [1, 3, size, size]), "y")


def block(seq: int = 16, hidden: int = 64, attention: bool = True) -> onnx.ModelProto:
    """Self-attention (one head; left out with `attention=False`) and an MLP, each with a
    residual Add."""
    b = _Builder(2)
    h = "x"
    if attention:
        q = b.node("MatMul", ["x", b.weight("wq", hidden, hidden)], "q")
        k = b.node("MatMul", ["x", b.weight("wk", hidden, hidden)], "k")
        v = b.node("MatMul", ["x", b.weight("wv", hidden, hidden)], "v")
        kt = b.node("Transpose", [k], "kt", perm=[0, 2, 1])
        s = b.node("MatMul", [q, kt], "scores")
        s = b.node("Mul", [s, b.const("inv_sqrt", np.array(hidden ** -0.5, np.float32))],
                   "scaled")
        p = b.node("Softmax", [s], "probs", axis=-1)
        a = b.node("MatMul", [p, v], "attn")
        a = b.node("MatMul", [a, b.weight("wo", hidden, hidden)], "proj")
        h = b.node("Add", ["x", a], "res1")
    m = b.node("MatMul", [h, b.weight("w1", hidden, 2 * hidden)], "up")
    m = b.node("Add", [m, b.weight("b1", 2 * hidden, scale=0.1)], "up_b")
    m = b.node("Relu", [m], "act")
    m = b.node("MatMul", [m, b.weight("w2", 2 * hidden, hidden)], "down")
    m = b.node("Add", [m, b.weight("b2", hidden, scale=0.1)], "down_b")
    b.node("Add", [h, m], "y")
    return b.model(("x", [1, seq, hidden]), "y")


def sample_inputs(model: onnx.ModelProto, n: int, seed: int) -> list[np.ndarray]:
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


class _Reader(CalibrationDataReader):
    def __init__(self, name: str, samples: list[np.ndarray]) -> None:
        self.feeds = iter([{name: s} for s in samples])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.feeds, None)


def _quantized(model: onnx.ModelProto, run) -> onnx.ModelProto:
    with tempfile.TemporaryDirectory(prefix="aotc_q_") as tmp:
        src, dst = Path(tmp) / "float.onnx", Path(tmp) / "int8.onnx"
        onnx.save(model, src)
        run(src, dst)
        return onnx.load(str(dst))


def static_qdq(model: onnx.ModelProto, per_channel: bool = False) -> onnx.ModelProto:
    """quantize_static in QDQ format, int8 activations and weights, 16 calibration samples."""
    reader = _Reader(model.graph.input[0].name, sample_inputs(model, 16, seed=7))
    return _quantized(model, lambda src, dst: quantize_static(
        src, dst, reader, quant_format=QuantFormat.QDQ, per_channel=per_channel,
        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8))


def dynamic(model: onnx.ModelProto) -> onnx.ModelProto:
    """quantize_dynamic: int8 weights, activations quantized at run time (uint8)."""
    return _quantized(model, lambda src, dst: quantize_dynamic(src, dst,
                                                               weight_type=QuantType.QInt8))
