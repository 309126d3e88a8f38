"""MatMul and Gemm against onnxruntime: 1-D operands, batches, broadcasting, transposes, C."""

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from program_runner import check_node as run_node  # noqa: E402

RNG = np.random.default_rng(0)


def rand(*shape, dtype=np.float32):
    if np.issubdtype(dtype, np.integer):
        return RNG.integers(-5, 6, size=shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("a_shape,b_shape", [
    ((3, 4), (4, 5)),
    ((1, 1), (1, 1)),
    ((7, 33), (33, 70)),           # vector loop with a remainder
    ((5, 300), (300, 260)),        # j blocked (> 256)
    ((4,), (4, 6)),                # 1-D A
    ((6, 4), (4,)),                # 1-D B (matrix-vector)
    ((4,), (4,)),                  # dot product → scalar
    ((2, 3, 4), (4, 5)),           # batched A, shared B
    ((3, 4), (2, 4, 5)),           # shared A, batched B
    ((2, 1, 3, 4), (5, 4, 6)),     # broadcast batch dims
    ((2, 3, 4), (2, 4, 1)),
    ((3,), (2, 3, 4)),             # 1-D A against a batch
    ((2, 5, 3), (3,)),             # batch against 1-D B
])
def test_matmul_shapes(a_shape, b_shape):
    run_node("MatMul", [rand(*a_shape), rand(*b_shape)])


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.int32])
def test_matmul_dtypes(dtype):
    run_node("MatMul", [rand(2, 3, 5, dtype=dtype), rand(5, 9, dtype=dtype)])


def test_matmul_constant_weight():
    run_node("MatMul", [rand(8, 16), rand(16, 32)], consts={1})


@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("alpha,beta,c_shape", [
    (1.0, 1.0, None),
    (0.5, 1.0, None),
    (1.0, 1.0, (6,)),
    (2.0, -0.5, (4, 6)),
    (1.0, 3.0, (4, 1)),
    (0.25, 1.0, (1, 6)),
    (1.0, 2.0, ()),
    (1.5, 0.0, (4, 6)),            # beta 0: C ignored
])
def test_gemm(trans_a, trans_b, alpha, beta, c_shape):
    m, k, n = 4, 5, 6
    a = rand(k, m) if trans_a else rand(m, k)
    b = rand(n, k) if trans_b else rand(k, n)
    c = None if c_shape is None else rand(*c_shape)
    run_node("Gemm", [a, b, c], alpha=alpha, beta=beta, transA=trans_a, transB=trans_b)


def test_gemm_large_constant_weights():
    """A fully connected layer: weights as initializers, transB=1, bias of shape (N,)."""
    run_node("Gemm", [rand(3, 300), rand(270, 300), rand(270)], consts={1, 2}, transB=1)


def test_gemm_float64():
    run_node("Gemm", [rand(3, 4, dtype=np.float64), rand(4, 5, dtype=np.float64),
                      rand(3, 5, dtype=np.float64)], alpha=0.3, beta=0.7)
