"""MaxPool, AveragePool and LpPool: N-d sliding-window reductions (kernel, strides, pads,
dilations, auto_pad, ceil_mode; count_include_pad for the average; p for LpPool).

Both read an explicit padded copy of the input (filled with the type's minimum for max, zero
for the average), so the window loops carry no conditions. The average divides each window sum
by the number of window positions that fall inside the input (or inside input and pads when
count_include_pad=1), a closed form of the output index. LpPool sums |x|^p over the window
(pads add 0) and takes the p-th root, as onnxruntime: (sum |x|^p)^(1/p).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.nn.geometry import Window, window, window_index, window_source


def _setup(ctx: OpContext) -> tuple[te.Tensor, Window, tuple[int, ...]]:
    x = ctx.input(0)
    if len(x.shape) < 3:
        raise ctx.error(f"input of rank {len(x.shape)}: pooling needs N, C and spatial axes")
    kernel = ctx.attr("kernel_shape")
    if kernel is None:
        raise ctx.error("attribute 'kernel_shape' is required")
    spatial = x.shape[2:]
    if len(kernel) != len(spatial):
        raise ctx.error(f"kernel_shape {list(kernel)} for {len(spatial)} spatial axes")
    win = window(ctx, spatial, kernel)
    out_shape = ctx.out_shapes[0]
    if out_shape[:2] != x.shape[:2] or len(out_shape) != len(x.shape):
        raise ctx.error(f"inferred output shape {list(out_shape)} for input {list(x.shape)}")
    return x, win, out_shape


def _window_sum(
    ctx: OpContext, combiner: str, fill: te.ExprLike, name: str
) -> tuple[te.Tensor, te.Tensor, Window]:
    x, win, out_shape = _setup(ctx)
    src = window_source(x, win, x.shape[2:], out_shape[2:], fill)
    red = [te.reduce_axis(k, "r") for k in win.kernel]

    def body(n: te.Var, c: te.Var, *o: te.Var) -> te.Expr:
        pos = window_index(o, [r.var for r in red], win)
        return te.reduce(combiner, src[(n, c, *pos)], red)

    return x, te.compute(out_shape, body, name=name), win


@register_op("MaxPool")
def max_pool(ctx: OpContext) -> list[te.Tensor]:
    if len(ctx.out_shapes) > 1:
        raise ctx.error("the Indices output of MaxPool is not supported",
                        hint="drop the second output if the model does not use it")
    if int(ctx.attr("storage_order", 0)) not in (0, 1):
        raise ctx.error("storage_order must be 0 or 1")
    dtype = ctx.input(0).dtype
    if dtype == "bool":
        raise ctx.error("MaxPool of bool tensors is not supported")
    _, out, _ = _window_sum(ctx, "max", te.reduce_identity("max", dtype), "max_pool")
    return [out]


def _inside_count(
    o: te.Expr, k: int, s: int, dil: int, begin: int, lo: int, hi: int
) -> te.Expr:
    """How many of the positions o·s - begin + r·dil (0 ≤ r < k) lie in [lo, hi)."""
    start = o * s - begin
    first = te.maximum(-((start - lo) // dil), 0)  # ceil((lo - start) / dil), at least 0
    last = te.minimum((hi - 1 - start) // dil, k - 1)
    return te.maximum(last - first + 1, 0)


def _divisor(
    o: Sequence[te.Var], win: Window, in_sizes: Sequence[int], include_pad: bool
) -> te.Expr:
    count: te.Expr = te.Const(1, "int64")
    for d, od in enumerate(o):
        lo, hi = (-win.begin[d], in_sizes[d] + win.end[d]) if include_pad else (0, in_sizes[d])
        count = count * _inside_count(od, win.kernel[d], win.strides[d], win.dilations[d],
                                      win.begin[d], lo, hi)
    return count


@register_op("AveragePool")
def average_pool(ctx: OpContext) -> list[te.Tensor]:
    dtype = ctx.input(0).dtype
    if dtype not in te.FLOAT_DTYPES:
        raise ctx.error(f"AveragePool of {dtype} tensors is not supported (float only)")
    include_pad = bool(int(ctx.attr("count_include_pad", 0)))
    x, total, win = _window_sum(ctx, "sum", 0.0, "avg_pool_sum")
    in_sizes = x.shape[2:]

    def mean(n: te.Var, c: te.Var, *o: te.Var) -> te.Expr:
        count = te.maximum(_divisor(o, win, in_sizes, include_pad), 1)
        return total[(n, c, *o)] / te.cast(dtype, count)

    return [te.compute(total.shape, mean, name="avg_pool")]


@register_op("LpPool")
def lp_pool(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    if x.dtype not in te.FLOAT_DTYPES:
        raise ctx.error(f"LpPool of {x.dtype} tensors is not supported (float only)")
    p = int(ctx.attr("p", 2))
    if p < 1:
        raise ctx.error(f"p must be a positive integer, got {p}")

    def power(*i: te.Expr) -> te.Expr:  # |x|^p, inlined into the window sum
        a = te.unary("abs", x[i])
        return a if p == 1 else a * a if p == 2 else te.power(a, te.Const(p, x.dtype))

    powered = te.compute(x.shape, power, name="lp_pool_pow", inline=True)
    _, total, _ = _window_sum(replace(ctx, inputs=[powered]), "sum", 0.0, "lp_pool_sum")

    def root(*i: te.Expr) -> te.Expr:
        s = total[i]
        return s if p == 1 else te.unary("sqrt", s) if p == 2 else te.power(
            s, te.Const(1.0 / p, x.dtype))

    return [te.compute(total.shape, root, name="lp_pool")]
