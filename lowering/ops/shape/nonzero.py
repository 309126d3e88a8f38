"""NonZero: the indices of the input's nonzero elements, one row per axis, in row-major order.

How many there are is the data's: the output is compiled at its declared shape or at the
frontend's bound [rank, numel] (run_length.py). The k-th nonzero element's flat position is
found by a binary search over the running count of nonzero elements; its row r is that
position's index on axis r.
"""

from __future__ import annotations

import math

from lowering import te
from lowering.ops import OpContext, pinned, register_op
from lowering.ops.common import unflatten
from lowering.ops.run_length import dense, output_length, true_positions


@register_op("NonZero")
def nonzero(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    shape = tuple(ctx.out_shapes[0])
    rank, n = len(x.shape), math.prod(x.shape)
    if len(shape) != 2 or shape[0] != max(rank, 1) or shape[1] > n:
        raise ctx.error(f"output shape {list(shape)} cannot hold the nonzero indices of a "
                        f"{list(x.shape)} input")
    if n == 0:
        return [te.compute(shape, lambda *i: te.Const(0, "int64"), name="nonzero")]
    flags = te.compute((n,), lambda j: te.cast("int64", te.ne(
        x[unflatten(j, x.shape)], te.Const(0, x.dtype))), name="nonzero_flags")
    where, count = true_positions(flags, max(shape[1], 1), "nonzero")
    length = output_length(ctx, 0, 1, count)
    dims = x.shape or (1,)  # (a scalar's one row holds 0 for a nonzero value)

    def coordinate(r: te.Expr, k: te.Expr) -> te.Expr:
        return pinned.pick(unflatten(where[k], dims), r)

    return [dense(shape, 1, length, "int64", coordinate, "nonzero")]
