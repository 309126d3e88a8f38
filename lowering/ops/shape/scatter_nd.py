"""ScatterND: `out = data`, then `out[indices[u]] (op)= updates[u]` for every index tuple u of
`indices` (shape `[U..., k]`): each tuple addresses the first k axes of `data`, and the update
is the slice over the others (`updates` has shape `[U..., data.shape[k:]...]`).

Whether tuple u hits an output element depends on the element's first k coordinates alone, so
without a reduction the last hit is found once per slice, not per element (see `scatter.py` for
the reductions, the order of duplicates and out-of-range indices).
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.common import data_index, index_input
from lowering.ops.shape.scatter import Index, reduction, scatter


@register_op("ScatterND")
def scatter_nd(ctx: OpContext) -> list[te.Tensor]:
    data, indices, updates = ctx.input(0), index_input(ctx, 1), ctx.input(2)
    if not indices.shape or not data.shape:
        raise ctx.error("data and indices must have rank 1 or more")
    k = indices.shape[-1]
    if not 1 <= k <= len(data.shape):
        raise ctx.error(f"index tuples of length {k} cannot address a rank-{len(data.shape)} "
                        "tensor")
    lead = indices.shape[:-1]
    if updates.shape != (*lead, *data.shape[k:]) or updates.dtype != data.dtype:
        raise ctx.error(f"updates are {updates.dtype}{list(updates.shape)}, expected "
                        f"{data.dtype}{[*lead, *data.shape[k:]]}")
    combiner = reduction(ctx, data.dtype)

    def hit(key: Index, u: Index) -> te.Expr:
        return te.all_of([
            te.eq(data_index(indices[(*u, te.Const(m, "int64"))], data.shape[m]), key[m])
            for m in range(k)])

    def value(p: Index, u: Index) -> te.Expr:
        return updates[(*u, *p[k:])]

    return [scatter(data, combiner, lead, k, hit, value, "scatter_nd")]
