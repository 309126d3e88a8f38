"""TopK: the k largest (or smallest) elements along an axis and their positions, sorted.

The order is onnxruntime's: a NaN ranks above every number (first when `largest`, last when
not), equal values (±0 included) come lower index first. Output is always sorted, which also
satisfies `sorted=0` (the order is then unspecified). k must be a constant, or is pinned by the
outputs' length along the axis and checked at run time (pinned.py). The selection itself (no data-dependent loops in te) is
`topk_select.top_positions`.
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, pinned, register_op
from lowering.ops.common import axis_of
from lowering.ops.reduce.topk_select import Order, top_positions


def _k(ctx: OpContext, n: int, axis: int) -> int:
    if pinned.run_time(ctx, 1) is not None:  # the outputs' length along the axis pins it
        return int(pinned.values(ctx, 1, [ctx.out_shapes[0][axis]], "k").reshape(-1)[0])
    if len(ctx.consts) < 2 or ctx.consts[1] is None:
        raise ctx.error("k (input 1) must be a constant: it sets the length of the outputs "
                        "along the axis", hint="give k as an initializer or a Constant")
    value = ctx.const(1, "k")
    if value.size != 1 or value.dtype.kind not in "iu":
        raise ctx.error(f"k must be one integer, got {value.dtype}{list(value.shape)}")
    k = int(value.reshape(-1)[0])
    if not 0 <= k <= n:
        raise ctx.error(f"k = {k} is outside [0, {n}] (the axis length)")
    return k


@register_op("TopK")
def topk(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    if x.dtype == "bool":
        raise ctx.error("TopK of bool data is not supported")
    if not x.shape:
        raise ctx.error("TopK needs an input of rank 1 or more")
    axis = axis_of(ctx, ctx.attr("axis", -1), len(x.shape))
    k = _k(ctx, x.shape[axis], axis)
    order = Order(largest=bool(int(ctx.attr("largest", 1))),
                  is_float=x.dtype in te.FLOAT_DTYPES)
    out_shape = (*x.shape[:axis], k, *x.shape[axis + 1 :])
    if k == 0:  # empty outputs: nothing to select (a stage of no elements)
        return [te.compute(out_shape, lambda *o: te.Const(0, x.dtype), name="topk_values"),
                te.compute(out_shape, lambda *o: te.Const(0, "int64"), name="topk_indices")]
    index = top_positions(x, axis, k, order)

    def value(*o: te.Expr) -> te.Expr:
        return x[(*o[:axis], index[o], *o[axis + 1 :])]

    return [te.compute(out_shape, value, name="topk_values"), index]
