"""Element types against onnxruntime: every integer width (signedness in division, comparisons,
extension), float16 and bfloat16 (stored as such, computed in float32: element-wise operators,
reductions, products, fused regions), every Cast pair with its rounding, and models with such
inputs and outputs end to end through the C bundle (the runtime's dtype table, the header,
run_model's .npy I/O).

Where onnxruntime has no kernel for a type (int16 Max, uint32 ReduceSum, most float16
operators) the ONNX reference evaluator is the reference (test_ops_elementwise.expected), which
computes a float16 operator in float32 and rounds its result, as aotc. onnxruntime's Python API
takes no bfloat16 arrays, so bfloat16 tests run in models that cast float32 inputs to bfloat16
and their results back.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnx.helper as oh
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from program_runner import compile_onnx, load_graph, ort_outputs, run_program  # noqa: E402
from test_ops_elementwise import Init, expected, make_model  # noqa: E402

from aotc.compiler import compile_model  # noqa: E402
from aotc.driver import optimize_model  # noqa: E402
from aotc.errors import AotcError  # noqa: E402
from aotc.package.build import build_bundle, run_model_process  # noqa: E402
from aotc.verify import verify_bundle  # noqa: E402
from targets.cpu.codegen import optimized_module  # noqa: E402
from targets.cpu.target import NAMED_TARGETS, target_machine  # noqa: E402

RNG = np.random.default_rng(7)
NEW_INTS = ["int16", "uint16", "uint32", "uint64"]
INTS = ["int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8"]
HALVES = ["float16", "bfloat16"]
CAST_TYPES = ["float32", "float64", *HALVES, *INTS, "bool"]
BF16 = ml_dtypes.bfloat16


def full_range(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """Integers over the type's whole range, its extremes included."""
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    x.flat[:4] = [info.min, info.max, 0, 1]
    return x


def check_same(op: str, inputs: list, attrs: dict | None = None, opset: int = 21) -> None:
    """aotc's outputs equal the reference's exactly: dtype, shape, every bit but NaN payloads."""
    model, feeds = make_model(op, inputs, attrs, 1, opset)
    got = run_program(compile_onnx(model), feeds)
    want = expected(model, feeds)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        np.testing.assert_array_equal(g, w)


# --- integer widths ---------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min", "Less", "Greater",
                                "LessOrEqual", "Equal"])
@pytest.mark.parametrize("dtype", NEW_INTS)
def test_integer_binary(dtype: str, op: str) -> None:
    """Whole-range operands: wrapping arithmetic, unsigned values above the sign bit."""
    a, b = full_range(dtype, (3, 17)), full_range(dtype, (3, 17))
    if op == "Div":
        b[b == 0] = 3
        if dtype == "int16":
            b[b == -1] = 5  # INT_MIN / -1 is undefined
    b[1, :5] = a[1, :5]  # some equal pairs
    check_same(op, [a, b])


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", NEW_INTS)
def test_integer_mod(dtype: str, fmod: int) -> None:
    a, b = full_range(dtype, (4, 9)), full_range(dtype, (4, 9))
    b[b == 0] = 7
    if dtype == "int16":
        b[b == -1] = 2
        b[0, :4] = [3, -3, 5, -5]  # the sign rules
    check_same("Mod", [a, b], {"fmod": fmod})


@pytest.mark.parametrize("dtype", NEW_INTS)
def test_integer_broadcast_constant(dtype: str) -> None:
    """A constant operand folded into the expression (its value beyond the sign bit for the
    unsigned types), and a divisor known at compile time."""
    a = full_range(dtype, (5, 6))
    top = np.iinfo(dtype).max - 2
    check_same("Add", [a, Init(np.array(top, dtype))])
    check_same("Div", [a, Init(np.array(top, dtype))])
    check_same("Greater", [a, Init(np.array(top // 2, dtype))])


@pytest.mark.parametrize("dtype", NEW_INTS)
def test_integer_unary(dtype: str) -> None:
    x = full_range(dtype, (2, 11))
    check_same("Abs", [x])
    check_same("Sign", [x])
    if dtype == "int16":
        check_same("Neg", [x])
        check_same("Relu", [x])


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"])
@pytest.mark.parametrize("dtype", ["uint32", "uint64"])
def test_integer_reductions(dtype: str, op: str) -> None:
    x = full_range(dtype, (3, 5, 7))
    if op == "ReduceProd":
        x = RNG.integers(0, 9, (3, 5, 7)).astype(dtype)
    check_same(op, [x, Init(np.array([1], np.int64))], {"keepdims": 0})
    check_same(op, [x], {"keepdims": 1})


@pytest.mark.parametrize("dtype", ["uint32", "uint64"])
def test_integer_matmul_cumsum_argmax(dtype: str) -> None:
    a, b = RNG.integers(0, 1000, (4, 6)).astype(dtype), RNG.integers(0, 1000, (6, 5)).astype(dtype)
    check_same("MatMul", [a, b])
    x = full_range(dtype, (3, 8))
    check_same("CumSum", [x, Init(np.array(1, np.int64))])
    check_same("ArgMax", [x], {"axis": 1})
    check_same("ArgMin", [x], {"axis": 0})


@pytest.mark.parametrize("dtype", NEW_INTS)
def test_integer_data_movement(dtype: str) -> None:
    x = full_range(dtype, (3, 4, 5))
    check_same("Transpose", [x], {"perm": [2, 0, 1]})
    check_same("Concat", [x, full_range(dtype, (3, 2, 5))], {"axis": 1})
    check_same("Gather", [x, Init(np.array([2, 0], np.int64))], {"axis": 1})
    check_same("Where", [RNG.random((3, 4, 5)) < 0.5, x, full_range(dtype, (4, 5))])
    check_same("Pad", [x, Init(np.array([0, 1, 2, 0, 0, 1], np.int64)),
                       Init(np.array(np.iinfo(dtype).max, dtype))])
    check_same("Clip", [x, Init(np.array(np.iinfo(dtype).min + 5, dtype)),
                        Init(np.array(np.iinfo(dtype).max // 3, dtype))])


# --- float16 and bfloat16 ---------------------------------------------------------------------

def _ulps_close(got: np.ndarray, want: np.ndarray, ulps: float = 1.0) -> None:
    """Equal dtype and shape, NaN and ±inf in the same places, finite values within `ulps`
    units of the type's last place (relative; absolute below 1)."""
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype)
    g, w = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    finite = np.isfinite(w)
    np.testing.assert_array_equal(g[~finite & ~np.isnan(w)], w[~finite & ~np.isnan(w)])
    eps = float(ml_dtypes.finfo(want.dtype).eps)
    err = np.abs(g[finite] - w[finite]) / np.maximum(1.0, np.abs(w[finite]))
    assert err.size == 0 or err.max() <= ulps * eps, f"{err.max() / eps:.2f} ulps"


def check_half(op: str, inputs: list, attrs: dict | None = None, ulps: float = 1.0) -> None:
    model, feeds = make_model(op, inputs, attrs)
    got = run_program(compile_onnx(model), feeds)
    for g, w in zip(got, expected(model, feeds), strict=True):
        _ulps_close(g, w, ulps) if w.dtype.itemsize == 2 and w.dtype.kind not in "iu" \
            else np.testing.assert_array_equal(g, w)


def randn(*shape: int, dtype: str = "float16", scale: float = 2.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(dtype)


HALF_UNARY = ["Relu", "Abs", "Neg", "Sign", "Sigmoid", "Tanh", "Erf", "Softplus", "Exp", "Log",
              "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Sin", "Cos", "IsNaN", "IsInf",
              "HardSigmoid", "LeakyRelu", "Elu", "Gelu", "HardSwish"]


@pytest.mark.parametrize("op", HALF_UNARY)
def test_float16_unary(op: str) -> None:
    x = randn(4, 33)
    x.flat[:6] = [np.inf, -np.inf, np.nan, 0.0, -0.0, 65504.0]
    if op == "Sign":  # onnxruntime's float16 Sign gives 0 for NaN, its float32 one NaN (as aotc)
        x.flat[2] = 1.5
    if op in ("Log", "Sqrt"):
        x = np.abs(x)
    check_half(op, [x])


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean",
                                "Less", "GreaterOrEqual", "Equal", "Mod", "PRelu"])
def test_float16_binary(op: str) -> None:
    a, b = (randn(3, 5, 20), randn(5, 1)) if op == "PRelu" else (randn(3, 1, 20), randn(5, 20))
    if op == "Pow":
        a = np.abs(a)
    a.flat[:3] = [60000.0, -60000.0, 1e-7]  # sums past the largest finite value: inf
    b.flat[:3] = [60000.0, -60000.0, 1e-7]
    check_half(op, [a, b], {"fmod": 1} if op == "Mod" else None)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
                                "ReduceL2", "ReduceLogSumExp", "ReduceSumSquare"])
def test_float16_reductions(op: str) -> None:
    check_half(op, [randn(6, 7, 50)], {"keepdims": 0}, ulps=2)
    check_half(op, [randn(5, 300), Init(np.array([1], np.int64))], {"keepdims": 1}, ulps=2)


def test_float16_sum_accumulates_in_float32() -> None:
    """4096 terms of about 1: a float16 accumulator would stop growing at 2048 (its spacing
    there is 2); aotc sums in float32 and rounds once."""
    x = (1.0 + RNG.random((2, 4096)) / 64).astype(np.float16)
    model, feeds = make_model("ReduceSum", [x, Init(np.array([1], np.int64))], {"keepdims": 0})
    got = run_program(compile_onnx(model), feeds)[0]
    want = x.astype(np.float64).sum(axis=1).astype(np.float16)
    _ulps_close(got, want)


@pytest.mark.parametrize("op,attrs", [("Softmax", {"axis": -1}), ("LogSoftmax", {"axis": 1}),
                                      ("LayerNormalization", {"axis": -1})])
def test_float16_rows(op: str, attrs: dict) -> None:
    """Row-wise operators (the rows template runs them as for float32)."""
    x = randn(16, 96)
    extra = [Init(randn(96)), Init(randn(96))] if op == "LayerNormalization" else []
    check_half(op, [x, *extra], attrs, ulps=2)


@pytest.mark.parametrize("weights_constant", [True, False])
def test_float16_products(weights_constant: bool) -> None:
    """MatMul, Gemm and Conv through the generic kernels (the GEMM and depthwise templates take
    float32 alone), accumulated in float32."""
    w = randn(24, 17, scale=0.3)
    wrap = Init if weights_constant else (lambda a: a)
    check_half("MatMul", [randn(2, 9, 24), wrap(w)], ulps=2)
    check_half("Gemm", [randn(9, 24), wrap(w.T.copy()), Init(randn(17))], {"transB": 1,
                                                                         "alpha": 0.5}, ulps=2)
    x = randn(1, 4, 11, 11)
    check_half("Conv", [x, wrap(randn(6, 4, 3, 3, scale=0.3)), Init(randn(6))],
               {"pads": [1, 1, 1, 1]}, ulps=2)
    check_half("Conv", [x, wrap(randn(4, 1, 3, 3))], {"group": 4, "strides": [2, 2]}, ulps=2)


def test_float16_nn_and_data_movement() -> None:
    x = randn(2, 3, 8, 8)
    stats = [Init((RNG.random(3) + 0.5).astype(np.float16)) for _ in range(4)]
    check_half("BatchNormalization", [x, *stats], ulps=2)
    check_half("MaxPool", [x], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]})
    check_half("AveragePool", [x], {"kernel_shape": [2, 2], "strides": [2, 2]})
    check_half("GlobalAveragePool", [x])
    check_half("Resize", [x, None, Init(np.array([1, 1, 2, 1.5], np.float32))],
               {"mode": "linear"}, ulps=2)
    check_half("Transpose", [x], {"perm": [0, 2, 3, 1]})
    check_half("Concat", [x, randn(2, 1, 8, 8)], {"axis": 1})
    check_half("Gather", [x, Init(np.array([[1, 0]], np.int64))], {"axis": 1})
    check_half("Slice", [x, Init(np.array([1, 2])), Init(np.array([7, 8])),
                         Init(np.array([2, 3])), Init(np.array([2, 3]))])
    check_half("Pad", [x, Init(np.array([0, 0, 1, 2, 0, 0, 2, 1])), Init(np.array(-1.5,
                                                                                  np.float16))])
    check_half("Where", [RNG.random((8, 8)) < 0.5, x, Init(np.array(np.inf, np.float16))])
    check_half("Clip", [x, Init(np.array(-0.5, np.float16)), Init(np.array(0.75, np.float16))])
    check_half("ArgMax", [x], {"axis": 3})
    check_half("CumSum", [x, Init(np.array(2, np.int64))], ulps=2)
    check_half("Expand", [randn(3, 1), Init(np.array([2, 3, 4]))])
    check_half("Tile", [randn(2, 3), Init(np.array([2, 2]))])


def test_float16_constant_of_shape() -> None:
    value = onnx.numpy_helper.from_array(np.array([0.1], np.float16), "value")
    check_half("ConstantOfShape", [Init(np.array([2, 5], np.int64))], {"value": value})


def _bf16_model(op: str, n_inputs: int, shape: tuple[int, ...],
                attrs: dict | None = None) -> onnx.ModelProto:
    """float32 inputs cast to bfloat16, `op` on them, its result cast back to float32."""
    t = onnx.TensorProto
    names = [f"x{i}" for i in range(n_inputs)]
    nodes = [oh.make_node("Cast", [n], [n + "b"], to=t.BFLOAT16) for n in names]
    nodes.append(oh.make_node(op, [n + "b" for n in names], ["yb"], **(attrs or {})))
    nodes.append(oh.make_node("Cast", ["yb"], ["y"], to=t.FLOAT))
    graph = oh.make_graph(nodes, "bf16", [oh.make_tensor_value_info(n, t.FLOAT, shape)
                                          for n in names],
                          [oh.make_tensor_value_info("y", t.FLOAT, None)])
    return onnx.shape_inference.infer_shapes(
        oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10))


@pytest.mark.parametrize("op,n", [("Add", 2), ("Mul", 2), ("Div", 2), ("Sub", 2), ("Relu", 1),
                                  ("Sigmoid", 1), ("Exp", 1), ("MatMul", 2), ("Max", 2),
                                  ("Softmax", 1), ("ReduceSum", 1)])
def test_bfloat16_ops(op: str, n: int) -> None:
    """Against onnxruntime where it has a bfloat16 kernel, else the reference evaluator."""
    shape = (8, 8) if op == "MatMul" else (4, 8)
    model = _bf16_model(op, n, shape)
    feeds = [(RNG.standard_normal(shape) * 3).astype(np.float32) for _ in range(n)]
    feeds[0].flat[:3] = [np.nan, np.inf, 3.4e38]  # the largest float32 rounds to inf
    got = run_program(compile_onnx(model), feeds)[0]
    want = expected(model, feeds)[0]
    _ulps_close(got.astype(BF16), want.astype(BF16), ulps=1 if op in ("Add", "Mul") else 2)


def _half_net() -> onnx.ModelProto:
    """float16 in and out: Conv + bias → Relu → + residual (one fused region), its float32
    cast scaled, and a MatMul → Softmax head; weights stored as float16."""
    t = onnx.TensorProto
    h = np.float16
    inits = [onnx.numpy_helper.from_array(a, n) for a, n in (
        (randn(4, 4, 3, 3, scale=0.3), "w"), (randn(4), "b"), (randn(64, 10, scale=0.2), "m"),
        (np.array(0.5, np.float32), "half"))]
    nodes = [
        oh.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["c"], ["r"]),
        oh.make_node("Add", ["r", "x"], ["y"]),
        oh.make_node("Cast", ["y"], ["yf"], to=t.FLOAT),
        oh.make_node("Mul", ["yf", "half"], ["z"]),
        oh.make_node("Reshape", ["y", "shape"], ["flat"]),
        oh.make_node("MatMul", ["flat", "m"], ["logits"]),
        oh.make_node("Softmax", ["logits"], ["p"], axis=-1),
    ]
    inits.append(onnx.numpy_helper.from_array(np.array([4, 64], np.int64), "shape"))
    assert all(i.data_type in (t.FLOAT16, t.FLOAT, t.INT64) for i in inits) and h
    graph = oh.make_graph(nodes, "half_net", [oh.make_tensor_value_info("x", t.FLOAT16,
                                                                         [1, 4, 8, 8])],
                          [oh.make_tensor_value_info("y", t.FLOAT16, [1, 4, 8, 8]),
                           oh.make_tensor_value_info("z", t.FLOAT, [1, 4, 8, 8]),
                           oh.make_tensor_value_info("p", t.FLOAT16, [4, 10])], inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)


def _compare_half_net(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        # the products' float32 sums are added in another order than onnxruntime's
        np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), rtol=4e-3,
                                   atol=4e-3)


def test_float16_fused_regions() -> None:
    """The graph passes fuse float16 regions (Conv + Relu + Add; the Cast and Mul after it)
    and their kernels compute in float32, rounding each operator's result as a kernel of its
    own would (so fusing changes no result)."""
    model = _half_net()
    program = compile_onnx(model)
    assert len(program.steps) < len(model.graph.node) - 1, [s.node for s in program.steps]
    x = randn(1, 4, 8, 8)
    _compare_half_net(run_program(program, [x]), expected(model, [x]))


@pytest.mark.parametrize("dtype", HALVES)
def test_half_fusion_changes_no_result(dtype: str) -> None:
    """An element-wise chain fused into one kernel rounds after each operator, as the kernels
    of the unfused nodes do."""
    code = oh.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = oh.make_graph(
        [oh.make_node("Mul", ["x", "x"], ["a"]), oh.make_node("Add", ["a", "x"], ["b"]),
         oh.make_node("Sigmoid", ["b"], ["c"]), oh.make_node("Sub", ["c", "x"], ["y"])], "chain",
        [oh.make_tensor_value_info("x", code, [6, 50])],
        [oh.make_tensor_value_info("y", code, [6, 50])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    fused, unfused = compile_onnx(model), compile_onnx(model, passes=False)
    assert len(fused.steps) == 1 and len(unfused.steps) == 4
    x = randn(6, 50, dtype=dtype)
    got, want = run_program(fused, [x])[0], run_program(unfused, [x])[0]
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_half_rounding_survives_native_half_arithmetic() -> None:
    """On a target with native half arithmetic (AVX512-FP16: Sapphire Rapids and later) LLVM
    narrows a rounded float operation to a half one; the rounded multiply of x*x + x must not
    then be contracted with the add into one half FMA, which skips the Mul's rounding (the
    host test above sees this only on such a host)."""
    base = NAMED_TARGETS["cpu-avx512"]
    fp16 = dataclasses.replace(base, name="avx512fp16", cpu="sapphirerapids",
                               features=base.features + ",+avx512fp16,+avx512bf16")
    code = oh.np_dtype_to_tensor_dtype(np.dtype("float16"))
    graph = oh.make_graph(
        [oh.make_node("Mul", ["x", "x"], ["a"]), oh.make_node("Add", ["a", "x"], ["y"])],
        "chain", [oh.make_tensor_value_info("x", code, [64])],
        [oh.make_tensor_value_info("y", code, [64])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    program = compile_model(load_graph(model), fp16)
    assert len(program.steps) == 1
    asm = target_machine(fp16).emit_assembly(optimized_module(program.kernel_ll, fp16))
    assert re.search(r"\bvmul[ps]h\b", asm), "the product is not a half multiply any more"
    assert not re.search(r"\bvf(n?)m(add|sub)\w*[ps]h\b", asm), "a half FMA skips a rounding"


# --- Cast -------------------------------------------------------------------------------------

def _cast_source(src: str, dst: str) -> np.ndarray:
    """Values every conversion defines: floats within the destination's range (truncated
    toward zero; past 2^31 and 2^63 where the unsigned conversions differ from the signed
    ones), integers over their whole range (narrowing wraps, widening extends by sign; past
    float16's range they become ±inf)."""
    if src == "bool":
        return RNG.random((3, 11)) < 0.5
    if src not in INTS:
        if dst in INTS:
            info = np.iinfo(dst)
            lo, hi = max(float(info.min), -1000.0), min(float(info.max), 1000.0)
        else:
            lo, hi = -1000.0, 1000.0
        x = RNG.uniform(lo, hi, (3, 11)).astype(src)
        x.flat[:6] = [0.0, -0.0, 0.5, -0.7, 1.9, -1.9] if lo < 0 else [0.0, 0.2, 0.9, 1.5, 2, 3]
        big = {"uint32": [3.5e9, 2.2e9], "int64": [-4e15, 9e18], "uint64": [1.5e19, 9.3e18],
               "int32": [-2.1e9, 2.1e9]}.get(dst, []) if src != "float16" else []
        if dst not in INTS and dst != "bool":  # rounding, overflow and subnormals
            big = [np.nan, -np.inf, 65519.0, 1e-6, -3e-8, 1.0 + 2.0**-11 + 2.0**-20]
        x.flat[6:6 + len(big)] = big
        return x
    return full_range(src, (3, 11))


def _cast_model(src: str, dst: str, x: np.ndarray | None = None,
                ) -> tuple[onnx.ModelProto, np.ndarray]:
    """Cast src → dst of `x` (default: _cast_source's), with bfloat16 (which onnxruntime's
    Python API does not take) reached from a float32 input and left to a float32 output by
    casts of their own."""
    t = onnx.TensorProto
    x = _cast_source(src, dst) if x is None else x
    code = {n: oh.np_dtype_to_tensor_dtype(np.dtype(n)) for n in CAST_TYPES}
    nodes, first = [], "x"
    if src == "bfloat16":
        x = x.astype(np.float32)
        nodes.append(oh.make_node("Cast", ["x"], ["xb"], to=t.BFLOAT16))
        first = "xb"
    nodes.append(oh.make_node("Cast", [first], ["y"], to=code[dst]))
    out = "y"
    if dst == "bfloat16":
        nodes.append(oh.make_node("Cast", ["y"], ["yf"], to=t.FLOAT))
        out = "yf"
    graph = oh.make_graph(nodes, "cast", [oh.make_tensor_value_info("x", code[str(x.dtype)],
                                                                    x.shape)],
                          [oh.make_tensor_value_info(out, t.FLOAT if out == "yf" else code[dst],
                                                     x.shape)])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10), x


@pytest.mark.parametrize("dst", CAST_TYPES)
@pytest.mark.parametrize("src", CAST_TYPES)
def test_cast(src: str, dst: str) -> None:
    """Bit for bit as onnxruntime (NaN payloads aside)."""
    model, x = _cast_model(src, dst)
    got = run_program(compile_onnx(model), [x])
    for g, w in zip(got, ort_outputs(model, [x]), strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def test_cast_special_to_bool() -> None:
    check_same("Cast", [np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30], np.float32)],
               {"to": onnx.TensorProto.BOOL})


@pytest.mark.parametrize("dst", HALVES)
def test_cast_rounding_to_half(dst: str) -> None:
    """Ties to even, the largest finite values, overflow to inf, subnormals, NaN; from float64
    and int64 through float32 (two roundings), as onnxruntime."""
    f32 = np.array([1 + 2**-11, 1 + 3 * 2**-11, 1 + 2**-8, 1 + 3 * 2**-8, 65504, 65519.99,
                    65520, 3.3895314e38, 3.4e38, -3.4028235e38, 2**-24, 2**-25, 3 * 2**-26,
                    2**-133, -2**-134, 1e-45, np.nan, -np.nan, np.inf, -0.0], np.float32)
    f64 = np.array([1 + 2**-11 + 2**-40, 1 + 2**-8 + 2**-40, -(1 + 2**-8 + 2**-40), 1e300,
                    np.nan], np.float64)
    i64 = np.array([2**24 + 2**13 + 1, 2**24 + 2**16 + 1, 65519, 65520, -(2**40) - 1],
                   np.int64)
    for x in (f32, f64, i64):
        model, _ = _cast_model(str(x.dtype), dst, x)
        got = run_program(compile_onnx(model), [x])[0]
        want = ort_outputs(model, [x])[0]
        np.testing.assert_array_equal(got, want)
        assert (np.signbit(got) == np.signbit(want))[~np.isnan(want)].all()


@pytest.mark.parametrize("to,what", [(onnx.TensorProto.STRING, "strings")])
def test_cast_to_unsupported_types_is_refused(to: int, what: str) -> None:
    """A type aotc lacks (strings): one clear refusal naming what is compiled instead (the
    8-, 4- and 2-bit types are compiled: tests/test_dtypes_narrow.py)."""
    graph = oh.make_graph([oh.make_node("Cast", ["x"], ["y"], to=to)], "g",
                          [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3])],
                          [oh.make_tensor_value_info("y", to, [3])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    with pytest.raises(AotcError, match="element type") as info:
        compile_onnx(model)
    assert what in str(info.value) and "bfloat16" in str(info.value)


def test_cast_chain_wraps_as_onnxruntime() -> None:
    """int64 → uint16 → int16 → uint64 → int8: each step wraps or extends by its own source."""
    model = oh.make_model(oh.make_graph(
        [oh.make_node("Cast", ["x"], ["a"], to=onnx.TensorProto.UINT16),
         oh.make_node("Cast", ["a"], ["b"], to=onnx.TensorProto.INT16),
         oh.make_node("Cast", ["b"], ["c"], to=onnx.TensorProto.UINT64),
         oh.make_node("Cast", ["c"], ["y"], to=onnx.TensorProto.INT8)], "g",
        [oh.make_tensor_value_info("x", onnx.TensorProto.INT64, [64])],
        [oh.make_tensor_value_info("y", onnx.TensorProto.INT8, [64]),
         oh.make_tensor_value_info("c", onnx.TensorProto.UINT64, [64])]),
        opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    x = full_range("int64", (64,))
    got = run_program(compile_onnx(model), [x])
    for g, w in zip(got, ort_outputs(model, [x]), strict=True):
        np.testing.assert_array_equal(g, w)


# --- a bundle with these types at its interface -----------------------------------------------

def _interface_model() -> onnx.ModelProto:
    """int16 and uint64 inputs, uint16/uint32/uint64 outputs: y = uint16(a) * 3, z = b + 7,
    w = uint32(a) (negative values wrap)."""
    t = onnx.TensorProto
    nodes = [
        oh.make_node("Cast", ["a"], ["a16"], to=t.UINT16),
        oh.make_node("Mul", ["a16", "three"], ["y"]),
        oh.make_node("Add", ["b", "seven"], ["z"]),
        oh.make_node("Cast", ["a"], ["w"], to=t.UINT32),
    ]
    inits = [oh.make_tensor("three", t.UINT16, [], [3]), oh.make_tensor("seven", t.UINT64, [], [7])]
    graph = oh.make_graph(nodes, "ints", [oh.make_tensor_value_info("a", t.INT16, [2, 9]),
                                          oh.make_tensor_value_info("b", t.UINT64, [9])],
                          [oh.make_tensor_value_info("y", t.UINT16, [2, 9]),
                           oh.make_tensor_value_info("z", t.UINT64, [9]),
                           oh.make_tensor_value_info("w", t.UINT32, [2, 9])], inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)


def _bundle(model: onnx.ModelProto, folder: Path) -> Path:
    """`model` compiled (aotc optimize) and built (make) in `folder`/b."""
    (folder / "m").mkdir()
    onnx.save(model, folder / "m" / "model.onnx")
    optimize_model(folder / "m" / "model.onnx", folder / "b", input_shapes=[])
    build_bundle(folder / "b")
    return folder / "b"


def test_integer_interface_bundle(tmp_path: Path) -> None:
    model = _interface_model()
    bundle = _bundle(model, tmp_path)
    header = (bundle / "model.h").read_text()
    assert '"a" int16[2, 9], 36 bytes' in header and '"w" uint32[2, 9], 72 bytes' in header
    assert "AOTC_DTYPE_UINT64" in (bundle / "model.c").read_text()
    inputs = [full_range("int16", (2, 9)), full_range("uint64", (9,))]
    got = run_model_process(bundle, inputs)
    for g, w in zip(got, ort_outputs(model, inputs), strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_float16_bundle(tmp_path: Path) -> None:
    """A float16 model through make and run_model (float16 .npy in and out, weights as
    float16 in the bundle), against onnxruntime; `aotc verify` compares it (its float32
    output too) at float16's precision."""
    model = _half_net()
    bundle = _bundle(model, tmp_path)
    assert '"x" float16[1, 4, 8, 8], 512 bytes' in (bundle / "model.h").read_text()
    assert "AOTC_DTYPE_FLOAT16" in (bundle / "model.c").read_text()
    x = randn(1, 4, 8, 8)
    got = run_model_process(bundle, [x])
    assert [g.dtype for g in got] == [np.float16, np.float32, np.float16]
    _compare_half_net(got, expected(model, [x]))
    reports = verify_bundle(tmp_path / "m" / "model.onnx", bundle, input_shapes=[])
    assert reports and all(r.ok for r in reports), reports


def test_bfloat16_bundle(tmp_path: Path) -> None:
    """bfloat16 .npy files ('<V2', as ml_dtypes saves them) in and out of run_model."""
    t = onnx.TensorProto
    graph = oh.make_graph(
        [oh.make_node("Mul", ["x", "x"], ["sq"]), oh.make_node("Add", ["sq", "one"], ["y"]),
         oh.make_node("Cast", ["x"], ["xf"], to=t.FLOAT)], "bf16",
        [oh.make_tensor_value_info("x", t.BFLOAT16, [3, 7])],
        [oh.make_tensor_value_info("y", t.BFLOAT16, [3, 7]),
         oh.make_tensor_value_info("xf", t.FLOAT, [3, 7])],
        [onnx.numpy_helper.from_array(np.array(1.0, BF16), "one")])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    bundle = _bundle(model, tmp_path)
    x = randn(3, 7, dtype=BF16)
    x.flat[:2] = [np.nan, -np.inf]
    y, xf = run_model_process(bundle, [x])
    assert y.dtype == BF16 and xf.dtype == np.float32
    sq = (x.astype(np.float32) * x.astype(np.float32)).astype(BF16)  # each operator rounds
    want = (sq.astype(np.float32) + 1).astype(BF16)
    np.testing.assert_array_equal(y.astype(np.float32), want.astype(np.float32))
    np.testing.assert_array_equal(xf, x.astype(np.float32))
