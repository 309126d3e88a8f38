"""CumSum and CumProd along one axis (a constant input): inclusive or exclusive, forward or
reverse. The two differ only in how they combine (sum or product) and its identity (0 or 1).

Positions are counted from the end when `reverse` is set: with l the position of an output
along the axis (n - 1 - i reversed, else i), out = the sum (product) of the input at positions
j <= l (j < l when `exclusive`). A short axis (n <= 16) is one masked reduction over the whole
axis. A longer one is blocked, so that a row costs n·sqrt(n) steps instead of n²: block totals
of B ≈ sqrt(n) elements, their exclusive prefix totals, and each output as its block's prefix
combined with a masked reduction over its own block. Float sums (and products) therefore combine in that
order (blocks, then the elements of one), not strictly left to right as onnxruntime does.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.common import axis_of

DTYPES = ("float32", "float64", "int64", "int32", "uint64", "uint32")
DIRECT_MAX = 16  # axes up to this long are summed directly (n² work per row)

Index = tuple[te.Expr, ...]


def _axis(ctx: OpContext, rank: int) -> int:
    value = ctx.const(1, "axis")
    if value.size != 1 or value.dtype.kind not in "iu":
        raise ctx.error(f"axis must be one integer, got {value.dtype}{list(value.shape)}")
    return axis_of(ctx, int(value.reshape(-1)[0]), rank)


@register_op("CumSum")
def cumsum(ctx: OpContext) -> list[te.Tensor]:
    return _cumulative(ctx, "CumSum", "sum", 0)


@register_op("CumProd")
def cumprod(ctx: OpContext) -> list[te.Tensor]:
    return _cumulative(ctx, "CumProd", "prod", 1)


def _cumulative(ctx: OpContext, op: str, combiner: str, identity: int) -> list[te.Tensor]:
    x = ctx.input(0)
    if x.dtype not in DTYPES:
        raise ctx.error(f"{op} of {x.dtype} is not supported ({', '.join(DTYPES)})")
    if not x.shape:
        raise ctx.error(f"{op} needs an input of rank 1 or more")
    axis = _axis(ctx, len(x.shape))
    exclusive = bool(int(ctx.attr("exclusive", 0)))
    reverse = bool(int(ctx.attr("reverse", 0)))
    n = x.shape[axis]
    neutral = te.as_expr(identity, x.dtype)  # what a masked-out element contributes

    def at(i: Index, j: te.Expr) -> Index:
        return (*i[:axis], j, *i[axis + 1 :])

    def read(i: Index, j: te.Expr) -> te.Expr:
        """The input at position j (counted from the end when reversed), clamped in bounds."""
        j = te.minimum(j, te.Const(n - 1, "int64"))
        return x[at(i, n - 1 - j if reverse else j)]

    def position(i: Index) -> te.Expr:
        return n - 1 - i[axis] if reverse else i[axis]

    def included(j: te.Expr, pos: te.Expr) -> te.Expr:
        return te.lt(j, pos) if exclusive else te.le(j, pos)

    def masked_total(i: Index, length: int, first: Callable[[te.Expr], te.Expr],
                   keep: Callable[[te.Expr], te.Expr], init: te.Expr | None = None) -> te.Expr:
        r = te.reduce_axis(length, "c")
        j = first(r.var)
        return te.reduce(combiner, te.select(keep(j), read(i, j), neutral), [r], init)

    if n <= DIRECT_MAX:
        return [te.compute(x.shape, lambda *i: masked_total(
            i, n, lambda r: r, lambda j: included(j, position(i))), name=op.lower())]

    block = math.isqrt(n - 1) + 1  # ceil(sqrt(n))
    blocks = -(-n // block)
    blocks_shape = (*x.shape[:axis], blocks, *x.shape[axis + 1 :])
    sums = te.compute(blocks_shape, lambda *i: masked_total(
        i, block, lambda r: i[axis] * block + r, lambda j: te.lt(j, n)),
        name=f"{op.lower()}_blocks")

    def before(*i: te.Expr) -> te.Expr:
        r = te.reduce_axis(blocks, "b")
        return te.reduce(combiner, te.select(te.lt(r.var, i[axis]), sums[at(i, r.var)], neutral),
                         [r])

    prefix = te.compute(sums.shape, before, name=f"{op.lower()}_prefix")

    def out(*i: te.Expr) -> te.Expr:
        pos = position(i)
        start = (pos // block) * block
        return masked_total(i, block, lambda r: start + r, lambda j: included(j, pos),
                          init=prefix[at(i, pos // block)])

    return [te.compute(x.shape, out, name=op.lower())]
