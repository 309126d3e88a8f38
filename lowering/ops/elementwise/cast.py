"""Cast between every element type aotc compiles (lowering/te.py: DTYPES).

Float → integer truncates toward zero (C); anything → bool is "nonzero" (NaN is true); bool →
number is 0/1. Out-of-range float → integer conversions are undefined, as in ONNX. The 8-bit
floats read `saturate` and (E8M0) `round_mode` (lowering/convert.py).
"""

from __future__ import annotations

from lowering import te
from lowering.convert import ROUND_MODES, convert
from lowering.ops import Alias, OpContext, register_op
from lowering.ops.elementwise.operands import elementwise


@register_op("Cast")
def cast(ctx: OpContext) -> list[te.Tensor | Alias]:
    src, dst = ctx.input(0).dtype, ctx.out_dtypes[0]
    if src == dst:
        return [Alias(0)]
    saturate = bool(ctx.attr("saturate", 1))
    round_mode = ctx.attr("round_mode", "up")
    if isinstance(round_mode, bytes):
        round_mode = round_mode.decode()
    if round_mode not in ROUND_MODES:
        raise ctx.error(f"round_mode '{round_mode}' is not one of {', '.join(ROUND_MODES)}")
    return [elementwise(ctx, lambda x: convert(x, dst, saturate, round_mode), [0])]
