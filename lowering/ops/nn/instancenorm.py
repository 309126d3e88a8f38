"""InstanceNormalization: per (n, c), normalise over the spatial axes, then scale and shift.

Stages: mean[n, c], var[n, c] (two passes, numerically safer than E[x²] - E[x]²),
a[n, c] = scale[c]/√(var+ε), and the element-wise Y = (X - mean)·a + B[c].
"""

from __future__ import annotations

import math
from collections.abc import Callable

from lowering import te
from lowering.ops import OpContext, register_op


@register_op("InstanceNormalization")
def instance_normalization(ctx: OpContext) -> list[te.Tensor]:
    x, scale, bias = ctx.input(0), ctx.input(1), ctx.input(2)
    if len(x.shape) < 3:
        raise ctx.error(f"input of rank {len(x.shape)}: InstanceNormalization needs N, C and "
                        "spatial axes")
    if x.dtype not in te.FLOAT_DTYPES:
        raise ctx.error(f"InstanceNormalization of {x.dtype} tensors is not supported")
    n, channels, *spatial = x.shape
    if scale.shape != (channels,) or bias.shape != (channels,):
        raise ctx.error(f"scale {list(scale.shape)} / B {list(bias.shape)}, expected "
                        f"[{channels}]")
    eps = float(ctx.attr("epsilon", 1e-5))
    inv = 1.0 / math.prod(spatial)

    def reduction(fn: Callable[..., te.Expr], name: str) -> te.Tensor:
        def body(b: te.Var, c: te.Var) -> te.Expr:
            red = [te.reduce_axis(d, "r") for d in spatial]
            return te.reduce("sum", fn(b, c, [r.var for r in red]) * inv, red)

        return te.compute((n, channels), body, name=name)

    mean = reduction(lambda b, c, s: x[(b, c, *s)], "in_mean")
    var = reduction(
        lambda b, c, s: (x[(b, c, *s)] - mean[b, c]) * (x[(b, c, *s)] - mean[b, c]), "in_var"
    )
    a = te.compute(
        (n, channels), lambda b, c: scale[c] / te.unary("sqrt", var[b, c] + eps), name="in_scale"
    )
    return [te.compute(
        x.shape, lambda b, c, *s: (x[(b, c, *s)] - mean[b, c]) * a[b, c] + bias[c], name="in"
    )]
