"""Slice: starts/ends/axes/steps, clamped the way numpy and onnxruntime clamp them.

Every output axis reads `start + i * step` of its input axis; negative steps walk backwards;
huge ends (INT64_MAX / INT64_MIN) and negative indices are resolved at compile time when the
parameters are constants. Given at run time (`pinned.run_time`), they are resolved by a small
stage when the kernel runs (each axis's first index and step), and a check requires the counts
they give to be the output's shape, which the model fixes: the kernel was compiled for it.
"""

from __future__ import annotations

import numpy as np

from lowering import te
from lowering.ops import OpContext, pinned, register_op
from lowering.ops.common import normalize_axis


def _resolve(start: int, end: int, step: int, dim: int) -> tuple[int, int]:
    """(first index, count) of the slice start:end:step on an axis of length `dim`."""
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start = min(max(start, 0), dim)
        end = min(max(end, 0), dim)
        count = max(0, -(-(end - start) // step))
    else:
        start = min(max(start, 0), dim - 1)
        end = min(max(end, -1), dim - 1)
        count = max(0, -(-(start - end) // -step))
    return start, count


@register_op("Slice")
def slice_(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    rank = len(x.shape)
    given = [k for k in range(1, 5) if ctx.has_input(k) and ctx.consts[k] is None]
    if given and all(pinned.run_time(ctx, k) is not None for k in given):
        return [_slice_at_run_time(ctx, x)]
    starts = np.asarray(ctx.const(1, "starts")).reshape(-1).tolist()
    ends = np.asarray(ctx.const(2, "ends")).reshape(-1).tolist()
    axes_c = ctx.optional_const(3)
    steps_c = ctx.optional_const(4)
    axes = list(range(len(starts))) if axes_c is None else np.asarray(axes_c).reshape(-1).tolist()
    steps = [1] * len(starts) if steps_c is None else np.asarray(steps_c).reshape(-1).tolist()
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ctx.error("starts, ends, axes and steps must have the same length")
    first = [0] * rank
    step_of = [1] * rank
    shape = list(x.shape)
    seen = set()
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        try:
            d = normalize_axis(int(a), rank)
        except ValueError as err:
            raise ctx.error(str(err)) from None
        if d in seen:
            raise ctx.error(f"axis {a} is sliced twice")
        seen.add(d)
        if int(st) == 0:
            raise ctx.error("a slice step cannot be 0")
        first[d], shape[d] = _resolve(int(s), int(e), int(st), x.shape[d])
        step_of[d] = int(st)

    def body(*i: te.Expr) -> te.Expr:
        return x[tuple(v * step_of[d] + first[d] for d, v in enumerate(i))]

    return [te.compute(tuple(shape), body, name="slice")]


def _parameters(ctx: OpContext, rank: int) -> list[list[te.Expr]]:
    """starts, ends, axes and steps as int64 expressions, one per entry: constants folded, run-
    time values loaded (absent axes are 0..n-1, absent steps 1)."""
    def entries(k: int) -> list[te.Expr] | None:
        if not ctx.has_input(k):
            return None
        value = ctx.consts[k]
        if value is not None:
            return [te.const(int(v), "int64") for v in np.asarray(value).reshape(-1)]
        return [te.cast("int64", v) for v in pinned.elements(ctx.input(k))]

    starts, ends = entries(1), entries(2)
    assert starts is not None and ends is not None
    n = len(starts)
    axes = entries(3) or [te.const(k, "int64") for k in range(n)]
    steps = entries(4) or [te.const(1, "int64")] * n
    if not n == len(ends) == len(axes) == len(steps) or n > rank:
        raise ctx.error(f"starts, ends, axes and steps must have the same length, at most the "
                        f"rank {rank}: {len(starts)}, {len(ends)}, {len(axes)}, {len(steps)}")
    return [starts, ends, axes, steps]


def _resolve_at_run_time(start: te.Expr, end: te.Expr, step: te.Expr, dim: int
                         ) -> tuple[te.Expr, te.Expr]:
    """`_resolve` as expressions: (first index, count) for a step known to be nonzero."""
    zero, n = te.const(0, "int64"), te.const(dim, "int64")
    start = te.select(te.lt(start, zero), start + n, start)
    end = te.select(te.lt(end, zero), end + n, end)
    forward = te.gt(step, zero)

    def clamp(v: te.Expr, lo: te.Expr, hi: te.Expr) -> te.Expr:
        return te.minimum(te.maximum(v, lo), hi)

    last = n - 1
    first = te.select(forward, clamp(start, zero, n), clamp(start, zero, last))
    stop = te.select(forward, clamp(end, zero, n), clamp(end, te.const(-1, "int64"), last))
    stride = te.select(forward, step, zero - step)
    span = te.select(forward, stop - first, first - stop)
    count = te.maximum((span + stride - 1) // stride, zero)
    return first, count


def _slice_at_run_time(ctx: OpContext, x: te.Tensor) -> te.Tensor:
    """Slice whose parameters are read when the kernel runs; the output's shape is fixed."""
    rank = len(x.shape)
    out = tuple(ctx.out_shapes[0])
    starts, ends, axes, steps = _parameters(ctx, rank)
    zero, one = te.const(0, "int64"), te.const(1, "int64")
    named = [[pinned.axis_fits(a, d, rank) for d in range(rank)] for a in axes]
    conds = [te.ne(s, zero) for s in steps]
    conds += [te.logical_and(te.ge(a, te.const(-rank, "int64")), te.lt(a, te.const(rank, "int64")))
              for a in axes]
    firsts: list[te.Expr] = []
    strides: list[te.Expr] = []
    for d in range(rank):
        sliced = [row[d] for row in named]
        conds.append(te.le(pinned.count_true(sliced), one))
        first, step, count = zero, zero, zero
        for k, hit in enumerate(sliced):
            safe_step = te.select(te.eq(steps[k], zero), one, steps[k])  # no division by 0
            f, c = _resolve_at_run_time(starts[k], ends[k], safe_step, x.shape[d])
            first = first + te.select(hit, f, zero)
            step = step + te.select(hit, steps[k], zero)
            count = count + te.select(hit, c, zero)
        untouched = te.unary("not", te.any_of(sliced))
        step = step + te.select(untouched, one, zero)
        count = count + te.select(untouched, te.const(x.shape[d], "int64"), zero)
        conds.append(te.eq(count, te.const(out[d], "int64")))
        firsts.append(first)
        strides.append(step)
    pinned.require(ctx, te.all_of(conds), f"starts, ends, axes and steps must give the "
                   f"output {list(out)}")
    table = te.compute((2 * rank,), lambda k: pinned.pick(firsts + strides, k),
                       name="slice_begin", dtype="int64")

    def body(*i: te.Expr) -> te.Expr:
        src = []
        for d, v in enumerate(i):
            j = table[te.const(d, "int64")] + v * table[te.const(rank + d, "int64")]
            src.append(te.minimum(te.maximum(j, zero), te.const(max(x.shape[d] - 1, 0), "int64")))
        return x[tuple(src)]

    return te.compute(out, body, name="slice")
