"""GatherElements: `out[i] = data[i with i[axis] replaced by indices[i]]` (out has indices' shape).

Negative indices count from the end; an index outside the axis is clamped to its nearest edge
(undefined in ONNX, an error in onnxruntime), so no read ever leaves `data`.
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.common import axis_of, data_index, index_input


@register_op("GatherElements")
def gather_elements(ctx: OpContext) -> list[te.Tensor]:
    data, indices = ctx.input(0), index_input(ctx, 1)
    rank = len(data.shape)
    if len(indices.shape) != rank or rank == 0:
        raise ctx.error(f"indices have rank {len(indices.shape)}, data rank {rank} "
                        "(they must be equal and at least 1)")
    axis = axis_of(ctx, ctx.attr("axis", 0), rank)
    for d, (m, n) in enumerate(zip(indices.shape, data.shape, strict=True)):
        if d != axis and m > n:
            raise ctx.error(f"indices {list(indices.shape)} exceed data {list(data.shape)} "
                            f"along axis {d}")

    def body(*i: te.Expr) -> te.Expr:
        pos = data_index(indices[i], data.shape[axis])
        return data[(*i[:axis], pos, *i[axis + 1 :])]

    return [te.compute(indices.shape, body, name="gather_elements")]
