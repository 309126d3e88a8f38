"""IsNaN and IsInf: bool tests of a float's class.

IsNaN is `x != x` (an unordered compare); IsInf compares with ±inf, each sign switched on and
off by `detect_positive` / `detect_negative` (both off gives all false, as onnxruntime).
"""

from __future__ import annotations

import math

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.elementwise.operands import elementwise, require_dtype


@register_op("IsNaN")
def is_nan(ctx: OpContext) -> list[te.Tensor]:
    require_dtype(ctx, te.FLOAT_DTYPES)
    return [elementwise(ctx, lambda x: te.ne(x, x), [0])]


@register_op("IsInf")
def is_inf(ctx: OpContext) -> list[te.Tensor]:
    dtype = require_dtype(ctx, te.FLOAT_DTYPES)
    positive = bool(int(ctx.attr("detect_positive", 1)))
    negative = bool(int(ctx.attr("detect_negative", 1)))

    def test(x: te.Expr) -> te.Expr:
        if positive and negative:
            return te.eq(te.unary("abs", x), te.Const(math.inf, dtype))
        if positive or negative:
            return te.eq(x, te.Const(math.inf if positive else -math.inf, dtype))
        return te.Const(False, "bool")

    return [elementwise(ctx, test, [0])]
