"""Hardmax (opset 13: along one axis): 1 at the first maximum of each row, 0 elsewhere.

Two reductions, as ArgMax: the row maximum, then the first position holding it. A NaN counts
as the largest value, as in ONNX's reference implementation (numpy's argmax): the maximum
propagates NaN (`max_nan`) and the row's first NaN is the position. onnxruntime's choice for
such rows depends on where the NaN falls within its vector lanes (sometimes all zeros), so
there is no rule of its to follow; every row gets exactly one 1.
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.common import axis_of, require_float
from lowering.ops.reduce.core import reduce_compute, stat_index


@register_op("Hardmax")
def hardmax(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    require_float(ctx, x.dtype, "Hardmax")
    axes = [axis_of(ctx, ctx.attr("axis", -1), len(x.shape))]
    n = x.shape[axes[0]]
    top = reduce_compute(x.shape, axes, True, "max_nan", lambda i: x[i], "hardmax_max")
    past = te.Const(n, "int64")  # not a maximum: loses to every position that is

    def position(i: tuple[te.Expr, ...]) -> te.Expr:
        v = x[i]
        hit = te.logical_or(te.eq(v, top[stat_index(i, axes)]), te.ne(v, v))  # NaN: v != v
        return te.select(hit, i[axes[0]], past)

    first = reduce_compute(x.shape, axes, True, "min", position, "hardmax_first")
    one, zero = te.Const(1, x.dtype), te.Const(0, x.dtype)
    return [te.compute(x.shape, lambda *i: te.select(
        te.eq(i[axes[0]], first[stat_index(i, axes)]), one, zero), name="hardmax")]
