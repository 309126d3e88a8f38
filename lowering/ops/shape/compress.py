"""Compress: the slices of the input along `axis` (or of the flattened input, without an axis)
whose condition is true. The kept positions become a gather through an index vector
(positions past the condition's end are dropped, as ONNX defines it): a constant one for a
constant condition. A condition given at run time decides how many slices are kept, so the
output is compiled at its declared length, checked when it runs, or at the frontend's bound,
its length reported to the caller (run_length.py); the index vector is then computed when the
kernel runs, by a binary search over the condition's running count of true values.
"""

from __future__ import annotations

import numpy as np

from lowering import te
from lowering.ops import OpContext, pinned, register_op
from lowering.ops.common import axis_of, unflatten
from lowering.ops.run_length import dense, output_length, true_positions
from lowering.ops.shape.shape import constant_vector


@register_op("Compress")
def compress(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    given = pinned.run_time(ctx, 1, elementwise=False)
    axis_attr = ctx.attr("axis")
    if axis_attr is None:  # flattened
        flat = te.compute((x.size,), lambda i: x[unflatten(i, x.shape)], name="compress_flat",
                          inline=True)
        src, axis = flat, 0
    else:
        src, axis = x, axis_of(ctx, int(axis_attr), len(x.shape))
    n = src.shape[axis]
    if given is None:
        cond = np.asarray(ctx.const(1, "condition")).reshape(-1).astype(bool)
        cond_size, kept = cond.size, int(np.count_nonzero(cond))
    else:  # the declared count (a shape of another rank fails the comparison below)
        cond_size = given.size
        kept = ctx.out_shapes[0][axis] if len(ctx.out_shapes[0]) == len(src.shape) else -1
    if cond_size > n:
        raise ctx.error(f"condition has {cond_size} values for an axis of {n}")
    shape = list(src.shape)
    shape[axis] = kept
    if tuple(shape) != tuple(ctx.out_shapes[0]):
        raise ctx.error(f"output shape {shape} differs from the inferred "
                        f"{list(ctx.out_shapes[0])}")
    if given is None:
        if not kept:
            return [te.compute(shape, lambda *i: te.Const(0, src.dtype), name="compress")]
        where = constant_vector([int(i) for i in np.flatnonzero(cond)], "int64",
                                "compress_where")
        return [te.compute(shape, lambda *o: _gather(src, axis, where, o), name="compress")]
    if cond_size == 0:
        output_length(ctx, 0, axis, te.const(0, "int64"))
        return [te.compute(shape, lambda *i: te.Const(0, src.dtype), name="compress")]
    flags = te.compute((cond_size,), lambda j: te.cast("int64", te.cast("bool", given[
        unflatten(j, given.shape)])), name="compress_flags")
    positions, count = true_positions(flags, max(kept, 1), "compress")
    length = output_length(ctx, 0, axis, count)
    return [dense(shape, axis, length, src.dtype,
                  lambda *o: _gather(src, axis, positions, o), "compress")]


def _gather(src: te.Tensor, axis: int, where: te.Tensor, o: tuple[te.Expr, ...]) -> te.Expr:
    """The source element at output index `o`: its position on `axis` read from `where`."""
    idx = list(o)
    idx[axis] = where[o[axis]]
    return src[tuple(idx)]
