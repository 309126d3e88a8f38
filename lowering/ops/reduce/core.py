"""Reduction geometry every reducing operator shares: axes, kept dims, index maps, stat loads.

`reduce_compute` builds `out[kept idx] = combiner_{r over axes} elem(input idx)`, where the input
index takes the output's variables on kept axes and reduction variables on reduced axes. With
keepdims the reduced axes stay as size-1 dimensions (index 0), which is also how the row
statistics of Softmax/LayerNormalization/ArgMax are stored and read back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from lowering import te
from lowering.ops import OpContext
from lowering.ops.common import normalize_axis

Elem = Callable[[tuple[te.Expr, ...]], te.Expr]


def normalize_axes(ctx: OpContext, axes: Sequence[int], rank: int) -> list[int]:
    """Sorted, non-negative, distinct axes; an error for out-of-range or repeated ones."""
    try:
        out = [normalize_axis(int(a), rank) for a in axes]
    except ValueError as e:
        raise ctx.error(str(e)) from None
    if len(set(out)) != len(out):
        raise ctx.error(f"axes {list(axes)} repeat an axis")
    return sorted(out)


def reduced_shape(shape: Sequence[int], axes: Sequence[int], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if d in axes else n for d, n in enumerate(shape))
    return tuple(n for d, n in enumerate(shape) if d not in axes)


def reduce_compute(
    shape: Sequence[int],
    axes: Sequence[int],
    keepdims: bool,
    combiner: str,
    elem: Elem,
    name: str,
    init: te.ExprLike | None = None,
) -> te.Tensor:
    """Reduce `elem(input index)` over `axes` of an input of `shape`."""
    raxes = {d: te.reduce_axis(shape[d], "r") for d in axes}

    def body(*idx: te.Expr) -> te.Expr:
        it = iter(idx)
        full: list[te.Expr] = []
        for d in range(len(shape)):
            if d in raxes:
                if keepdims:
                    next(it)
                full.append(raxes[d].var)
            else:
                full.append(next(it))
        return te.reduce(combiner, elem(tuple(full)), [raxes[d] for d in axes], init)

    return te.compute(reduced_shape(shape, axes, keepdims), body, name=name)


def stat_index(idx: Sequence[te.Expr], axes: Sequence[int]) -> tuple[te.Expr, ...]:
    """Index of a keepdims statistic for the full-shape index `idx` (reduced axes → 0)."""
    zero = te.Const(0, "int64")
    return tuple(zero if d in axes else i for d, i in enumerate(idx))
