"""Cast between float32/float64/int64/int32/int8/uint8/bool.

Float → integer truncates toward zero (C); anything → bool is "nonzero" (NaN is true); bool →
number is 0/1. Out-of-range float → integer conversions are undefined, as in ONNX.
"""

from __future__ import annotations

from lowering import te
from lowering.ops import Alias, OpContext, register_op
from lowering.ops.elementwise.operands import elementwise


@register_op("Cast")
def cast(ctx: OpContext) -> list[te.Tensor | Alias]:
    src, dst = ctx.input(0).dtype, ctx.out_dtypes[0]
    if src == dst:
        return [Alias(0)]
    return [elementwise(ctx, lambda x: te.cast(dst, x), [0])]
