"""Expand: numpy broadcasting of the input to a constant shape."""

from __future__ import annotations

import numpy as np

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.common import broadcast_load, broadcast_shape


@register_op("Expand")
def expand(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    target = [int(d) for d in np.asarray(ctx.const(1, "shape")).reshape(-1)]
    try:
        shape = broadcast_shape(x.shape, target)
    except ValueError as e:
        raise ctx.error(str(e)) from None
    return [te.compute(shape, lambda *i: broadcast_load(x, i), name="expand")]
