"""Operator parameters given as graph inputs (read at run time) against onnxruntime.

Trilu's k and CumSum/CumProd's axis do not change the output's shape, so a model that computes
them is compiled with the value left to run time. Each model is compiled once and run with
several values of the parameter: one program must give every value's result, which a value
folded in at compile time could not.
"""

import pathlib
import sys

import numpy as np
import onnx
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from program_runner import (  # noqa: E402
    assert_close,
    compile_onnx,
    node_model,
    ort_outputs,
    run_program,
)

RNG = np.random.default_rng(7)


def rand(*shape: int, dtype=np.float32) -> np.ndarray:
    if np.issubdtype(dtype, np.integer):
        return RNG.integers(-3, 4, size=shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def scalar(value: int, dtype=np.int64) -> np.ndarray:
    """A 0-d array (onnxruntime takes no numpy scalars as feeds)."""
    return np.array(value, dtype=dtype)


def runtime_parameter_model(op: str, x: np.ndarray, param: np.ndarray, opset: int, **attrs):
    """A one-node model with `param` as input 1, a graph input (not an initializer)."""
    model, _ = node_model(op, [x, param], opset=opset, **attrs)
    assert [i.name for i in model.graph.input] == ["x0", "x1"]
    assert not model.graph.initializer
    return model


def check_values(model: onnx.ModelProto, x: np.ndarray, params: list[np.ndarray],
                 tol: float = 1e-4) -> None:
    """One compiled program run with each parameter value, each compared with onnxruntime."""
    program = compile_onnx(model)
    assert len(program.inputs) == 2  # the parameter stayed an input of the program
    for p in params:
        got = run_program(program, [x, p])[0]
        assert_close(got, ort_outputs(model, [x, p])[0], tol)


# Trilu ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("upper", [1, 0])
@pytest.mark.parametrize("shape,dtype", [
    ((5, 5), np.float32),         # square
    ((4, 7), np.float32),         # wide
    ((7, 3), np.int64),           # tall
    ((2, 3, 4, 6), np.float32),   # a batch of matrices
    ((1, 6), np.int32),           # one row
])
def test_trilu_runtime_k(shape, dtype, upper):
    x = rand(*shape, dtype=dtype)
    model = runtime_parameter_model("Trilu", x, scalar(0), opset=14, upper=upper)
    # negative, zero, positive, and past either corner (all kept or all zero)
    ks = [scalar(k) for k in (-2, -1, 0, 1, 3, -9, 9)]
    check_values(model, x, ks)


def test_trilu_runtime_k_one_element_tensor():
    x = rand(4, 5)
    model = runtime_parameter_model("Trilu", x, np.array([0], dtype=np.int64), opset=14,
                                    upper=0)
    check_values(model, x, [np.array([k], dtype=np.int64) for k in (-1, 0, 2)])


# CumSum and CumProd -----------------------------------------------------------------------------

CUMULATIVE_OPSETS = {"CumSum": 14, "CumProd": 26}


def cumulative_input(op: str, shape: tuple[int, ...]) -> np.ndarray:
    """Values near 1 for products (they stay finite over long axes); any for sums."""
    if op == "CumProd":
        return (RNG.random(shape) * 0.2 + 0.9).astype(np.float32)
    return rand(*shape)


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("op", ["CumSum", "CumProd"])
def test_cumulative_runtime_axis(op, exclusive, reverse):
    """Every axis of a 3-D input, counted from the start and from the end."""
    x = cumulative_input(op, (3, 4, 5))
    model = runtime_parameter_model(op, x, scalar(0), CUMULATIVE_OPSETS[op],
                                    exclusive=exclusive, reverse=reverse)
    check_values(model, x, [scalar(a) for a in (0, 1, 2, -1, -2, -3)])


@pytest.mark.parametrize("axis_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("op", ["CumSum", "CumProd"])
def test_cumulative_runtime_axis_dtypes(op, axis_dtype):
    x = cumulative_input(op, (2, 6, 3))
    model = runtime_parameter_model(op, x, np.array(0, dtype=axis_dtype), CUMULATIVE_OPSETS[op],
                                    exclusive=1)
    check_values(model, x, [np.array(a, dtype=axis_dtype) for a in (1, -1, 0)])


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 1)])
@pytest.mark.parametrize("op", ["CumSum", "CumProd"])
def test_cumulative_runtime_axis_blocked(op, exclusive, reverse):
    """An axis longer than 16 (the blocked variant: blocks of 7, the last one short) beside
    short ones; the 1-element axis tensor form."""
    x = cumulative_input(op, (3, 45, 2))
    model = runtime_parameter_model(op, x, np.array([0], dtype=np.int64),
                                    CUMULATIVE_OPSETS[op], exclusive=exclusive,
                                    reverse=reverse)
    check_values(model, x, [np.array([a], dtype=np.int64) for a in (1, -2, 0, 2)])


def test_cumsum_runtime_axis_rank1():
    x = rand(20)
    model = runtime_parameter_model("CumSum", x, scalar(0), 14, reverse=1)
    check_values(model, x, [scalar(0), scalar(-1)])


def test_cumsum_runtime_axis_out_of_range_stays_in_bounds():
    """ONNX leaves an axis outside [-rank, rank) undefined; the program must still give some
    axis's result (it clamps), never read outside the input."""
    x = rand(3, 4, 5)
    model = runtime_parameter_model("CumSum", x, scalar(0), 14)
    program = compile_onnx(model)
    per_axis = [np.cumsum(x, axis=a, dtype=np.float32) for a in range(3)]
    for axis in (3, 100, -4, -100, np.iinfo(np.int64).max, np.iinfo(np.int64).min):
        got = run_program(program, [x, scalar(axis)])[0]
        assert any(np.allclose(got, want, atol=1e-4) for want in per_axis), axis
