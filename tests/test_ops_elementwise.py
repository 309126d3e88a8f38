"""Element-wise, activation, comparison and type operators against onnxruntime.

Each test builds a one-node model, compiles it with the whole pipeline and compares every output
with onnxruntime: random inputs over broadcast shapes and attribute forms, special values
(±inf, NaN, ±0, large |x|) compared exactly where they matter, and integer arithmetic as shape
computations use it (every Cast pair: test_dtypes.py).
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import onnx
import onnx.helper as oh
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from onnxruntime.capi.onnxruntime_pybind11_state import NotImplemented as OrtNotImplemented  # noqa: E402
from program_runner import (  # noqa: E402
    assert_close,
    compile_onnx,
    onnx_reference_outputs,
    ort_outputs,
    run_program,
)

from aotc.errors import AotcError  # noqa: E402

RNG = np.random.default_rng(0)
INF, NAN = np.inf, np.nan
F32, F64 = np.float32, np.float64


class Init:
    """An input given to the node as an initializer (a compile-time constant)."""

    def __init__(self, value: np.ndarray) -> None:
        self.value = np.asarray(value)


def make_model(op: str, inputs: list, attrs: dict | None = None, n_outputs: int = 1,
               opset: int = 21) -> tuple[onnx.ModelProto, list[np.ndarray]]:
    """One-node model; `inputs` holds arrays (graph inputs), `Init`s or None (omitted)."""
    names, graph_inputs, inits, feeds = [], [], [], []
    for i, x in enumerate(inputs):
        if x is None:
            names.append("")
            continue
        name = f"x{i}"
        names.append(name)
        if isinstance(x, Init):
            inits.append(onnx.numpy_helper.from_array(x.value, name))
        else:
            x = np.asarray(x)
            dtype = onnx.helper.np_dtype_to_tensor_dtype(x.dtype)
            graph_inputs.append(oh.make_tensor_value_info(name, dtype, x.shape))
            feeds.append(x)
    outs = [f"y{i}" for i in range(n_outputs)]
    node = oh.make_node(op, names, outs, **(attrs or {}))
    graph = oh.make_graph([node], "g", graph_inputs, [oh.make_empty_tensor_value_info(o)
                                                      for o in outs], initializer=inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model, strict_mode=True), feeds


def expected(model: onnx.ModelProto, feeds: list[np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs; the ONNX reference evaluator's where onnxruntime has no kernel
    for the type (float64 activations, int64 Relu, bool Where)."""
    try:
        return ort_outputs(model, feeds)
    except OrtNotImplemented:
        return onnx_reference_outputs(model, feeds)


def check(op: str, inputs: list, attrs: dict | None = None, tol: float = 1e-4,
          n_outputs: int = 1, opset: int = 21) -> None:
    model, feeds = make_model(op, inputs, attrs, n_outputs, opset)
    got = run_program(compile_onnx(model), feeds)
    want = expected(model, feeds)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        assert_close(g, w, tol)


def check_exact(op: str, inputs: list, attrs: dict | None = None, rtol: float = 2e-6,
                atol: float = 1e-30, opset: int = 21) -> None:
    """Outputs equal onnxruntime's up to rtol/atol, with NaN and ±inf in the same places."""
    model, feeds = make_model(op, inputs, attrs, 1, opset)
    got = run_program(compile_onnx(model), feeds)
    want = expected(model, feeds)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True)


def randn(*shape: int, dtype: type = F32, scale: float = 3.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(dtype)


def randint(*shape: int, dtype: type = np.int64, lo: int = -50, hi: int = 50) -> np.ndarray:
    return RNG.integers(lo, hi, size=shape).astype(dtype)


SPECIAL = np.array([INF, -INF, NAN, 0.0, -0.0, 1e30, -1e30, 100.0, -100.0, 88.8, -88.8,
                    -104.0, 20.0, -20.0, 1e-30, 0.5, -0.5, 1.5, 2.5, -2.5, 1e-3], F32)

# --- unary ------------------------------------------------------------------------------------

POSITIVE = {"Log", "Sqrt"}
UNARY_FLOAT = ["Relu", "Abs", "Neg", "Sign", "Sigmoid", "Tanh", "Erf", "Softplus", "Exp", "Log",
               "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Sin", "Cos"]


def _unary_input(op: str, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    x = randn(*shape, dtype=dtype)
    if op in POSITIVE:
        x = np.abs(x) + dtype(0.01)
    if op == "Round":
        x = (np.round(x * 2) / 2).astype(dtype)  # halves: ties to even
    return x


@pytest.mark.parametrize("op", UNARY_FLOAT)
def test_unary_float32(op: str) -> None:
    check(op, [_unary_input(op, (2, 3, 17), F32)])


@pytest.mark.parametrize("op", ["Relu", "Exp", "Sqrt"])
def test_unary_rank0(op: str) -> None:
    check(op, [_unary_input(op, (), F32)])


@pytest.mark.parametrize("op", UNARY_FLOAT)
def test_unary_float64(op: str) -> None:
    check(op, [_unary_input(op, (5, 9), F64)])


F64_REFERENCE = {
    "Exp": np.exp, "Log": np.log, "Tanh": np.tanh, "Sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "Softplus": lambda x: np.logaddexp(0, x), "Sqrt": np.sqrt,
}


@pytest.mark.parametrize("op", sorted(F64_REFERENCE))
def test_unary_float64_precision_and_range(op: str) -> None:
    """float64 math is float64 (not float32 in disguise): 1e-13 relative, exp(700) finite."""
    x = np.array([700.0, -700.0, 1e-300, 1 + 1e-12, 0.3, -30.0, 40.0, 3.0], F64)
    if op in ("Log", "Sqrt"):
        x = np.abs(x)
    model, feeds = make_model(op, [x])
    (got,) = run_program(compile_onnx(model), feeds)
    with np.errstate(over="ignore"):
        np.testing.assert_allclose(got, F64_REFERENCE[op](x), rtol=1e-13, atol=0)


@pytest.mark.parametrize("op", ["Relu", "Abs", "Neg", "Sign", "Sigmoid", "Tanh", "Erf",
                                "Softplus", "Exp", "Log", "Sqrt", "Reciprocal", "Floor",
                                "Ceil", "Round"])
def test_unary_special_values(op: str) -> None:
    """Exact NaN/±inf places; onnxruntime flushes tails (Sigmoid(-20) = 0), hence the atol."""
    check_exact(op, [SPECIAL], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["Relu", "Abs", "Neg", "Sign"])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_unary_int(op: str, dtype: type) -> None:
    check(op, [randint(4, 11, dtype=dtype)])


@pytest.mark.parametrize("op", ["Abs", "Sign"])
def test_unary_uint8(op: str) -> None:
    check(op, [randint(3, 7, dtype=np.uint8, lo=0, hi=256)])


def test_not() -> None:
    check("Not", [RNG.random((3, 20)) < 0.5])


# --- activations ------------------------------------------------------------------------------

@pytest.mark.parametrize("op,attrs", [
    ("LeakyRelu", {}), ("LeakyRelu", {"alpha": 0.2}),
    ("HardSigmoid", {}), ("HardSigmoid", {"alpha": 0.4, "beta": 0.3}),
    ("HardSwish", {}),
    ("Gelu", {}), ("Gelu", {"approximate": "tanh"}), ("Gelu", {"approximate": "none"}),
    ("Elu", {}), ("Elu", {"alpha": 0.5}),
    ("Selu", {}), ("Selu", {"alpha": 1.5, "gamma": 2.0}),
    ("Celu", {}), ("Celu", {"alpha": 2.0}),
    ("ThresholdedRelu", {}), ("ThresholdedRelu", {"alpha": 0.5}),
    ("Mish", {}),
])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_activation(op: str, attrs: dict, dtype: type) -> None:
    if op == "Celu" and dtype == F64:
        pytest.skip("ONNX defines Celu for float32 only")
    check(op, [randn(3, 5, 19, dtype=dtype)], attrs)


@pytest.mark.parametrize("op", ["LeakyRelu", "HardSigmoid", "HardSwish", "Gelu", "Elu", "Selu",
                                "Celu", "Mish"])
def test_activation_special_values(op: str) -> None:
    check_exact(op, [SPECIAL], rtol=1e-5, atol=1e-6)


def test_gelu_opset20() -> None:
    check("Gelu", [randn(4, 33)], {"approximate": "tanh"}, opset=20)


@pytest.mark.parametrize("slope_shape", [(), (1,), (16,), (3, 1, 1), (3, 4, 16), (4, 1)])
def test_prelu(slope_shape: tuple[int, ...]) -> None:
    check("PRelu", [randn(2, 3, 4, 16), randn(*slope_shape, scale=0.5)])


def test_prelu_constant_slope() -> None:
    check("PRelu", [randn(2, 3, 4, 5), Init(np.full((3, 1, 1), 0.25, F32))])


# --- Clip ----------------------------------------------------------------------------------

CLIP_X = np.concatenate([randn(40), np.array([INF, -INF, 0.0, 6.0, -1.0], F32)])


@pytest.mark.parametrize("lo,hi", [(0.0, 6.0), (-1.0, None), (None, 2.5), (None, None),
                                   (3.0, 1.0), (-INF, INF)])
def test_clip_constant_bounds(lo: float | None, hi: float | None) -> None:
    ins = [CLIP_X, None if lo is None else Init(np.array(lo, F32)),
           None if hi is None else Init(np.array(hi, F32))]
    while ins[-1] is None:
        ins.pop()
    check_exact("Clip", ins)


def test_clip_runtime_bounds() -> None:
    check("Clip", [randn(3, 17), np.array(-0.5, F32), np.array(1.0, F32)])


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, F64])
def test_clip_types(dtype: type) -> None:
    lo, hi = (3, 200) if dtype == np.uint8 else (-7, 20)
    x = randint(5, 13, dtype=dtype, lo=0 if dtype == np.uint8 else -100, hi=250 if
                dtype == np.uint8 else 100)
    check("Clip", [x, Init(np.array(lo, dtype)), Init(np.array(hi, dtype))])


def test_clip_opset6_attributes() -> None:
    check("Clip", [randn(4, 9)], {"min": -1.0, "max": 1.5}, opset=6)


def test_clip_nan_propagates() -> None:
    check_exact("Clip", [np.array([NAN, 1.0, -9.0], F32), Init(np.array(0.0, F32)),
                         Init(np.array(6.0, F32))])


# --- binary arithmetic ------------------------------------------------------------------------

BROADCAST = [((2, 3, 17), (2, 3, 17)), ((2, 3, 17), (17,)), ((4, 1, 9), (5, 1)),
             ((), (3, 8)), ((1, 16), (7, 1)), ((6,), ())]
ARITH_DTYPES = [F32, F64, np.int64, np.int32, np.int8, np.uint8]


def _operands(op: str, dtype: type, sa: tuple, sb: tuple) -> tuple[np.ndarray, np.ndarray]:
    if np.issubdtype(dtype, np.floating):
        a, b = randn(*sa, dtype=dtype), randn(*sb, dtype=dtype)
        if op == "Div":
            b = np.where(np.abs(b) < 0.1, dtype(0.5), b).astype(dtype)
        return a, b
    if dtype == np.uint8:
        a, b = randint(*sa, dtype=dtype, lo=0, hi=256), randint(*sb, dtype=dtype, lo=1, hi=30)
    else:
        lo, hi = (-100, 100) if dtype == np.int8 else (-1000, 1000)
        a, b = randint(*sa, dtype=dtype, lo=lo, hi=hi), randint(*sb, dtype=dtype, lo=-30, hi=30)
        if op == "Div":
            b = np.where(b == 0, dtype(7), b).astype(dtype)
    return a, b


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("dtype", ARITH_DTYPES)
@pytest.mark.parametrize("shapes", BROADCAST[1:3])
def test_binary(op: str, dtype: type, shapes: tuple) -> None:
    check(op, list(_operands(op, dtype, *shapes)))


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("shapes", BROADCAST[3:])
def test_binary_broadcast_f32(op: str, shapes: tuple) -> None:
    check(op, list(_operands(op, F32, *shapes)))


@pytest.mark.parametrize("divisor", [3, -3, 1, -1, 7])
def test_int_div_truncates(divisor: int) -> None:
    a = np.array([-7, -6, -5, -1, 0, 1, 5, 6, 7, 2**62, -2**62], np.int64)
    check("Div", [a, Init(np.array(divisor, np.int64))])
    check("Div", [a.astype(np.int32)[:9], np.full(9, divisor, np.int32)])


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_int64_shape_arithmetic(op: str) -> None:
    """As in exported shape computations: [N] int64 shapes against scalars and [1] constants."""
    shape = np.array([1, 3, 224, 224], np.int64)
    check(op, [shape, Init(np.array([2], np.int64))])
    check(op, [np.array(5, np.int64), shape])


@pytest.mark.parametrize("op", ["Add", "Mul", "Div", "Sub"])
def test_binary_constant_operand(op: str) -> None:
    check(op, [randn(3, 10), Init(np.array(1.7, F32))])
    check(op, [Init(np.full((10,), 2.5, F32)), randn(3, 10)])
    check(op, [randn(3, 10), Init(randn(10) + F32(9))])


def test_uint8_constant_operand() -> None:
    x = randint(4, 9, dtype=np.uint8, lo=0, hi=256)
    check("Add", [x, Init(np.array(200, np.uint8))])
    check("Div", [x, Init(np.array(130, np.uint8))])
    check("Max", [x, Init(np.array(250, np.uint8))])


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int8, np.uint8])
def test_int_division_by_zero_does_not_trap(dtype: type) -> None:
    """Undefined in ONNX (onnxruntime traps); aotc gives x / 0 = x and INT_MIN / -1 = INT_MIN."""
    info = np.iinfo(dtype)
    a = np.array([7, -7 if info.min else 9, info.min, info.max, 0], dtype)
    b = np.array([0, 0, -1 if info.min else 0, 0, 0], dtype)
    model, feeds = make_model("Div", [a, b])
    (got,) = run_program(compile_onnx(model), feeds)
    want = np.array([7, -7 if info.min else 9, info.min, info.max, 0], dtype)
    np.testing.assert_array_equal(got, want)


def test_float_division_by_zero() -> None:
    check_exact("Div", [np.array([1.0, -1.0, 0.0, INF], F32), np.array([0.0, 0.0, 0.0, -0.0], F32)])


# --- Pow ------------------------------------------------------------------------------------

@pytest.mark.parametrize("e", [2.0, 0.5, 1.0, 3.0, 0.0, -1.0, 2.5, -0.5])
def test_pow_constant_exponent(e: float) -> None:
    x = np.abs(randn(3, 21)) + F32(0.05)
    if e in (2.0, 3.0, 1.0, 0.0):
        x = randn(3, 21)
    check("Pow", [x, Init(np.array(e, F32))])


def test_pow_constant_exponent_special_values() -> None:
    x = np.array([INF, -INF, 0.0, -0.0, 4.0, -4.0, NAN, 1e30], F32)
    for e in (2.0, 3.0, 0.5, 1.0, 0.0, -1.0):
        check_exact("Pow", [x, Init(np.array(e, F32))])


@pytest.mark.parametrize("shapes", [((3, 8), (3, 8)), ((3, 8), (8,)), ((8,), (3, 1)),
                                    ((3, 8), ())])
def test_pow_tensor_exponent(shapes: tuple) -> None:
    x = np.abs(randn(*shapes[0])) + F32(0.1)
    e = randn(*shapes[1], scale=1.5)
    check("Pow", [x, e])


def test_pow_negative_base_integer_exponent() -> None:
    x = np.array([-2.0, -3.0, -0.5, -1.0, -2.0, -INF, -0.0, -1.5], F32)
    e = np.array([2.0, 3.0, -1.0, 7.0, -2.0, 3.0, -1.0, 0.5], F32)
    check_exact("Pow", [x, e], rtol=1e-6)


@pytest.mark.parametrize("edtype", [np.int64, np.int32, F64])
def test_pow_mixed_exponent_types(edtype: type) -> None:
    x = randn(4, 6)
    e = RNG.integers(-3, 4, size=(6,)).astype(edtype)
    check("Pow", [x, e], tol=1e-4)


def test_pow_float64() -> None:
    x, e = np.abs(randn(4, 6, dtype=F64)) + 0.1, randn(4, 6, dtype=F64, scale=1.0)
    check("Pow", [x, e])
    model, feeds = make_model("Pow", [np.array([10.0, 2.0, 1.0000001], F64),
                                      np.array([300.0, 0.5, 1e7], F64)])
    (got,) = run_program(compile_onnx(model), feeds)
    np.testing.assert_allclose(got, np.power(*feeds), rtol=1e-13)


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
@pytest.mark.parametrize("e", [0, 1, 2, 3, 5])
def test_pow_int_base(dtype: type, e: int) -> None:
    check("Pow", [randint(3, 9, dtype=dtype, lo=-20, hi=20), Init(np.array(e, np.int64))])


def test_pow_int_base_runtime_exponent() -> None:
    """Computed as onnxruntime does, in float64 and truncated (cases: test_ops_math_bitwise)."""
    check("Pow", [randint(3, dtype=np.int64, lo=-6, hi=7), randint(3, dtype=np.int64, lo=-3,
                                                                     hi=9)])


# --- variadic -------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
@pytest.mark.parametrize("shapes", [[(3, 17)], [(3, 17), (17,)], [(2, 1, 5), (4, 1), (3, 1, 1, 1)],
                                    [(6,), (6,), (6,), (6,)]])
def test_variadic(op: str, shapes: list) -> None:
    check(op, [randn(*s) for s in shapes])


@pytest.mark.parametrize("op", ["Max", "Min"])
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int8, np.uint8, F64])
def test_max_min_types(op: str, dtype: type) -> None:
    lo = 0 if dtype == np.uint8 else -100
    check(op, [randint(4, 7, dtype=dtype, lo=lo, hi=100), randint(7, dtype=dtype, lo=lo, hi=100)])


@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
def test_variadic_special_values(op: str) -> None:
    a = np.array([INF, -INF, NAN, 1.0, -INF, 0.0, 2.0], F32)
    b = np.array([1.0, 1.0, 1.0, NAN, INF, -0.0, -INF], F32)
    check_exact(op, [a, b])
    check_exact(op, [b, a])


def test_max_constant_operand() -> None:
    check_exact("Max", [np.array([INF, -INF, NAN, 1.0, -2.0], F32), Init(np.array(0.0, F32))])
    check_exact("Min", [Init(np.array(0.0, F32)), np.array([INF, -INF, NAN, 1.0, -2.0], F32)])


# --- comparisons and logic ------------------------------------------------------------------

COMPARE = ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]


@pytest.mark.parametrize("op", COMPARE)
@pytest.mark.parametrize("dtype", [F32, np.int64, np.int32, np.uint8, np.int8, F64])
def test_compare(op: str, dtype: type) -> None:
    lo = 0 if dtype == np.uint8 else -3
    a = randint(3, 1, 8, dtype=dtype, lo=lo, hi=lo + 6)
    b = randint(5, 8, dtype=dtype, lo=lo, hi=lo + 6)
    check(op, [a, b])


@pytest.mark.parametrize("op", COMPARE)
def test_compare_special_values(op: str) -> None:
    a = np.array([NAN, INF, -INF, 0.0, 1.0, NAN], F32)
    b = np.array([NAN, INF, INF, -0.0, NAN, 1.0], F32)
    check(op, [a, b])


def test_equal_bool() -> None:
    check("Equal", [RNG.random((4, 6)) < 0.5, RNG.random((6,)) < 0.5])


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
@pytest.mark.parametrize("shapes", [((4, 9), (4, 9)), ((3, 1, 9), (5, 1)), ((), (7,))])
def test_logic(op: str, shapes: tuple) -> None:
    check(op, [RNG.random(shapes[0]) < 0.5, RNG.random(shapes[1]) < 0.5])


# --- Where ----------------------------------------------------------------------------------

@pytest.mark.parametrize("shapes", [((3, 8), (3, 8), (3, 8)), ((8,), (3, 1), ()),
                                    ((2, 1, 8), (5, 1), (1, 5, 8)), ((), (4,), (4,))])
@pytest.mark.parametrize("dtype", [F32, np.int64, np.bool_])
def test_where(shapes: tuple, dtype: type) -> None:
    cond = RNG.random(shapes[0]) < 0.5

    def vals(s: tuple) -> np.ndarray:
        return (RNG.random(s) < 0.5) if dtype == np.bool_ else randint(*s, dtype=dtype)

    check("Where", [cond, vals(shapes[1]), vals(shapes[2])])


def test_where_constant_branch() -> None:
    check_exact("Where", [RNG.random((4, 6)) < 0.5, randn(4, 6), Init(np.array(-INF, F32))])


# --- Identity, Dropout ----------------------------------------------------------------------

@pytest.mark.parametrize("x", [randn(3, 4), randint(5), np.array([True, False])],
                         ids=["f32", "i64", "bool"])
def test_identity(x: np.ndarray) -> None:
    check("Identity", [x])


def test_dropout_with_mask() -> None:
    check("Dropout", [randn(3, 7)], n_outputs=2)


def test_dropout_inference_inputs() -> None:
    check("Dropout", [randn(3, 7), Init(np.array(0.3, F32)), Init(np.array(False))],
          n_outputs=2)
    check("Dropout", [randn(3, 7), Init(np.array(0.3, F32))], n_outputs=1)


def test_dropout_training_rejected() -> None:
    model, _ = make_model("Dropout", [randn(3, 7), Init(np.array(0.3, F32)),
                                      Init(np.array(True))], n_outputs=2)
    with pytest.raises(AotcError, match="training mode"):
        compile_onnx(model)


# --- IsNaN, IsInf -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F64])
def test_isnan(dtype: type) -> None:
    x = np.concatenate([SPECIAL, randn(16)]).astype(dtype).reshape(1, 37)
    check("IsNaN", [x])


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("positive,negative", [(1, 1), (1, 0), (0, 1), (0, 0)])
def test_isinf(dtype: type, positive: int, negative: int) -> None:
    x = np.concatenate([SPECIAL, randn(4)]).astype(dtype).reshape(5, 1, 5)
    check("IsInf", [x], {"detect_positive": positive, "detect_negative": negative})



# --- Mod --------------------------------------------------------------------------------------

MOD_SPECIAL = np.array([0.0, -0.0, INF, -INF, NAN, 1.0, -1.0, 3.0, -3.0, 1e-45, 3.4e38, -7.5],
                       F32)


def _mod_operands(dtype: type, shape_a: tuple, shape_b: tuple) -> tuple[np.ndarray, np.ndarray]:
    if dtype == F32:  # magnitudes 1e-40 .. 1e38: quotients far beyond 2^24
        def wide(*s):
            return (RNG.standard_normal(s) * 10.0 ** RNG.integers(-40, 38, s)).astype(F32)
        return wide(*shape_a), wide(*shape_b)
    lo, hi = (0, 256) if dtype == np.uint8 else (-120, 120)
    a, b = randint(*shape_a, dtype=dtype, lo=lo, hi=hi), randint(*shape_b, dtype=dtype, lo=lo,
                                                                 hi=hi)
    b[b == 0] = 7  # onnxruntime fails on an integer division by zero
    return a, b


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int8, np.uint8, F32])
@pytest.mark.parametrize("fmod", [0, 1])
def test_mod(dtype: type, fmod: int) -> None:
    """Both signs, broadcast both ways over size-1 and odd axes; exact. Float fmod=0 is defined
    from opset 28 (onnxruntime refuses it before), so that case is built at opset 28."""
    a, b = _mod_operands(dtype, (1, 9), (5, 1))
    opset = 28 if dtype == F32 and not fmod else 21
    check_exact("Mod", [a, b], {"fmod": fmod}, rtol=0, atol=0, opset=opset)


@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_float_special_values(fmod: int) -> None:
    """Every pair of special values against numpy (C's fmod, Python's %), signed zeros too."""
    a = np.repeat(MOD_SPECIAL, len(MOD_SPECIAL)).reshape(12, 12)
    b = np.tile(MOD_SPECIAL, len(MOD_SPECIAL)).reshape(12, 12)
    model, feeds = make_model("Mod", [a, b], {"fmod": fmod})
    (got,) = run_program(compile_onnx(model), feeds)
    with np.errstate(all="ignore"):
        want = np.fmod(a, b) if fmod else np.mod(a, b)
    np.testing.assert_array_equal(got, want)
    number = ~np.isnan(want)
    np.testing.assert_array_equal(np.signbit(got[number]), np.signbit(want[number]))


@pytest.mark.parametrize("divisor", [3.0, -0.5, 1e-30, 6e37])
def test_mod_float_constant_divisor(divisor: float) -> None:
    a, _ = _mod_operands(F32, (4, 9), ())
    check_exact("Mod", [a, Init(np.array(divisor, F32))], {"fmod": 1}, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [np.int64, np.int8, np.uint8])
@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_int_by_zero_and_minus_one_does_not_trap(dtype: type, fmod: int) -> None:
    """Undefined in ONNX (onnxruntime fails on 0); 0 here, and INT_MIN rem -1 is 0."""
    lo = np.iinfo(dtype).min
    a = np.array([5, lo, 7, lo], dtype)
    b = np.array([0, 0, 1 if dtype == np.uint8 else -1, 3], dtype)
    model, feeds = make_model("Mod", [a, b], {"fmod": fmod})
    (got,) = run_program(compile_onnx(model), feeds)
    with np.errstate(all="ignore"):
        want = np.where(b == 0, 0, np.fmod(a, b) if fmod else np.mod(a, b))
    np.testing.assert_array_equal(got, want)


def test_mod_float64() -> None:
    """Compiled since float64 Mod is C's fmod (edge values: tests/test_ops_math_bitwise.py)."""
    check("Mod", [randn(3, 7, dtype=F64), randn(7, dtype=F64)], {"fmod": 1})


@pytest.mark.parametrize("dtype", [F32, np.int32])
def test_mod_inside_a_fused_region(dtype: type) -> None:
    """Add -> Mod -> Mul -> Add become one fused node; float Mod's reduction stages go with it."""
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    nodes = [oh.make_node("Add", ["x", "w"], ["s"]), oh.make_node("Mod", ["s", "w"], ["m"], fmod=1),
             oh.make_node("Mul", ["m", "m"], ["p"]), oh.make_node("Add", ["p", "s"], ["y"])]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", elem, [3, 5]),
                                       oh.make_tensor_value_info("w", elem, [5])],
                          [oh.make_tensor_value_info("y", elem, [3, 5])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    feeds = [(randn(3, 5) * 10).astype(dtype), (np.abs(randn(5)) + 1).astype(dtype)]
    (got,) = run_program(compile_onnx(model), feeds)
    assert_close(got, ort_outputs(model, feeds)[0])  # m * m + s may round once (an FMA)
