"""Compress: the slices of the input along `axis` (or of the flattened input, without an axis)
whose condition is true. The condition must be a constant: it sets the output shape. The
kept positions become a gather through a constant index vector (positions past the
condition's end are dropped, as ONNX defines it).
"""

from __future__ import annotations

import numpy as np

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.common import axis_of
from lowering.ops.shape.shape import constant_vector


@register_op("Compress")
def compress(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    cond = np.asarray(ctx.const(1, "condition")).reshape(-1).astype(bool)
    axis_attr = ctx.attr("axis")
    if axis_attr is None:  # flattened
        flat = te.compute((x.size,), lambda i: x[_unflatten(i, x.shape)], name="compress_flat",
                          inline=True)
        src, axis = flat, 0
    else:
        src, axis = x, axis_of(ctx, int(axis_attr), len(x.shape))
    n = src.shape[axis]
    if cond.size > n:
        raise ctx.error(f"condition has {cond.size} values for an axis of {n}")
    kept = [int(i) for i in np.flatnonzero(cond)]
    shape = list(src.shape)
    shape[axis] = len(kept)
    if tuple(shape) != tuple(ctx.out_shapes[0]):
        raise ctx.error(f"output shape {shape} differs from the inferred "
                        f"{list(ctx.out_shapes[0])}")
    if not kept:
        return [te.compute(shape, lambda *i: te.Const(0, src.dtype), name="compress")]
    where = constant_vector(kept, "int64", "compress_where")

    def body(*o: te.Var) -> te.Expr:
        idx = list(o)
        idx[axis] = where[o[axis]]
        return src[tuple(idx)]

    return [te.compute(shape, body, name="compress")]


def _unflatten(i: te.Expr, shape: tuple[int, ...]) -> tuple[te.Expr, ...]:
    out: list[te.Expr] = []
    for d in reversed(shape):
        out.insert(0, i % d)
        i = i // d
    return tuple(out)
