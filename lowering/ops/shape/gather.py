"""Gather along any axis: `out[pre, idx, post] = data[pre, indices[idx], post]`.

Negative indices wrap once; the result is clamped into the axis so that a bad index can never
read outside `data` (onnxruntime reports an error there; aotc reads the nearest edge).
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.common import clamp_index, normalize_axis


@register_op("Gather")
def gather(ctx: OpContext) -> list[te.Tensor]:
    data, indices = ctx.input(0), ctx.input(1)
    if indices.dtype not in ("int64", "int32"):
        raise ctx.error(f"indices must be int32 or int64, got {indices.dtype}")
    try:
        axis = normalize_axis(int(ctx.attr("axis", 0)), len(data.shape))
    except ValueError as e:
        raise ctx.error(str(e)) from None
    n = data.shape[axis]
    q = len(indices.shape)
    shape = (*data.shape[:axis], *indices.shape, *data.shape[axis + 1 :])

    def body(*i: te.Expr) -> te.Expr:
        raw = te.cast("int64", indices[tuple(i[axis : axis + q])])
        wrapped = te.select(te.lt(raw, 0), raw + n, raw)
        pos = clamp_index(wrapped, n)
        return data[(*i[:axis], pos, *i[axis + q :])]

    return [te.compute(shape, body, name="gather")]
