"""Tile: the input repeated a constant number of times along every axis."""

from __future__ import annotations

import numpy as np

from lowering import te
from lowering.ops import OpContext, register_op


@register_op("Tile")
def tile(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    repeats = [int(r) for r in np.asarray(ctx.const(1, "repeats")).reshape(-1)]
    if len(repeats) != len(x.shape) or min(repeats, default=0) < 0:
        raise ctx.error(f"repeats {repeats} do not fit a rank-{len(x.shape)} input")
    shape = tuple(n * r for n, r in zip(x.shape, repeats, strict=True))

    def body(*i: te.Expr) -> te.Expr:
        return x[tuple(v if r == 1 else v % n for v, n, r in zip(i, x.shape, repeats,
                                                                  strict=True))]

    return [te.compute(shape, body, name="tile")]
