"""Where: condition, X and Y broadcast together (numpy rules); X where the condition holds."""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.elementwise.operands import elementwise


@register_op("Where")
def where(ctx: OpContext) -> list[te.Tensor]:
    cond, x, y = ctx.input(0), ctx.input(1), ctx.input(2)
    if cond.dtype != "bool":
        raise ctx.error(f"Where condition is {cond.dtype}, not bool")
    if x.dtype != y.dtype:
        raise ctx.error(f"Where branches differ in type ({x.dtype}, {y.dtype})")
    return [elementwise(ctx, te.select, [0, 1, 2])]
