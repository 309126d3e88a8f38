"""LRN: local response normalisation across channels.

`Y = X / (bias + alpha/size · Σ_{c' ∈ window(c)} X[c']²)^beta`, the window running from
c - ⌊(size-1)/2⌋ to c + ⌈(size-1)/2⌉ clipped to the channels. Squares go into a copy padded
with zeros along C, so the window sum (outside the innermost spatial axis) has no conditions.
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op


@register_op("LRN")
def lrn(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    if len(x.shape) < 2:
        raise ctx.error(f"input of rank {len(x.shape)}: LRN needs N and C axes")
    if x.dtype not in te.FLOAT_DTYPES:
        raise ctx.error(f"LRN of {x.dtype} tensors is not supported")
    size = ctx.attr("size")
    if size is None or int(size) < 1:
        raise ctx.error("attribute 'size' (a positive int) is required")
    size = int(size)
    alpha = float(ctx.attr("alpha", 1e-4))
    beta = float(ctx.attr("beta", 0.75))
    bias = float(ctx.attr("bias", 1.0))
    n, channels, *spatial = x.shape
    before = (size - 1) // 2

    def square(b: te.Var, c: te.Var, *s: te.Var) -> te.Expr:
        j = c - before
        v = x[(b, j, *s)]
        return te.select(te.logical_and(te.ge(j, 0), te.lt(j, channels)), v * v, 0.0)

    sq = te.compute((n, channels + size - 1, *spatial), square, name="lrn_sq")

    def window_sum(b: te.Var, c: te.Var, *s: te.Var) -> te.Expr:
        r = te.reduce_axis(size, "r")
        return te.reduce("sum", sq[(b, c + r.var, *s)], [r])

    total = te.compute(x.shape, window_sum, name="lrn_sum")
    coef = alpha / size
    return [te.compute(
        x.shape,
        lambda *i: x[i] / te.power(total[i] * coef + bias, beta),
        name="lrn",
    )]
