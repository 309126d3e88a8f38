"""MatMulInteger: `(A - a_zero_point) @ (B - b_zero_point)` in int32, MatMul's shapes; the zero
points per tensor, per row of A and per column of B."""

from __future__ import annotations

from dataclasses import replace

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.linalg.matmul import matmul
from lowering.ops.quant.params import shifted


def row_axis(shape: tuple[int, ...]) -> int | None:
    return len(shape) - 2 if len(shape) >= 2 else None


def col_axis(shape: tuple[int, ...]) -> int | None:
    return len(shape) - 1 if len(shape) >= 2 else None


def integer_matmul(ctx: OpContext, a: int, a_zp: int, b: int, b_zp: int) -> te.Tensor:
    """The int32 product of inputs `a` and `b` less their zero points, through MatMul's
    definition (its shapes, broadcasting and the GEMM pattern)."""
    a32 = shifted(ctx, a, a_zp, row_axis(ctx.input(a).shape))
    b32 = shifted(ctx, b, b_zp, col_axis(ctx.input(b).shape))
    product = matmul(replace(ctx, inputs=[a32, b32], consts=[None, None],
                             out_dtypes=["int32"]))[0]
    assert isinstance(product, te.Tensor)
    return product


@register_op("MatMulInteger")
def matmul_integer(ctx: OpContext) -> list[te.Tensor]:
    return [integer_matmul(ctx, 0, 2, 1, 3)]
