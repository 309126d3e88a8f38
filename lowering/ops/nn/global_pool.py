"""GlobalAveragePool and GlobalMaxPool: one reduction over all spatial axes per (n, c)."""

from __future__ import annotations

import math

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.common import require_float


def _global(ctx: OpContext, combiner: str) -> te.Tensor:
    x = ctx.input(0)
    if len(x.shape) < 2:
        raise ctx.error(f"input of rank {len(x.shape)}: global pooling needs N and C axes")
    require_float(ctx, x.dtype, "global pooling")
    spatial = x.shape[2:]
    out_shape = (*x.shape[:2], *(1,) * len(spatial))
    if out_shape != ctx.out_shapes[0]:
        raise ctx.error(f"inferred output shape {list(ctx.out_shapes[0])}, expected "
                        f"{list(out_shape)}")
    red = [te.reduce_axis(d, "r") for d in spatial]
    inv = 1.0 / max(math.prod(spatial), 1)

    def body(n: te.Var, c: te.Var, *_: te.Var) -> te.Expr:
        v = x[(n, c, *[r.var for r in red])]
        if not red:
            return v
        return te.reduce(combiner, v * inv if combiner == "sum" else v, red)

    return te.compute(out_shape, body, name=f"global_{combiner}")


@register_op("GlobalAveragePool")
def global_average_pool(ctx: OpContext) -> list[te.Tensor]:
    return [_global(ctx, "sum")]


@register_op("GlobalMaxPool")
def global_max_pool(ctx: OpContext) -> list[te.Tensor]:
    return [_global(ctx, "max")]
