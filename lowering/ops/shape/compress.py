"""Compress: the slices of the input along `axis` (or of the flattened input, without an axis)
whose condition is true. The kept positions become a gather through an index vector
(positions past the condition's end are dropped, as ONNX defines it): a constant one for a
constant condition. A condition given at run time cannot set the output's shape, so the
declared one is compiled, and a check requires the condition to keep that many (pinned.py);
the vector is then computed when the kernel runs: the k-th kept position is the number of
positions whose running count of true values is at most k.
"""

from __future__ import annotations

import numpy as np

from lowering import te
from lowering.ops import OpContext, pinned, register_op
from lowering.ops.common import axis_of
from lowering.ops.reduce.cumulative import running_total
from lowering.ops.shape.shape import constant_vector


@register_op("Compress")
def compress(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    given = pinned.run_time(ctx, 1, elementwise=False)
    axis_attr = ctx.attr("axis")
    if axis_attr is None:  # flattened
        flat = te.compute((x.size,), lambda i: x[_unflatten(i, x.shape)], name="compress_flat",
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
    if not kept:
        return [te.compute(shape, lambda *i: te.Const(0, src.dtype), name="compress")]
    if given is None:
        where = constant_vector([int(i) for i in np.flatnonzero(cond)], "int64",
                                "compress_where")
    else:
        where = _kept_positions(ctx, given, kept)

    def body(*o: te.Var) -> te.Expr:
        idx = list(o)
        idx[axis] = where[o[axis]]
        return src[tuple(idx)]

    return [te.compute(shape, body, name="compress")]


def _kept_positions(ctx: OpContext, cond: te.Tensor, kept: int) -> te.Tensor:
    """The positions of the first `kept` true values of a run-time condition, with a check
    that it holds exactly `kept` true values."""
    flat = te.compute((cond.size,), lambda j: te.cast("int64", te.cast("bool", cond[
        _unflatten(j, cond.shape)])), name="compress_flags")
    count = running_total(flat, 0, "compress_count")
    pinned.require(ctx, te.eq(count[te.const(cond.size - 1, "int64")],
                              te.const(kept, "int64")),
                   f"condition must hold {kept} true values")

    def position(k: te.Expr) -> te.Expr:
        r = te.reduce_axis(cond.size, "j")
        return te.reduce_sum(te.cast("int64", te.le(count[r.var], k)), [r])

    where = te.compute((kept,), position, name="compress_where")
    # (a condition with fewer true values fails the check; clamped, its run reads in bounds)
    return te.compute((kept,), lambda k: te.minimum(where[k], te.const(cond.size - 1, "int64")),
                      name="compress_where_clamped")


def _unflatten(i: te.Expr, shape: tuple[int, ...]) -> tuple[te.Expr, ...]:
    out: list[te.Expr] = []
    for d in reversed(shape):
        out.insert(0, i % d)
        i = i // d
    return tuple(out)
