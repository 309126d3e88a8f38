"""Tile: the input repeated a constant number of times along every axis (or as the output
pins)."""

from __future__ import annotations

import numpy as np

from lowering import te
from lowering.ops import OpContext, pinned, register_op


@register_op("Tile")
def tile(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    if pinned.run_time(ctx, 1) is not None:
        repeats = _pinned_repeats(ctx, x.shape, tuple(ctx.out_shapes[0]))
    else:
        repeats = [int(r) for r in np.asarray(ctx.const(1, "repeats")).reshape(-1)]
    if len(repeats) != len(x.shape) or min(repeats, default=0) < 0:
        raise ctx.error(f"repeats {repeats} do not fit a rank-{len(x.shape)} input")
    shape = tuple(n * r for n, r in zip(x.shape, repeats, strict=True))

    def body(*i: te.Expr) -> te.Expr:
        return x[tuple(v if r == 1 else v % n for v, n, r in zip(i, x.shape, repeats,
                                                                  strict=True))]

    return [te.compute(shape, body, name="tile")]


def _pinned_repeats(ctx: OpContext, in_shape: tuple[int, ...], out: tuple[int, ...]
                    ) -> list[int]:
    """Run-time repeats must be the output's dimensions over the input's (any count along an
    empty axis)."""
    if len(out) != len(in_shape) or any(n and d % n for n, d in zip(in_shape, out, strict=True)):
        raise ctx.error(f"cannot tile {list(in_shape)} into {list(out)}")
    repeats = [d // n if n else 1 for n, d in zip(in_shape, out, strict=True)]
    given = pinned.elements(ctx.input(1))
    if len(given) != len(repeats):
        raise ctx.error(f"repeats has {len(given)} entries, the input has rank {len(in_shape)}")
    pinned.require(ctx, te.all_of([te.eq(r, te.const(k, r.dtype))
                                   for r, k, n in zip(given, repeats, in_shape, strict=True) if n]),
                   f"repeats must be {repeats}")
    return repeats
