"""Reductions, Softmax/LogSoftmax and LayerNormalization against onnxruntime.

Reductions over the last axis, middle axes, several axes and all axes; keepdims; negative and
empty axes; noop_with_empty_axes; the opset-13 attribute form; rows of -inf, NaN, +inf and
signed zeros for Softmax.
"""

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from program_runner import check_node as run_node  # noqa: E402
from program_runner import compile_onnx, node_model, run_program  # noqa: E402

RNG = np.random.default_rng(1)


def rand(*shape, dtype=np.float32):
    if np.issubdtype(dtype, np.integer):
        return RNG.integers(-5, 6, size=shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def axes_input(axes):
    return None if axes is None else np.asarray(axes, dtype=np.int64)


REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp"]


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("axes,keepdims", [
    ([-1], 1),          # last axis
    ([1], 0),           # middle axis
    ([0, 2], 1),        # several axes
    (None, 0),          # all axes
])
def test_reduce(op, axes, keepdims):
    x = rand(3, 5, 20)
    if op == "ReduceProd":
        x = (0.5 + 0.5 * np.abs(x)).astype(np.float32)
    run_node(op, [x, axes_input(axes)], consts={1}, keepdims=keepdims)


def test_reduce_log_sum():
    x = (0.1 + np.abs(rand(4, 6, 9))).astype(np.float32)
    run_node("ReduceLogSum", [x, axes_input([1])], consts={1})


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
                                "ReduceMean"])
@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_reduce_int(op, dtype):
    x = rand(4, 3, 5, dtype=dtype)
    if op == "ReduceProd":
        # 20 factors in [-5, 5] can overflow int32, where ONNX leaves the result undefined
        # (onnxruntime saturates, aotc wraps): keep the product in range
        x = np.clip(x, -2, 2)
    run_node(op, [x, axes_input([0, -1])], consts={1}, keepdims=0)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_bool(op, keepdims):
    """A maximum of bools is "any", a minimum "all" (over an empty axis, which onnxruntime
    refuses, the node test test_reduce_max_empty_set_bool holds aotc to false)."""
    x = np.random.default_rng(3).random((4, 3, 5)) < 0.3
    run_node(op, [x, axes_input([1])], consts={1}, keepdims=keepdims)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax"])
def test_reduce_float64(op):
    run_node(op, [rand(6, 7, dtype=np.float64), axes_input([1])], consts={1})


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceMax"])
@pytest.mark.parametrize("noop", [0, 1])
def test_reduce_empty_axes(op, noop):
    run_node(op, [rand(3, 4), np.zeros(0, dtype=np.int64)], consts={1},
             noop_with_empty_axes=noop)


def test_reduce_long_rows():
    """A reduction whose inner spatial loop is long enough to vectorise and block (> 256)."""
    run_node("ReduceMean", [rand(2, 64, 300), axes_input([1])], consts={1})


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax", "ReduceL2"])
def test_reduce_attribute_form(op):
    """Opset 13: axes as an attribute; the frontend turns it into the constant input."""
    run_node(op, [rand(3, 4, 5)], opset=13, axes=[-2], keepdims=0)


def test_reduce_sum_opset13_input():
    run_node("ReduceSum", [rand(3, 4, 5), axes_input([2, 0])], consts={1}, opset=13)


def test_reduce_log_sum_exp_large_and_inf():
    x = rand(4, 8) * 100
    x[1, :] = -np.inf
    x[2, 3] = np.inf
    x[3, 1] = -np.inf
    run_node("ReduceLogSumExp", [x, axes_input([1])], consts={1})


# Softmax / LogSoftmax -------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape,axis", [
    ((4, 10), -1),
    ((2, 3, 33), 2),
    ((2, 7, 5), 1),      # middle axis
    ((6, 3, 4), 0),
    ((1, 300), 1),
    ((5,), 0),
])
def test_softmax(op, shape, axis):
    run_node(op, [rand(*shape) * 4], axis=axis)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_extremes(op):
    """Huge values (stability), rows with some -inf, a row of all -inf (NaN like onnxruntime)."""
    x = rand(5, 8) * 10
    x[0] *= 1000
    x[1, 2] = -np.inf
    x[2, :] = -np.inf
    x[3, ::2] = -np.inf
    run_node(op, [x])


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "ReduceLogSumExp"])
@pytest.mark.parametrize("cols", [40, 160])
def test_softmax_nan_zero_and_inf_rows(op, cols):
    """The row maximum is only a shift (the NaN-propagating, sign-blind `max_nan`): a NaN
    anywhere in a row (first, inside, last lane, everywhere) or a +inf makes that row's
    outputs NaN, and rows of signed zeros give onnxruntime's values."""
    x = rand(8, cols) * 3
    x[0, 0] = x[1, 17] = x[2, -1] = np.nan
    x[3] = np.nan
    x[4] = 0.0
    x[4, ::3] = -0.0
    x[5] = -0.0
    x[6, 5] = np.inf
    if op == "ReduceLogSumExp":
        run_node(op, [x, axes_input([1])], consts={1})
    else:
        run_node(op, [x])


def test_softmax_float64():
    run_node("Softmax", [rand(3, 9, dtype=np.float64)], axis=-1)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [1, -1])
def test_softmax_opset11(op, axis):
    """Before opset 13 Softmax works on the input flattened to 2-D at `axis`."""
    run_node(op, [rand(2, 3, 4)], opset=11, axis=axis)


# LayerNormalization ----------------------------------------------------------------------------

@pytest.mark.parametrize("shape,axis,scale_shape,bias", [
    ((4, 16), -1, (16,), True),
    ((2, 5, 32), -1, (32,), False),
    ((2, 3, 4, 5), 2, (4, 5), True),
    ((2, 3, 4, 5), -3, (3, 4, 5), True),
    ((3, 6), 0, (3, 6), True),
    ((2, 3, 8), -1, (1,), True),     # broadcast scale and bias
    ((2, 3, 300), -1, (300,), True),
])
def test_layer_norm(shape, axis, scale_shape, bias):
    x = rand(*shape) * 3 + 1
    b = rand(*scale_shape) if bias else None
    run_node("LayerNormalization", [x, rand(*scale_shape), b], consts={1, 2}, axis=axis)


@pytest.mark.parametrize("axis,norm_shape", [(-1, (6,)), (1, (3, 6))])
def test_layer_norm_stats(axis, norm_shape):
    """The optional Mean and InvStdDev outputs."""
    run_node("LayerNormalization", [rand(2, 3, 6), rand(*norm_shape), rand(*norm_shape)],
             n_out=3, axis=axis, epsilon=1e-3)


def test_layer_norm_float64():
    run_node("LayerNormalization", [rand(3, 7, dtype=np.float64), rand(7, dtype=np.float64),
                                    rand(7, dtype=np.float64)])


# CumSum -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("shape,axis", [
    ((3, 1, 7), -1),       # short axis: one masked reduction
    ((5, 1, 3), 0),
    ((2, 45, 3), 1),       # long axis (blocks of 7, the last one short)
    ((1, 49), -1),         # whole blocks
])
def test_cumsum(shape, axis, exclusive, reverse):
    run_node("CumSum", [rand(*shape), np.asarray(axis, dtype=np.int64)], consts={1},
             exclusive=exclusive, reverse=reverse)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.float64])
@pytest.mark.parametrize("n", [9, 40])
def test_cumsum_types(dtype, n):
    run_node("CumSum", [rand(3, n, dtype=dtype), np.asarray([1], dtype=np.int32)], consts={1},
             exclusive=1, reverse=1)


def _cumprod_reference(x: np.ndarray, axis: int, exclusive: int, reverse: int) -> np.ndarray:
    x = np.flip(x, axis) if reverse else x
    out = np.cumprod(x, axis=axis, dtype=x.dtype)
    if exclusive:
        ones = np.ones_like(np.take(out, [0], axis=axis))
        out = np.concatenate([ones, np.delete(out, -1, axis=axis)], axis=axis)
    return np.flip(out, axis) if reverse else out


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("shape,axis,dtype", [
    ((3, 1, 7), -1, np.float32),   # short axis: one masked product
    ((2, 45, 3), 1, np.float32),   # long axis (blocks of 7, the last one short)
    ((4, 40), 1, np.int64),
    ((3, 20), 0, np.float64),
])
def test_cumprod(shape, axis, dtype, exclusive, reverse):
    """CumProd (opset 26; onnxruntime has no kernel for it) against numpy: values near 1 keep
    the products finite; a zero and a NaN in a row reach the outputs after them."""
    rng = np.random.default_rng(3)
    x = (rng.random(shape) + 0.5).astype(dtype) if dtype != np.int64 else \
        rng.integers(-2, 3, size=shape).astype(dtype)
    if dtype == np.float32 and shape[axis] > 10:
        x[0, 0, 0] = 0.0
        x[1, 3, 0] = np.nan
    model, feeds = node_model("CumProd", [x, np.asarray(axis, dtype=np.int64)], consts=(1,),
                              opset=26, exclusive=exclusive, reverse=reverse)
    got = run_program(compile_onnx(model), feeds)[0]
    np.testing.assert_allclose(got, _cumprod_reference(x, axis % len(shape), exclusive, reverse),
                               rtol=1e-5)
