"""ArgMax / ArgMin along one axis (keepdims, select_last_index): int64 positions.

Two reductions: the extreme value of the row, then the first (or last) position holding it.
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.common import normalize_axis
from lowering.ops.reduce.core import reduce_compute, stat_index


@register_op("ArgMax", "ArgMin")
def arg_extreme(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    if x.dtype == "bool":
        raise ctx.error(f"{ctx.op_type} on bool data is not supported")
    try:
        axis = normalize_axis(int(ctx.attr("axis", 0)), len(x.shape))
    except ValueError as e:
        raise ctx.error(str(e)) from None
    keep = bool(ctx.attr("keepdims", 1))
    last = bool(ctx.attr("select_last_index", 0))
    combiner = "max" if ctx.op_type == "ArgMax" else "min"
    extreme = reduce_compute(x.shape, [axis], True, combiner, lambda i: x[i], "arg_extreme")

    # A position that does not hold the extreme counts as 0 (last) or n - 1 (first), so the
    # result stays a valid index even when no element compares equal (a row of NaNs).
    miss = te.Const(0 if last else x.shape[axis] - 1, "int64")

    def position(i: tuple[te.Expr, ...]) -> te.Expr:
        hit = te.eq(x[i], extreme[stat_index(i, [axis])])
        return te.select(hit, i[axis], miss)

    return [reduce_compute(x.shape, [axis], keep, "max" if last else "min", position,
                           ctx.op_type.lower())]
