"""EyeLike: a matrix of the input's shape with ones on diagonal k (j - i = k), zeros elsewhere,
of the type the `dtype` attribute names (the input's by default; the frontend's inferred
output type carries it)."""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op


@register_op("EyeLike")
def eye_like(ctx: OpContext) -> list[te.Tensor]:
    shape = ctx.input(0).shape
    if len(shape) != 2:
        raise ctx.error(f"input has rank {len(shape)}, EyeLike takes a matrix (rank 2)")
    k = int(ctx.attr("k", 0))
    dtype = ctx.out_dtypes[0]
    one, zero = te.as_expr(1, dtype), te.as_expr(0, dtype)
    return [te.compute(shape, lambda i, j: te.select(te.eq(j - i, k), one, zero),
                       name="eye_like")]
