"""Hardmax, LpNormalization, LpPool, EyeLike and ReverseSequence against onnxruntime: axes and
attribute forms, ties, rows of zeros, NaN and infinities, half-precision storage, and
ReverseSequence's lengths given as a graph input (run-time values)."""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from onnx.reference import ReferenceEvaluator  # noqa: E402
from program_runner import compile_onnx, node_model, ort_outputs, run_program  # noqa: E402

from aotc.errors import AotcError  # noqa: E402

RNG = np.random.default_rng(5)
F16, F32, F64 = np.float16, np.float32, np.float64
INF, NAN = np.inf, np.nan


def outputs(op: str, inputs: list[np.ndarray], consts=(), **attrs) -> tuple[np.ndarray, ...]:
    """aotc's and onnxruntime's first output of a one-node model."""
    model, feeds = node_model(op, inputs, consts, **attrs)
    return run_program(compile_onnx(model), feeds)[0], ort_outputs(model, feeds)[0]


def assert_same(got: np.ndarray, want: np.ndarray, rtol: float = 1e-6) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got.astype(F64), want.astype(F64), rtol=rtol, atol=0,
                               equal_nan=True)


# --- Hardmax -----------------------------------------------------------------------------------

@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_hardmax_axes_and_ties(axis: int) -> None:
    x = RNG.integers(-3, 4, size=(4, 5, 6)).astype(F32)  # small integers: many ties
    got, want = outputs("Hardmax", [x], axis=axis)
    np.testing.assert_array_equal(got, want)


def test_hardmax_special_rows() -> None:
    """-inf rows pick the first, ±0 tie, inf is a maximum."""
    x = np.array([[1, 3, 3, 2], [-INF] * 4, [0.0, -0.0, 0.0, -1], [-0.0, 0.0, -1, -2],
                  [INF, 1, INF, 0], [-INF, -3, -INF, -1e38]], F32)
    got, want = outputs("Hardmax", [x])
    np.testing.assert_array_equal(got, want)


def test_hardmax_nan_rows_as_the_onnx_reference() -> None:
    """A NaN is the maximum (numpy's argmax, ONNX's reference); onnxruntime has no one rule."""
    x = RNG.standard_normal((40, 9)).astype(F32)
    x[RNG.random(x.shape) < 0.15] = NAN
    x[0], x[1] = NAN, [1, NAN, 0, 0, 5, NAN, 1, 1, 1]
    model, feeds = node_model("Hardmax", [x])
    got = run_program(compile_onnx(model), feeds)[0]
    (want,) = ReferenceEvaluator(model).run(None, {"x0": x})
    np.testing.assert_array_equal(got, want)


def test_hardmax_float16_and_long_rows() -> None:
    x = RNG.standard_normal((3, 1000)).astype(F16)
    got, want = outputs("Hardmax", [x])
    np.testing.assert_array_equal(got, want)


def test_hardmax_bad_axis() -> None:
    model, _ = node_model("Hardmax", [np.ones((2, 3), F32)], axis=1)
    model.graph.node[0].attribute[0].i = 5  # past the rank: only aotc checks it
    with pytest.raises(AotcError, match="axis"):
        compile_onnx(model)


# --- LpNormalization ---------------------------------------------------------------------------

@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_lp_normalization(p: int, axis: int) -> None:
    x = RNG.standard_normal((4, 7, 9)).astype(F32)
    got, want = outputs("LpNormalization", [x], axis=axis, p=p)
    assert_same(got, want, 2e-6)


@pytest.mark.parametrize("p", [1, 2])
def test_lp_normalization_special_rows(p: int) -> None:
    """Zero norm gives zeros (also an underflowing sum of squares), inf gives NaN beside 0."""
    x = np.array([[0, 0, 0, 0], [3, 4, 0, 0], [INF, 1, 0, 0], [NAN, 1, 1, 1],
                  [1e-30, 1e-30, 0, 0], [-0.0, 0, 0, 0], [-INF, INF, 1, 2]], F32)
    got, want = outputs("LpNormalization", [x], p=p)
    assert_same(got, want)


@pytest.mark.parametrize("dtype", [F64, F16])
def test_lp_normalization_types(dtype: type) -> None:
    x = RNG.standard_normal((5, 6)).astype(dtype)
    got, want = outputs("LpNormalization", [x], axis=0)
    assert_same(got, want, 1e-3 if dtype == F16 else 1e-12)


def test_lp_normalization_bad_p() -> None:
    model, _ = node_model("LpNormalization", [np.ones((2, 3), F32)], p=3)
    with pytest.raises(AotcError, match="p must be 1 or 2"):
        compile_onnx(model)


# --- LpPool ------------------------------------------------------------------------------------

LP_POOL_FORMS = [
    ((1, 3, 11), {"kernel_shape": [3]}),
    ((1, 2, 9, 8), {"kernel_shape": [3, 2], "strides": [2, 1]}),
    ((2, 3, 7, 7), {"kernel_shape": [3, 3], "pads": [1, 0, 2, 1]}),
    ((1, 2, 8, 9), {"kernel_shape": [2, 3], "dilations": [2, 1]}),
    ((1, 2, 7, 6), {"kernel_shape": [3, 2], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 7, 6), {"kernel_shape": [3, 2], "strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 1, 8, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 2, 4, 5, 6), {"kernel_shape": [2, 2, 3]}),
]


@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize(("shape", "attrs"), LP_POOL_FORMS)
def test_lp_pool(shape: tuple[int, ...], attrs: dict, p: int) -> None:
    x = RNG.standard_normal(shape).astype(F32)
    got, want = outputs("LpPool", [x], p=p, **attrs)
    assert_same(got, want, 2e-6)


def test_lp_pool_specials_and_float16() -> None:
    x = RNG.standard_normal((1, 2, 6, 6)).astype(F32)
    x[0, 0, 0, 0], x[0, 0, 3, 3], x[0, 1, 5, 5] = INF, NAN, -INF
    got, want = outputs("LpPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    assert_same(got, want, 2e-6)
    h = RNG.standard_normal((1, 3, 8, 8)).astype(F16)
    got, want = outputs("LpPool", [h], kernel_shape=[3, 3], p=3)
    assert_same(got, want, 2e-3)


def test_lp_pool_bad_p() -> None:
    model, _ = node_model("LpPool", [np.ones((1, 1, 4, 4), F32)], kernel_shape=[2, 2], p=0)
    with pytest.raises(AotcError, match="p must be"):
        compile_onnx(model)


# --- EyeLike -----------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [0, 1, -2, 4, -7])
@pytest.mark.parametrize("shape", [(4, 4), (3, 6), (6, 2)])
def test_eye_like(shape: tuple[int, int], k: int) -> None:
    got, want = outputs("EyeLike", [np.zeros(shape, F32)], k=k)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [1, 6, 7, 11])  # float, int32, int64, double
def test_eye_like_dtype(dtype: int) -> None:
    got, want = outputs("EyeLike", [RNG.integers(0, 5, (3, 5)).astype(np.int32)], dtype=dtype,
                        k=1)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_eye_like_types_onnxruntime_lacks() -> None:
    """float16, uint8 and bool outputs (onnxruntime has no kernels for them)."""
    x = np.zeros((3, 4), np.int32)
    for dtype, np_type in ((10, F16), (2, np.uint8), (9, np.bool_)):
        model, feeds = node_model("EyeLike", [x], dtype=dtype, k=-1)
        got = run_program(compile_onnx(model), feeds)[0]
        np.testing.assert_array_equal(got, np.eye(3, 4, k=-1, dtype=np_type))
        assert got.dtype == np_type


def test_eye_like_rank() -> None:
    model, _ = node_model("EyeLike", [np.zeros((2, 2), F32)])
    model.graph.input[0].type.tensor_type.shape.dim.add().dim_value = 2  # rank 3
    with pytest.raises(AotcError):
        compile_onnx(model)


# --- ReverseSequence ---------------------------------------------------------------------------

@pytest.mark.parametrize(("batch_axis", "time_axis"), [(0, 1), (1, 0)])
@pytest.mark.parametrize("as_input", [True, False], ids=["runtime_lens", "constant_lens"])
def test_reverse_sequence(batch_axis: int, time_axis: int, as_input: bool) -> None:
    steps, batch = 6, 5
    shape = [0, 0, 3]
    shape[batch_axis], shape[time_axis] = batch, steps
    x = RNG.standard_normal(shape).astype(F32)
    lens = np.array([0, 1, 6, 3, 5], np.int64)
    got, want = outputs("ReverseSequence", [x, lens], consts=() if as_input else (1,),
                        batch_axis=batch_axis, time_axis=time_axis)
    np.testing.assert_array_equal(got, want)


def test_reverse_sequence_lengths_change_between_runs() -> None:
    """One compiled program, lengths fed at run time: each run reverses its own lengths."""
    x = RNG.integers(-100, 100, size=(7, 4)).astype(np.int32)
    model, feeds = node_model("ReverseSequence", [x, np.zeros(4, np.int64)])
    program = compile_onnx(model)
    for lens in ([7, 0, 1, 2], [3, 3, 3, 3], [0, 7, 6, 5]):
        feeds = [x, np.array(lens, np.int64)]
        np.testing.assert_array_equal(run_program(program, feeds)[0],
                                      ort_outputs(model, feeds)[0])


def test_reverse_sequence_float16() -> None:
    x = RNG.standard_normal((4, 3, 2)).astype(F16)
    got, want = outputs("ReverseSequence", [x, np.array([4, 2, 1], np.int64)],
                        batch_axis=1, time_axis=0)
    np.testing.assert_array_equal(got, want)


def test_reverse_sequence_out_of_range_lengths_stay_in_bounds() -> None:
    """onnxruntime refuses lengths past T or below 0 at run time; aotc clamps them."""
    x = np.arange(12, dtype=F32).reshape(4, 3)
    model, _ = node_model("ReverseSequence", [x, np.zeros(3, np.int64)])
    got = run_program(compile_onnx(model), [x, np.array([99, -5, 2], np.int64)])[0]
    want = x.copy()
    want[:, 0] = x[::-1, 0]  # 99 -> all 4 steps
    want[:2, 2] = x[1::-1, 2]  # -5 -> 0: unchanged column 1
    np.testing.assert_array_equal(got, want)


def test_reverse_sequence_bad_axes() -> None:
    model, _ = node_model("ReverseSequence", [np.zeros((3, 2), F32), np.ones(2, np.int64)],
                          batch_axis=1, time_axis=0)
    model.graph.node[0].attribute[0].i = 0  # both 0
    with pytest.raises(AotcError):
        compile_onnx(model)
