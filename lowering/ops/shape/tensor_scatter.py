"""TensorScatter (opset 24, a KV cache update): past_cache with, for each batch row b, the
update's sequence written along `axis` from position write_indices[b] (0 without the input),
wrapping around the axis in circular mode.

Written as a gather: cache position s of row b takes update position s - w[b] (mod the axis
length when circular) when that lies in the update, else keeps the past value. write_indices
is read at run time, so one program serves every step of a generation loop. Positions the
linear mode would write past the end (the reference's error) are not written.
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.common import axis_of, index_input
from lowering.ops.elementwise.operands import string_attr


@register_op("TensorScatter")
def tensor_scatter(ctx: OpContext) -> list[te.Tensor]:
    past, update = ctx.input(0), ctx.input(1)
    rank = len(past.shape)
    mode = string_attr(ctx, "mode", "linear")
    if mode not in ("linear", "circular"):
        raise ctx.error(f"mode '{mode}' is not one of linear, circular")
    axis = axis_of(ctx, ctx.attr("axis", -2), rank)
    if axis == 0:
        raise ctx.error("axis must not be the batch axis (0)")
    if len(update.shape) != rank or update.dtype != past.dtype or any(
            u != p for d, (u, p) in enumerate(zip(update.shape, past.shape, strict=True))
            if d != axis) or update.shape[axis] > past.shape[axis]:
        raise ctx.error(f"update {update.dtype}{list(update.shape)} does not fit past_cache "
                        f"{past.dtype}{list(past.shape)} along axis {axis}")
    starts = index_input(ctx, 2) if ctx.has_input(2) else None
    if starts is not None and starts.shape != (past.shape[0],):
        raise ctx.error(f"write_indices has shape {list(starts.shape)}, expected "
                        f"[{past.shape[0]}]")
    length, count = past.shape[axis], update.shape[axis]

    def body(*p: te.Var) -> te.Expr:
        start = te.Const(0, "int64") if starts is None else te.cast("int64", starts[p[0]])
        rel = p[axis] - start
        if mode == "circular":
            rel = rel % length  # te's mod of int64 is floored: in [0, length)
        inside = te.logical_and(te.ge(rel, 0), te.lt(rel, count))
        src = list(p)
        src[axis] = te.minimum(te.maximum(rel, 0), count - 1)  # clamped: in bounds either way
        return te.select(inside, update[tuple(src)], past[p])

    return [te.compute(past.shape, body, name="tensor_scatter")]
