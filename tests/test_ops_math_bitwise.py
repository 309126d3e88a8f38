"""Tan and the inverse trigonometric and hyperbolic operators, the bitwise operators and
BitShift against onnxruntime (numpy where onnxruntime has no kernel for the type).

The inverse functions are correctly rounded in float32 but for rare ties (vecmath_inverse.py),
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


# --- Tan, Asin, Acos, Atan, Asinh, Acosh, Atanh ------------------------------------------------

# each operator's domain (random inputs over it) and the values at and past its edges
DOMAIN = {"Tan": (-4.0, 4.0), "Asin": (-1.0, 1.0), "Acos": (-1.0, 1.0), "Atan": (-50.0, 50.0),
          "Asinh": (-50.0, 50.0), "Acosh": (1.0, 60.0), "Atanh": (-1.0, 1.0)}
EDGES = np.array([0.0, -0.0, 1.0, -1.0, 1.0000001, -1.0000001, 0.99999994, -0.99999994, 2.0,
                  -2.0, INF, -INF, NAN, 1e-30, -1e-30, 1e-45, 3e38, -3e38, 1e8, 1.5707964,
                  -1.5707964, 0.5, 1e-4], F32)
NP_REF = {"Tan": np.tan, "Asin": np.arcsin, "Acos": np.arccos, "Atan": np.arctan,
          "Asinh": np.arcsinh, "Acosh": np.arccosh, "Atanh": np.arctanh}


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
