"""ScatterElements: `out = data`, then `out[q with q[axis] = indices[q]] (op)= updates[q]` for
every position q of `indices` (and of `updates`, the same shape).

An output element p can only be hit by the updates that share its other coordinates, so it
looks along the axis of `indices` at p: `indices.shape[axis]` candidates (see `scatter.py` for
the reduction, the order of duplicates and out-of-range indices).
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.common import axis_of, data_index, index_input
from lowering.ops.shape.scatter import Index, reduction, scatter


@register_op("ScatterElements")
def scatter_elements(ctx: OpContext) -> list[te.Tensor]:
    data, indices, updates = ctx.input(0), index_input(ctx, 1), ctx.input(2)
    rank = len(data.shape)
    if updates.shape != indices.shape or updates.dtype != data.dtype:
        raise ctx.error(f"updates {updates.dtype}{list(updates.shape)} must have the shape of "
                        f"indices {list(indices.shape)} and the type of data {data.dtype}")
    if len(indices.shape) != rank or rank == 0:
        raise ctx.error(f"indices have rank {len(indices.shape)}, data rank {rank} "
                        "(they must be equal and at least 1)")
    axis = axis_of(ctx, ctx.attr("axis", 0), rank)
    if any(m > n for d, (m, n) in enumerate(zip(indices.shape, data.shape, strict=True))
           if d != axis):
        raise ctx.error(f"indices {list(indices.shape)} exceed data {list(data.shape)} "
                        "off the axis")
    combiner = reduction(ctx, data.dtype)
    n = data.shape[axis]

    def source(p: Index, t: te.Expr) -> Index:
        """The update position on p's line along the axis, t-th along it (clamped where p lies
        beyond the indices: `inside` then rules it out)."""
        return tuple(t if d == axis else (te.minimum(p[d], te.Const(m - 1, "int64")) if m < k
                                           else p[d])
                     for d, (m, k) in enumerate(zip(indices.shape, data.shape, strict=True)))

    def hit(p: Index, u: Index) -> te.Expr:
        inside = te.all_of([te.lt(p[d], m) for d, (m, k) in
                            enumerate(zip(indices.shape, data.shape, strict=True))
                            if d != axis and m < k])
        return te.logical_and(inside, te.eq(data_index(indices[source(p, u[0])], n), p[axis]))

    def value(p: Index, u: Index) -> te.Expr:
        return updates[source(p, u[0])]

    return [scatter(data, combiner, (indices.shape[axis],), rank, hit, value,
                    "scatter_elements")]
