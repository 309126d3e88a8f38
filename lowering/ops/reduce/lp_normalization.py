"""LpNormalization: x divided by its L1 or L2 norm along one axis.

A row whose norm is 0 (all zeros, or an L2 sum of squares that underflows) gives zeros, as
onnxruntime does, rather than 0/0; an infinite element gives NaN there (inf/inf) and 0 beside
it, and a NaN spreads over its row.
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.common import axis_of, require_float
from lowering.ops.reduce.core import reduce_compute, stat_index


@register_op("LpNormalization")
def lp_normalization(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    require_float(ctx, x.dtype, "LpNormalization")
    p = int(ctx.attr("p", 2))
    if p not in (1, 2):
        raise ctx.error(f"p must be 1 or 2, got {p}")
    axes = [axis_of(ctx, ctx.attr("axis", -1), len(x.shape))]

    def elem(i: tuple[te.Expr, ...]) -> te.Expr:
        return te.unary("abs", x[i]) if p == 1 else x[i] * x[i]

    total = reduce_compute(x.shape, axes, True, "sum", elem, "lp_norm_sum")
    norm = total if p == 1 else te.compute(
        total.shape, lambda *i: te.unary("sqrt", total[i]), name="lp_norm")
    zero = te.Const(0, x.dtype)

    def body(*i: te.Expr) -> te.Expr:
        n = norm[stat_index(i, axes)]
        return te.select(te.eq(n, zero), zero, x[i] / n)

    return [te.compute(x.shape, body, name="lp_normalization")]
