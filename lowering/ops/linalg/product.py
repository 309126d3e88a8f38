"""The one matrix-product compute both MatMul and Gemm build on: `C[.., i, j] = sum_k A * B`.

Operands are read through index functions, so transposes and broadcast batch dimensions are
index remaps, never copies. The output's innermost axis is `j`, which is the contiguous axis of
B in the common (untransposed) case: the default schedule then runs the blocked i-k-j order with
`j` vectorised.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from lowering import te

# (output index, reduction variable k) -> the operand element to multiply
Operand = Callable[[Sequence[te.Expr], te.Expr], te.Expr]


def product(
    out_shape: Sequence[int], k_extent: int, a: Operand, b: Operand, name: str = "matmul"
) -> te.Tensor:
    """`out[idx] = sum_k a(idx, k) * b(idx, k)`."""
    k = te.reduce_axis(k_extent, "k")

    def body(*idx: te.Expr) -> te.Expr:
        return te.reduce("sum", a(idx, k.var) * b(idx, k.var), [k])

    return te.compute(tuple(out_shape), body, name=name)


def matrix_product(a: te.Tensor, b: te.Tensor, name: str = "matmul") -> te.Tensor:
    """The plain 2-D `a @ b` (calibration, benchmarks and tests build GEMMs with it)."""
    return product((a.shape[0], b.shape[1]), a.shape[1], lambda idx, k: a[idx[0], k],
                   lambda idx, k: b[k, idx[1]], name)


def batch_index(
    operand_batch: Sequence[int], out_batch_idx: Sequence[te.Expr]
) -> list[te.Expr]:
    """Index into an operand's batch dimensions under numpy broadcasting (size 1 → 0)."""
    off = len(out_batch_idx) - len(operand_batch)
    return [
        te.Const(0, "int64") if n == 1 else out_batch_idx[off + d]
        for d, n in enumerate(operand_batch)
    ]
