"""Slice: constant starts/ends/axes/steps, clamped the way numpy and onnxruntime clamp them.

Every output axis reads `start + i * step` of its input axis; negative steps walk backwards;
huge ends (INT64_MAX / INT64_MIN) and negative indices are resolved at compile time.
"""

from __future__ import annotations

import numpy as np

from lowering import te
from lowering.ops import OpContext, register_op
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
