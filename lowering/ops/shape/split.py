"""Split: each output reads its range of the input along `axis` (sizes given, or num_outputs
chunks of ceil(dim / n) with a smaller last one). Sizes given at run time are pinned by the
outputs' lengths and checked (pinned.py)."""

from __future__ import annotations

import numpy as np

from lowering import te
from lowering.ops import OpContext, pinned, register_op
from lowering.ops.common import normalize_axis


def split_sizes(ctx: OpContext, dim: int, axis: int) -> list[int]:
    count = len(ctx.out_shapes)
    if pinned.run_time(ctx, 1) is not None:  # the outputs' lengths along the axis pin it
        given = pinned.values(ctx, 1, [s[axis] for s in ctx.out_shapes], "split")
    else:
        given = ctx.optional_const(1)
    if given is not None:
        sizes = [int(s) for s in np.asarray(given).reshape(-1)]
        if len(sizes) != count or sum(sizes) != dim or min(sizes, default=0) < 0:
            raise ctx.error(f"split {sizes} does not cut a dimension of {dim} into {count}")
        return sizes
    n = int(ctx.attr("num_outputs", count))
    if n != count or n < 1:
        raise ctx.error(f"num_outputs={n} but the node has {count} outputs")
    chunk = -(-dim // n)
    sizes = [min(chunk, max(dim - k * chunk, 0)) for k in range(n)]
    if sizes[-1] == 0 and dim > 0:
        raise ctx.error(f"cannot split a dimension of {dim} into {n} non-empty chunks")
    return sizes


@register_op("Split")
def split(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    try:
        axis = normalize_axis(int(ctx.attr("axis", 0)), len(x.shape))
    except ValueError as e:
        raise ctx.error(str(e)) from None
    outs = []
    start = 0
    for size in split_sizes(ctx, x.shape[axis], axis):
        shape = tuple(size if d == axis else n for d, n in enumerate(x.shape))

        def body(*i: te.Expr, off: int = start) -> te.Expr:
            return x[tuple(v + off if d == axis else v for d, v in enumerate(i))]

        outs.append(te.compute(shape, body, name="split"))
        start += size
    return outs
