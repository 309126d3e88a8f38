"""Tan, Sinh, Cosh, the inverse trigonometric and hyperbolic operators, the bitwise operators,
BitShift and float64 Mod against onnxruntime (numpy where onnxruntime has no kernel).

Sinh, Cosh and the inverse functions are correctly rounded in float32 but for rare ties,
onnxruntime's within 4.4 ulps, so float32 results must be within an ulp of float64 numpy and 5
of onnxruntime, with NaN, ±inf and signed zeros in the same places; float16 within one unit of
its last place.
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from program_runner import compile_onnx, node_model, ort_outputs, run_program  # noqa: E402

from aotc.errors import AotcError  # noqa: E402

RNG = np.random.default_rng(17)
F16, F32, F64 = np.float16, np.float32, np.float64
INF, NAN = np.inf, np.nan
INTS = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]
UNSIGNED = [np.uint8, np.uint16, np.uint32, np.uint64]


def compiled(op: str, inputs: list[np.ndarray], consts=(), **attrs) -> tuple[list, list]:
    """aotc's and onnxruntime's outputs of a one-node model."""
    model, feeds = node_model(op, inputs, consts, **attrs)
    return run_program(compile_onnx(model), feeds), ort_outputs(model, feeds)


def assert_ulps(got: np.ndarray, want: np.ndarray, max_ulp: float) -> None:
    """Equal within `max_ulp` units of the last place of `want`'s type; NaN, infinities and
    the signs of zeros in the same places."""
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    fin = np.isfinite(want)
    np.testing.assert_array_equal(got[~fin & ~np.isnan(want)], want[~fin & ~np.isnan(want)])
    zero = want == 0
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]))
    ulp = np.spacing(np.abs(want[fin])).astype(F64)
    err = np.abs(got[fin].astype(F64) - want[fin].astype(F64)) / ulp
    assert err.size == 0 or err.max() <= max_ulp, f"{err.max():.2f} ulp at {want[fin][err.argmax()]}"


# --- Tan, Sinh, Cosh, Asin, Acos, Atan, Asinh, Acosh, Atanh ------------------------------------

# each operator's domain (random inputs over it) and the values at and past its edges
DOMAIN = {"Tan": (-4.0, 4.0), "Asin": (-1.0, 1.0), "Acos": (-1.0, 1.0), "Atan": (-50.0, 50.0),
          "Asinh": (-50.0, 50.0), "Acosh": (1.0, 60.0), "Atanh": (-1.0, 1.0),
          "Sinh": (-95.0, 95.0), "Cosh": (-95.0, 95.0)}
EDGES = np.array([0.0, -0.0, 1.0, -1.0, 1.0000001, -1.0000001, 0.99999994, -0.99999994, 2.0,
                  -2.0, INF, -INF, NAN, 1e-30, -1e-30, 1e-45, 3e38, -3e38, 1e8, 1.5707964,
                  -1.5707964, 0.5, 1e-4], F32)
NP_REF = {"Tan": np.tan, "Asin": np.arcsin, "Acos": np.arccos, "Atan": np.arctan,
          "Asinh": np.arcsinh, "Acosh": np.arccosh, "Atanh": np.arctanh, "Sinh": np.sinh,
          "Cosh": np.cosh}


def _inputs(op: str, n: int, dtype: type) -> np.ndarray:
    lo, hi = DOMAIN[op]
    x = RNG.uniform(lo, hi, n)
    x = np.concatenate([x, EDGES, np.exp2(RNG.uniform(-60, 60, 64)) * RNG.choice([-1, 1], 64)])
    with np.errstate(over="ignore"):  # float16: the large edge values become ±inf
        return x.astype(dtype)


@pytest.mark.parametrize("op", sorted(DOMAIN))
def test_math_float32(op: str) -> None:
    """Special values where onnxruntime has them; within an ulp of float64 numpy (aotc's
    inverse functions are correctly rounded, onnxruntime's up to 4.4 ulps off)."""
    x = _inputs(op, 4001, F32).reshape(-1, 7)  # rows of 7: vector bodies and tails
    got, want = compiled(op, [x])
    assert_ulps(got[0], want[0], 5.0)
    with np.errstate(all="ignore"):
        exact = NP_REF[op](x.astype(F64)).astype(F32)
    assert_ulps(got[0], exact, 1.0)


@pytest.mark.parametrize("op", sorted(DOMAIN))
def test_math_float16(op: str) -> None:
    x = _inputs(op, 1000, F16)
    got, want = compiled(op, [x])
    assert_ulps(got[0], want[0], 1.0)


@pytest.mark.parametrize("op", sorted(DOMAIN))
def test_math_float64_as_numpy(op: str) -> None:
    """onnxruntime has no float64 kernels for these; aotc calls libm's double functions."""
    x = _inputs(op, 500, F64)
    model, feeds = node_model(op, [x])
    got = run_program(compile_onnx(model), feeds)[0]
    with np.errstate(all="ignore"):
        want = NP_REF[op](x)
    assert_ulps(got, want, 1.0)


def test_math_rejects_integers() -> None:
    model, feeds = node_model("Asin", [np.arange(3, dtype=np.int32)])
    with pytest.raises(AotcError, match="Asin"):
        compile_onnx(model)


# --- BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot --------------------------------------------

def _ints(dtype: type, *shape: int) -> np.ndarray:
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    flat = x.reshape(-1)
    edges = np.array([info.min, info.max, 0, 1], dtype=dtype)
    flat[: min(flat.size, edges.size)] = edges[: flat.size]
    return x


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: d.__name__)
@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
def test_bitwise_binary(op: str, dtype: type) -> None:
    a, b = _ints(dtype, 3, 4, 9), _ints(dtype, 4, 1)  # broadcast
    got, want = compiled(op, [a, b])
    np.testing.assert_array_equal(got[0], want[0])
    assert got[0].dtype == dtype


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseXor"])
def test_bitwise_binary_constant(op: str) -> None:
    a, b = _ints(np.int32, 5, 6), np.array([0x0F0F0F0F], np.int32)
    got, want = compiled(op, [a, b], consts=(1,))
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: d.__name__)
def test_bitwise_not(dtype: type) -> None:
    got, want = compiled("BitwiseNot", [_ints(dtype, 2, 3, 11)])
    np.testing.assert_array_equal(got[0], want[0])


# --- BitShift ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", UNSIGNED, ids=lambda d: d.__name__)
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift_unsigned(direction: str, dtype: type) -> None:
    """Counts past the width included (onnxruntime: 0)."""
    bits = 8 * np.dtype(dtype).itemsize
    x = _ints(dtype, 4, 40)
    y = RNG.integers(0, bits + 4, size=(40,)).astype(dtype)
    y[:4] = [0, bits - 1, bits, np.iinfo(dtype).max]
    got, want = compiled("BitShift", [x, y], direction=direction)
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("count", [0, 3, 7, 8, 200])
def test_bitshift_constant_count(count: int) -> None:
    x = _ints(np.uint8, 6, 5)
    got, want = compiled("BitShift", [x, np.array(count, np.uint8)], consts=(1,), direction="LEFT")
    np.testing.assert_array_equal(got[0], want[0])


def _shift_reference(x: np.ndarray, y: np.ndarray, left: bool) -> np.ndarray:
    """Opset 28's definition, one element at a time in Python integers."""
    bits = 8 * x.dtype.itemsize
    out = []
    for a, n in zip(x.tolist(), y.tolist(), strict=True):
        if n < 0 or n >= bits:
            out.append(-1 if (not left and a < 0) else 0)
        elif left:
            v = (a << n) & ((1 << bits) - 1)
            out.append(v - (1 << bits) if v >= 1 << (bits - 1) else v)
        else:
            out.append(a >> n)
    return np.array(out, dtype=x.dtype)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64],
                         ids=lambda d: d.__name__)
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift_signed_definition(direction: str, dtype: type) -> None:
    """Signed types (opset 28, which onnxruntime does not run for them): a whole opset-28
    model against a Python model of the spec: arithmetic right shifts, negative counts and
    counts past the width give the sign fill."""
    bits = 8 * np.dtype(dtype).itemsize
    x = _ints(dtype, 64)
    y = RNG.integers(-bits - 2, bits + 3, size=64).astype(dtype)
    y[:6] = [-1, 0, bits - 1, bits, bits + 1, -bits]
    x[:6] = [-8, -1, 1, -8, 5, -3]
    model, feeds = node_model("BitShift", [x, y], opset=28, direction=direction)
    got = run_program(compile_onnx(model), feeds)[0]
    np.testing.assert_array_equal(got, _shift_reference(x, y, direction == "LEFT"))


def test_bitshift_bad_direction() -> None:
    model, _ = node_model("BitShift", [np.ones(3, np.uint8), np.ones(3, np.uint8)],
                          direction="UP")
    with pytest.raises(AotcError, match="direction"):
        compile_onnx(model)


# --- Mod of float64 ----------------------------------------------------------------------------

MOD_EDGES = np.array([0.0, -0.0, 1.0, -1.0, 3.5, -3.5, 1e308, -1e308, 5e-324, -5e-324, 1e-300,
                      2.0**53 + 2, 0.1, -0.7, INF, -INF, NAN, 7.0, -7.0, 1e-310], F64)


@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_float64(fmod: int) -> None:
    """Every pair of edge values (infinities, zeros of both signs, denormals, exponents 2000
    apart) and random ones: equal to onnxruntime bit for bit."""
    a, b = (v.ravel() for v in np.meshgrid(MOD_EDGES, MOD_EDGES))
    x = np.concatenate([a, RNG.standard_normal(300) * 1e3])
    y = np.concatenate([b, RNG.standard_normal(300) * 7])
    with np.errstate(all="ignore"):
        got, want = compiled("Mod", [x, y], fmod=fmod, opset=28)  # ort: float fmod=0 from 28
    np.testing.assert_array_equal(got[0], want[0])
    zero = want[0] == 0
    np.testing.assert_array_equal(np.signbit(got[0][zero]), np.signbit(want[0][zero]))


def test_mod_float64_constant_divisor() -> None:
    x = RNG.standard_normal((4, 33)) * 1e6
    got, want = compiled("Mod", [x, np.array(-0.3)], consts=(1,), fmod=0, opset=28)
    np.testing.assert_array_equal(got[0], want[0])


# --- Pow of an integer base by an exponent known at run time -----------------------------------

POW_BASES = np.array([-7, -3, -2, -1, 0, 1, 2, 3, 5, 10, 46340, -46341, 1 << 20], np.int64)
POW_EXPONENTS = [np.array([0, 1, 2, 3, 5, -1, -2, 4], dtype) for dtype in (np.int32, np.int64)]
POW_EXPONENTS.append(np.array([0.0, 0.5, 1.0, 2.0, 2.5, -1.0, 1.5, 3.0], F32))


@pytest.mark.parametrize("base_type", [np.int32, np.int64], ids=lambda d: d.__name__)
@pytest.mark.parametrize("expo", POW_EXPONENTS, ids=lambda e: e.dtype.name)
def test_pow_integer_base_runtime_exponent(base_type: type, expo: np.ndarray) -> None:
    """Negative and fractional exponents truncate toward zero (2^-1 = 0, 5^1.5 = 11), as
    onnxruntime's float64 pow; results stay inside the type (out of range is undefined)."""
    x = POW_BASES[:, None].astype(base_type)
    y = expo[None, :]
    with np.errstate(all="ignore"):
        wide = np.power(x.astype(F64), y.astype(F64))
    info = np.iinfo(base_type)
    keep = np.all(np.isfinite(wide) & (wide >= info.min) & (wide <= info.max), axis=1)
    got, want = compiled("Pow", [x[keep], y.astype(expo.dtype)])
    np.testing.assert_array_equal(got[0], want[0])
    assert got[0].dtype == base_type


def test_pow_integer_base_constant_negative_exponent() -> None:
    x = np.arange(-4, 5, dtype=np.int32)
    x = x[x != 0]
    got, want = compiled("Pow", [x, np.array(-1, np.int32)], consts=(1,))
    np.testing.assert_array_equal(got[0], want[0])
