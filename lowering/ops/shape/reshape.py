"""Reshape, Flatten, Squeeze, Unsqueeze: zero-copy views of their input (same bytes, new shape).

The frontend has already inferred the output shape (0 / -1 / allowzero of Reshape, the axes
of Squeeze/Unsqueeze); these only check that the view keeps the element count and dtype, and
that the input deciding the shape (Reshape's shape, Squeeze/Unsqueeze's axes) is a constant: a
value given at run time could ask for another shape than the one compiled (a declared output
shape would otherwise be taken on trust).
"""

from __future__ import annotations

import math

from lowering import te
from lowering.ops import Alias, OpContext, register_op


@register_op("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def view(ctx: OpContext) -> list[te.Tensor | Alias]:
    x = ctx.input(0)
    if ctx.has_input(1):
        ctx.const(1, "shape" if ctx.op_type == "Reshape" else "axes")
    shape, dtype = ctx.out_shapes[0], ctx.out_dtypes[0]
    if math.prod(shape) != x.size or dtype != x.dtype:
        raise ctx.error(f"cannot view {x.dtype}{list(x.shape)} as {dtype}{list(shape)}")
    return [Alias(0)]
