"""Cast between every element type aotc compiles (lowering/te.py: DTYPES).

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
