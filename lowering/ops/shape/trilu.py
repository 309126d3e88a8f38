"""Trilu: the upper (or lower) triangle of each matrix in the last two axes, the rest zero.

Element (i, j) is kept when j - i >= k (upper) or j - i <= k (lower); k, the optional second
input, must be a constant.
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op


@register_op("Trilu")
def trilu(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    if len(x.shape) < 2:
        raise ctx.error(f"input has rank {len(x.shape)}, Trilu needs 2 or more")
    k_value = ctx.optional_const(1)
    if k_value is not None and k_value.size != 1:
        raise ctx.error(f"k must hold one value, got shape {list(k_value.shape)}")
    k = int(k_value.reshape(-1)[0]) if k_value is not None else 0
    upper = bool(int(ctx.attr("upper", 1)))

    def body(*i: te.Expr) -> te.Expr:
        diagonal = i[-1] - i[-2]
        keep = te.ge(diagonal, k) if upper else te.le(diagonal, k)
        return te.select(keep, x[i], te.as_expr(0, x.dtype))

    return [te.compute(x.shape, body, name="trilu")]
