"""Reshape, Flatten, Squeeze, Unsqueeze: zero-copy views of their input (same bytes, new shape).

The frontend has already inferred the output shape (0 / -1 / allowzero of Reshape, the axes
of Squeeze/Unsqueeze); these only check that the view keeps the element count and dtype, and
that the input deciding the shape (Reshape's shape, Squeeze/Unsqueeze's axes) is a constant or
is checked at run time to ask for the shape compiled (pinned.py): a declared output shape is
never taken on trust.
"""

from __future__ import annotations

import math

from lowering import te
from lowering.ops import Alias, OpContext, pinned, register_op


@register_op("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def view(ctx: OpContext) -> list[te.Tensor | Alias]:
    x = ctx.input(0)
    shape, dtype = ctx.out_shapes[0], ctx.out_dtypes[0]
    if ctx.has_input(1):
        if pinned.run_time(ctx, 1) is None:
            ctx.const(1, "shape" if ctx.op_type == "Reshape" else "axes")
        elif ctx.op_type == "Reshape":
            _check_shape(ctx, x.shape, shape)
        else:
            _check_axes(ctx, x.shape, shape)
    if math.prod(shape) != x.size or dtype != x.dtype:
        raise ctx.error(f"cannot view {x.dtype}{list(x.shape)} as {dtype}{list(shape)}")
    return [Alias(0)]


def _check_shape(ctx: OpContext, in_shape: tuple[int, ...], out: tuple[int, ...]) -> None:
    """Reshape's run-time shape must give `out`: each entry that dimension, or 0 copying an
    equal input dimension (without allowzero), or the one -1 (the element count then fixes it)."""
    given = pinned.elements(ctx.input(1))
    if len(given) != len(out):
        raise ctx.error(f"shape has {len(given)} entries, the output has rank {len(out)}")
    copy_zero = not ctx.attr("allowzero", 0)
    conds, unknown = [], []
    for j, (s, d) in enumerate(zip(given, out, strict=True)):
        ok = te.logical_or(te.eq(s, te.const(d, s.dtype)), te.eq(s, te.const(-1, s.dtype)))
        if copy_zero and j < len(in_shape) and in_shape[j] == d:
            ok = te.logical_or(ok, te.eq(s, te.const(0, s.dtype)))
        conds.append(ok)
        unknown.append(te.eq(s, te.const(-1, s.dtype)))
    conds.append(te.le(pinned.count_true(unknown), te.const(1, "int64")))
    pinned.require(ctx, te.all_of(conds), f"shape must give {list(out)}")


def _check_axes(ctx: OpContext, in_shape: tuple[int, ...], out: tuple[int, ...]) -> None:
    """Squeeze's or Unsqueeze's run-time axes must give `out`: any axes that do mean the same
    view."""
    count = ctx.input(1).size
    if ctx.op_type == "Unsqueeze":
        rank = len(out)

        def fits(axes: tuple[int, ...]) -> bool:
            rest = iter(in_shape)
            return all(d == 1 if a in axes else d == next(rest, -1)
                       for a, d in enumerate(out))
    else:
        rank = len(in_shape)

        def fits(axes: tuple[int, ...]) -> bool:
            return all(in_shape[a] == 1 for a in axes) and tuple(
                d for a, d in enumerate(in_shape) if a not in axes) == out
    fitting = pinned.subsets_fitting(rank, count, fits)
    if not fitting:
        raise pinned.ambiguous(ctx, 1, "axes", "no axes")
    pinned.axes(ctx, 1, rank, [tuple(a in s for a in range(rank)) for s in fitting], "axes")
