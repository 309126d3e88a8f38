"""GatherND: slices of `data` picked by index tuples, the first `batch_dims` axes shared.

With indices of shape `[b..., u..., k]`, `out[b, u, s] = data[b, indices[b, u, 0..k-1], s]`:
the last axis of `indices` holds a k-tuple addressing axes `batch_dims .. batch_dims + k - 1`
of `data`, and `s` runs over the remaining axes. Negative entries count from the end of their
axis; out-of-range ones are clamped to the nearest edge (undefined in ONNX), so no read ever
leaves `data`.
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.common import data_index, index_input


@register_op("GatherND")
def gather_nd(ctx: OpContext) -> list[te.Tensor]:
    data, indices = ctx.input(0), index_input(ctx, 1)
    b = int(ctx.attr("batch_dims", 0))
    r, q = len(data.shape), len(indices.shape)
    if q < 1 or r < 1:
        raise ctx.error("data and indices must have rank 1 or more")
    k = indices.shape[-1]
    if not 0 <= b < min(r, q):
        raise ctx.error(f"batch_dims {b} must be below the ranks of data ({r}) and indices ({q})")
    if not 1 <= k <= r - b:
        raise ctx.error(f"index tuples of length {k} cannot address {r - b} axes of data "
                        f"past batch_dims {b}")
    if indices.shape[:b] != data.shape[:b]:
        raise ctx.error(f"batch axes differ: indices {list(indices.shape)}, "
                        f"data {list(data.shape)}, batch_dims {b}")
    lead = indices.shape[:-1]
    shape = (*lead, *data.shape[b + k :])

    def body(*i: te.Expr) -> te.Expr:
        u, s = i[: q - 1], i[q - 1 :]
        tup = [data_index(indices[(*u, te.Const(m, "int64"))], data.shape[b + m])
               for m in range(k)]
        return data[(*u[:b], *tup, *s)]

    return [te.compute(shape, body, name="gather_nd")]
