"""OneHot: `out[..., d, ...] = values[1] if indices[...] == d else values[0]`, the depth axis
inserted at `axis`.

`depth` must be a constant or pinned by the output's shape (checked at run time, pinned.py);
`values` ([off, on]) may be computed.
Float indices are truncated toward zero, as onnxruntime casts them; a negative index counts
from the end of the depth axis once; an index outside [-depth, depth) matches no position, so
its row is all `off` (as ONNX specifies). Float indices are first clamped into
[-depth - 1, depth] (NaN to -depth - 1), so that their conversion to int64 is always defined.
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, pinned, register_op
from lowering.ops.common import axis_of


@register_op("OneHot")
def one_hot(ctx: OpContext) -> list[te.Tensor]:
    indices, values = ctx.input(0), ctx.input(2)
    if indices.dtype == "bool":
        raise ctx.error("OneHot indices must be numbers, got bool")
    if pinned.run_time(ctx, 1) is not None:  # the output's length along the axis pins it
        axis = axis_of(ctx, ctx.attr("axis", -1), len(indices.shape) + 1)
        depth_value = pinned.values(ctx, 1, [ctx.out_shapes[0][axis]] * ctx.input(1).size,
                                    "depth")
    else:
        depth_value = ctx.const(1, "depth")
    if depth_value.size != 1:
        raise ctx.error(f"depth must hold one value, got shape {list(depth_value.shape)}")
    depth = int(depth_value.reshape(-1)[0])
    if depth < 1:
        raise ctx.error(f"depth must be positive, got {depth}")
    if values.shape != (2,):
        raise ctx.error(f"values must have shape [2] (off, on), got {list(values.shape)}")
    rank = len(indices.shape)
    axis = axis_of(ctx, ctx.attr("axis", -1), rank + 1)
    shape = (*indices.shape[:axis], depth, *indices.shape[axis:])
    off, on = (values[te.Const(k, "int64")] for k in (0, 1))

    def position(i: tuple[te.Expr, ...]) -> te.Expr:
        raw = indices[i]
        if raw.dtype in te.FLOAT_DTYPES:
            low, high = te.as_expr(-depth - 1, raw.dtype), te.as_expr(depth, raw.dtype)
            raw = te.minimum(te.maximum(raw, low), high)  # te's max maps NaN to `low`
        p = te.cast("int64", raw)
        return te.select(te.lt(p, 0), p + depth, p)

    def body(*o: te.Expr) -> te.Expr:
        hit = te.eq(position((*o[:axis], *o[axis + 1 :])), o[axis])
        return te.select(hit, on, off)

    return [te.compute(shape, body, name="one_hot")]
