"""Gather along any axis: `out[pre, idx, post] = data[pre, indices[idx], post]`.

Negative indices wrap once; the result is clamped into the axis so that a bad index can never
read outside `data` (onnxruntime reports an error there; aotc reads the nearest edge).
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.common import axis_of, data_index, index_input


@register_op("Gather")
def gather(ctx: OpContext) -> list[te.Tensor]:
    data, indices = ctx.input(0), index_input(ctx, 1)
    axis = axis_of(ctx, ctx.attr("axis", 0), len(data.shape))
    n = data.shape[axis]
    q = len(indices.shape)
    shape = (*data.shape[:axis], *indices.shape, *data.shape[axis + 1 :])

    def body(*i: te.Expr) -> te.Expr:
        pos = data_index(indices[tuple(i[axis : axis + q])], n)
        return data[(*i[:axis], pos, *i[axis + q :])]

    return [te.compute(shape, body, name="gather")]
