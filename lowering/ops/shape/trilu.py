"""Trilu: the upper (or lower) triangle of each matrix in the last two axes, the rest zero.

Element (i, j) is kept when j - i >= k (upper) or j - i <= k (lower). k, the optional second
input (one integer, a scalar or a 1-element tensor; 0 when omitted), may be a constant, which
folds into the comparison, or computed at run time: it never changes the output's shape, so
the kernel then loads it and compares against the loaded value.
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op


@register_op("Trilu")
def trilu(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    if len(x.shape) < 2:
        raise ctx.error(f"input has rank {len(x.shape)}, Trilu needs 2 or more")
    k = _diagonal(ctx)
    upper = bool(int(ctx.attr("upper", 1)))

    def body(*i: te.Expr) -> te.Expr:
        diagonal = i[-1] - i[-2]
        keep = te.ge(diagonal, k) if upper else te.le(diagonal, k)
        return te.select(keep, x[i], te.as_expr(0, x.dtype))

    return [te.compute(x.shape, body, name="trilu")]


def _diagonal(ctx: OpContext) -> int | te.Expr:
    """k: an int when it is known at compile time, else its load from input 1 (int64, as the
    index arithmetic it is compared with). Any k is safe: it only moves the comparison."""
    if not ctx.has_input(1):
        return 0
    k = ctx.input(1)
    if k.size != 1 or k.dtype not in te.INT_DTYPES:
        raise ctx.error(f"k must be one integer, got {k.dtype}{list(k.shape)}")
    value = ctx.consts[1] if len(ctx.consts) > 1 else None
    if value is not None:
        return int(value.reshape(-1)[0])
    return te.cast("int64", k[(0,) * len(k.shape)])
