"""Element types against onnxruntime: every integer width (signedness in division, comparisons,
extension), every Cast pair, and a model with such inputs and outputs end to end through the C
bundle (the runtime's dtype table, the header, run_model's .npy I/O).

Where onnxruntime has no kernel for a type (int16 Max, uint32 ReduceSum) the ONNX reference
evaluator is the reference (test_ops_elementwise.expected).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from program_runner import compile_onnx, ort_outputs, run_program  # noqa: E402
from test_ops_elementwise import Init, expected, make_model  # noqa: E402

from aotc.driver import optimize_model  # noqa: E402
from aotc.package.build import build_bundle, run_model_process  # noqa: E402

RNG = np.random.default_rng(7)
NEW_INTS = ["int16", "uint16", "uint32", "uint64"]
INTS = ["int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8"]
CAST_TYPES = ["float32", "float64", *INTS, "bool"]


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


# --- Cast -------------------------------------------------------------------------------------

def _cast_source(src: str, dst: str) -> np.ndarray:
    """Values every conversion defines: floats within the destination's range (truncated
    toward zero; past 2^31 and 2^63 where the unsigned conversions differ from the signed
    ones), integers over their whole range (narrowing wraps, widening extends by sign)."""
    if src == "bool":
        return RNG.random((3, 11)) < 0.5
    if src in ("float32", "float64"):
        if dst in INTS:
            info = np.iinfo(dst)
            lo, hi = max(float(info.min), -1000.0), min(float(info.max), 1000.0)
        else:
            lo, hi = -1000.0, 1000.0
        x = RNG.uniform(lo, hi, (3, 11)).astype(src)
        x.flat[:6] = [0.0, -0.0, 0.5, -0.7, 1.9, -1.9] if lo < 0 else [0.0, 0.2, 0.9, 1.5, 2, 3]
        big = {"uint32": [3.5e9, 2.2e9], "int64": [-4e15, 9e18], "uint64": [1.5e19, 9.3e18],
               "int32": [-2.1e9, 2.1e9]}.get(dst, [])
        x.flat[6:6 + len(big)] = big
        return x
    return full_range(src, (3, 11))


@pytest.mark.parametrize("dst", CAST_TYPES)
@pytest.mark.parametrize("src", CAST_TYPES)
def test_cast(src: str, dst: str) -> None:
    to = oh.np_dtype_to_tensor_dtype(np.dtype(dst))
    check_same("Cast", [_cast_source(src, dst)], {"to": to})


def test_cast_special_to_bool() -> None:
    check_same("Cast", [np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30], np.float32)],
               {"to": onnx.TensorProto.BOOL})


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


def test_integer_interface_bundle(tmp_path: Path) -> None:
    model = _interface_model()
    (tmp_path / "m").mkdir()
    onnx.save(model, tmp_path / "m" / "model.onnx")
    optimize_model(tmp_path / "m" / "model.onnx", tmp_path / "b", input_shapes=[])
    header = (tmp_path / "b" / "model.h").read_text()
    assert '"a" int16[2, 9], 36 bytes' in header and '"w" uint32[2, 9], 72 bytes' in header
    assert "AOTC_DTYPE_UINT64" in (tmp_path / "b" / "model.c").read_text()
    build_bundle(tmp_path / "b")
    inputs = [full_range("int16", (2, 9)), full_range("uint64", (9,))]
    got = run_model_process(tmp_path / "b", inputs)
    for g, w in zip(got, ort_outputs(model, inputs), strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
