"""CumSum and CumProd along one axis: inclusive or exclusive, forward or reverse. The two differ
only in how they combine (sum or product) and its identity (0 or 1).

The axis (input 1: one int32 or int64, a scalar or a 1-element tensor) is best a constant: the
result is then computed along that axis only. It may also be computed at run time, since it
never changes the output's shape: the result is then computed along every axis of the input
and the last stage picks one by the loaded value (negative counting from the end; a value
still out of range picks some axis's result, never a read out of bounds). That costs rank
times the work of a constant axis.

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
from dataclasses import dataclass

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.common import axis_of, data_index

DTYPES = ("float32", "float64", "int64", "int32", "uint64", "uint32")
DIRECT_MAX = 16  # axes up to this long are summed directly (n² work per row)

Index = tuple[te.Expr, ...]


def _axis(ctx: OpContext, rank: int) -> int | te.Expr:
    """The axis: an int in [0, rank) when it is a constant, else its load from input 1 as an
    index in [0, rank) (a negative value counts from the end, then out-of-range ones clamp)."""
    t = ctx.input(1)
    if t.size != 1 or t.dtype not in te.INT_DTYPES:
        raise ctx.error(f"axis must be one integer, got {t.dtype}{list(t.shape)}")
    value = ctx.consts[1] if len(ctx.consts) > 1 else None
    if value is not None:
        return axis_of(ctx, int(value.reshape(-1)[0]), rank)
    return data_index(t[(0,) * len(t.shape)], rank)


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
    scan = _Scan(x, op.lower(), combiner, te.as_expr(identity, x.dtype),
                 exclusive=bool(int(ctx.attr("exclusive", 0))),
                 reverse=bool(int(ctx.attr("reverse", 0))))
    if isinstance(axis, int):
        return [scan.along(axis)]
    return [_pick_axis(axis, [scan.along(a) for a in range(len(x.shape))], op.lower())]


def _pick_axis(axis: te.Expr, results: list[te.Tensor], name: str) -> te.Tensor:
    """The element of results[axis] (axis in [0, len(results))) at each index."""
    if len(results) == 1:  # a rank-1 input has one axis whatever the value says
        return results[0]

    def body(*i: te.Expr) -> te.Expr:
        out = results[-1][i]
        for a in range(len(results) - 2, -1, -1):
            out = te.select(te.eq(axis, a), results[a][i], out)
        return out

    return te.compute(results[0].shape, body, name=f"{name}_axis")


@dataclass(frozen=True)
class _Scan:
    """The cumulative combination of `x`, computed along one axis given as an int."""

    x: te.Tensor
    name: str
    combiner: str  # "sum" or "prod"
    neutral: te.Expr  # what a masked-out element contributes
    exclusive: bool
    reverse: bool

    def along(self, axis: int) -> te.Tensor:
        x, name, combiner, neutral = self.x, self.name, self.combiner, self.neutral
        exclusive, reverse = self.exclusive, self.reverse
        n = x.shape[axis]

        def at(i: Index, j: te.Expr) -> Index:
            return (*i[:axis], j, *i[axis + 1 :])

        def read(i: Index, j: te.Expr) -> te.Expr:
            """The input at position j (counted from the end when reversed), clamped in
            bounds."""
            j = te.minimum(j, te.Const(n - 1, "int64"))
            return x[at(i, n - 1 - j if reverse else j)]

        def position(i: Index) -> te.Expr:
            return n - 1 - i[axis] if reverse else i[axis]

        def included(j: te.Expr, pos: te.Expr) -> te.Expr:
            return te.lt(j, pos) if exclusive else te.le(j, pos)

        def masked_total(i: Index, length: int, first: Callable[[te.Expr], te.Expr],
                         keep: Callable[[te.Expr], te.Expr],
                         init: te.Expr | None = None) -> te.Expr:
            r = te.reduce_axis(length, "c")
            j = first(r.var)
            return te.reduce(combiner, te.select(keep(j), read(i, j), neutral), [r], init)

        if n <= DIRECT_MAX:
            return te.compute(x.shape, lambda *i: masked_total(
                i, n, lambda r: r, lambda j: included(j, position(i))), name=name)

        block = math.isqrt(n - 1) + 1  # ceil(sqrt(n))
        blocks = -(-n // block)
        blocks_shape = (*x.shape[:axis], blocks, *x.shape[axis + 1 :])
        sums = te.compute(blocks_shape, lambda *i: masked_total(
            i, block, lambda r: i[axis] * block + r, lambda j: te.lt(j, n)),
            name=f"{name}_blocks")

        def before(*i: te.Expr) -> te.Expr:
            r = te.reduce_axis(blocks, "b")
            return te.reduce(combiner, te.select(te.lt(r.var, i[axis]), sums[at(i, r.var)],
                                                 neutral), [r])

        prefix = te.compute(sums.shape, before, name=f"{name}_prefix")

        def out(*i: te.Expr) -> te.Expr:
            pos = position(i)
            start = (pos // block) * block
            return masked_total(i, block, lambda r: start + r, lambda j: included(j, pos),
                                init=prefix[at(i, pos // block)])

        return te.compute(x.shape, out, name=name)
