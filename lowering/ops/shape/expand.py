"""Expand: numpy broadcasting of the input to a constant shape (or one the output pins)."""

from __future__ import annotations

import numpy as np

from lowering import te
from lowering.ops import OpContext, pinned, register_op
from lowering.ops.common import broadcast_load, broadcast_shape


@register_op("Expand")
def expand(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    if pinned.run_time(ctx, 1) is not None:
        target = _pinned_shape(ctx, x.shape, tuple(ctx.out_shapes[0]))
    else:
        target = [int(d) for d in np.asarray(ctx.const(1, "shape")).reshape(-1)]
    try:
        shape = broadcast_shape(x.shape, target)
    except ValueError as e:
        raise ctx.error(str(e)) from None
    return [te.compute(shape, lambda *i: broadcast_load(x, i), name="expand")]


def _pinned_shape(ctx: OpContext, in_shape: tuple[int, ...], out: tuple[int, ...]) -> list[int]:
    """A run-time shape must broadcast the input to `out`: each entry the output's dimension,
    or 1 where the input's dimension already is the output's."""
    given = pinned.elements(ctx.input(1))
    rank = len(out)
    if len(given) > rank or len(in_shape) > rank:
        raise ctx.error(f"shape has {len(given)} entries, the output has rank {rank}")
    conds = []
    for j, s in enumerate(given):
        d = rank - len(given) + j  # the output axis the entry lines up with (from the right)
        k = d - (rank - len(in_shape))
        have = in_shape[k] if k >= 0 else 1
        ok = te.eq(s, te.const(out[d], s.dtype))
        if have == out[d]:
            ok = te.logical_or(ok, te.eq(s, te.const(1, s.dtype)))
        conds.append(ok)
    pinned.require(ctx, te.all_of(conds), f"shape must broadcast the input to {list(out)}")
    return list(out)
