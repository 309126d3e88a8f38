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
from lowering.ops.common import require_float
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
    order = int(ctx.attr("storage_order", 0))
    if order not in (0, 1):
        raise ctx.error("storage_order must be 0 or 1")
    dtype = ctx.input(0).dtype
    if dtype == "bool":
        raise ctx.error("MaxPool of bool tensors is not supported")
    x, out, win = _window_sum(ctx, "max", te.reduce_identity("max", dtype), "max_pool")
    if len(ctx.out_shapes) < 2:
        return [out]
    return [out, max_pool_indices(x, out, win, column_major=order == 1)]


def max_pool_indices(x: te.Tensor, peak: te.Tensor, win: Window,
                     column_major: bool) -> te.Tensor:
    """MaxPool's Indices: per output, where in x (flattened, pads not counted) its maximum
    is, the first in the window's row-major order as onnxruntime's scan keeps it (a later
    equal value does not replace it); spatial axes flattened column-major for storage_order
    1. A window of NaNs alone (no element equals the maximum) gives its first element."""
    spatial = x.shape[2:]
    total = 1
    for k in win.kernel:
        total *= k
    red = [te.reduce_axis(k, "r") for k in win.kernel]

    def linear(rs: Sequence[te.Expr]) -> te.Expr:  # row-major offset in the kernel
        out: te.Expr = te.Const(0, "int64")
        for r, k in zip(rs, win.kernel, strict=True):
            out = out * k + r
        return out

    def positions(o: Sequence[te.Expr], rs: Sequence[te.Expr]) -> list[te.Expr]:
        return [p - b for p, b in zip(window_index(o, rs, win), win.begin, strict=True)]

    def first(n: te.Var, c: te.Var, *o: te.Var) -> te.Expr:
        pos = positions(o, [r.var for r in red])
        inside = te.all_of([te.logical_and(te.ge(p, 0), te.lt(p, size))
                            for p, size in zip(pos, spatial, strict=True)])
        clamped = [te.minimum(te.maximum(p, 0), size - 1) for p, size in zip(pos, spatial,
                                                                             strict=True)]
        hit = te.logical_and(inside, te.eq(x[(n, c, *clamped)], peak[(n, c, *o)]))
        any_inside = te.select(inside, linear([r.var for r in red]) + total, total * 2)
        return te.reduce("min", te.select(hit, linear([r.var for r in red]), any_inside), red,
                         init=te.Const(2 * total, "int64"))

    found = te.compute(peak.shape, first, name="max_pool_first")

    def index(n: te.Var, c: te.Var, *o: te.Var) -> te.Expr:
        lin = found[(n, c, *o)]
        lin = te.select(te.ge(lin, total), lin - total, lin)  # no hit: the first inside
        rs: list[te.Expr] = []
        rest = 1
        for k in reversed(win.kernel):
            rs.insert(0, (lin // rest) % k)
            rest *= k
        pos = positions(o, rs)
        dims = list(zip(pos, spatial, strict=True))
        flat: te.Expr = n * x.shape[1] + c
        for p, size in reversed(dims) if column_major else dims:
            flat = flat * size + p
        return flat

    return te.compute(peak.shape, index, name="max_pool_indices")


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
    require_float(ctx, dtype, "AveragePool")
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
    require_float(ctx, x.dtype, "LpPool")
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
