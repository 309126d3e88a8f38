"""Reduce* operators (opset-18 form: axes as an optional constant input), one table of parts.

Each reduction is a combiner over an element function, optionally finished by an element-wise
stage (`ReduceMean` divides, `ReduceL2` takes the root, ...). ReduceLogSumExp subtracts the
row maximum first, as onnxruntime does, so large inputs do not overflow.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from lowering import te
from lowering.ops import OpContext, pinned, register_op
from lowering.ops.reduce.core import normalize_axes, reduce_compute, reduced_shape, stat_index


@dataclass(frozen=True)
class Reduction:
    combiner: str
    elem: Callable[[te.Expr], te.Expr]
    # (reduced value, number of elements reduced) -> output value; None = the value itself.
    # The number is an expression where a reduced axis runs to a run-time dimension.
    finish: Callable[[te.Expr, te.Expr], te.Expr] | None = None
    float_only: bool = False


def _mean(s: te.Expr, n: te.Expr) -> te.Expr:
    return s / (te.Const(n.value, s.dtype) if isinstance(n, te.Const) else te.cast(s.dtype, n))


REDUCTIONS: dict[str, Reduction] = {
    "ReduceSum": Reduction("sum", lambda x: x),
    "ReduceMean": Reduction("sum", lambda x: x, _mean),
    "ReduceMax": Reduction("max", lambda x: x),
    "ReduceMin": Reduction("min", lambda x: x),
    "ReduceProd": Reduction("prod", lambda x: x),
    "ReduceL1": Reduction("sum", lambda x: te.unary("abs", x)),
    "ReduceL2": Reduction("sum", lambda x: x * x, lambda s, n: te.unary("sqrt", s), True),
    "ReduceSumSquare": Reduction("sum", lambda x: x * x),
    "ReduceLogSum": Reduction("sum", lambda x: x, lambda s, n: te.unary("log", s), True),
}


def reduce_axes_of(ctx: OpContext, rank: int) -> list[int] | None:
    """The axes to reduce, or None for "no reduction" (empty axes with noop_with_empty_axes)."""
    given = ctx.inputs[1] if ctx.has_input(1) else None
    if given is not None and given.size == 0:  # an empty list, whatever computes it
        axes: np.ndarray | None = np.zeros(0, np.int64)
    else:
        axes = ctx.optional_const(1)
    if axes is None or np.asarray(axes).size == 0:
        if ctx.attr("noop_with_empty_axes", 0):
            return None
        return list(range(rank))
    return normalize_axes(ctx, np.asarray(axes).reshape(-1).tolist(), rank)


def reduced(ctx: OpContext, x: te.Tensor,
            build: Callable[[list[int] | None], te.Tensor]) -> te.Tensor:
    """`build(axes)` for the node's axes (None: no reduction). Axes given at run time are
    pinned by the input and output shapes and checked (pinned.py); sets that differ only in
    size-1 axes mean the same. Where the shapes fit several meanings (a [3, 2, 2] input
    reduced to [3, 2] over axis 1 or 2), each is built and the one the run-time axes name is
    selected element by element: correct for any of them, at the cost of every reduction."""
    rank = len(x.shape)
    given = ctx.inputs[1] if ctx.has_input(1) else None
    if given is None or given.size == 0 or pinned.run_time(ctx, 1) is None:
        return build(reduce_axes_of(ctx, rank))
    keep = bool(ctx.attr("keepdims", 1))
    out = tuple(ctx.out_shapes[0])
    # distinct entries, as normalize_axes asks of constant axes
    fitting = pinned.subsets_fitting(rank, given.size,
                                     lambda s: reduced_shape(x.shape, s, keep) == out)
    groups: dict[tuple[int, ...], list[pinned.AxesPattern]] = {}
    for s in fitting:
        groups.setdefault(tuple(d for d in s if x.shape[d] != 1), []).append(
            tuple(d in s for d in range(rank)))
    if not groups or len(groups) > pinned.MAX_MEANINGS:
        raise pinned.ambiguous(ctx, 1, "axes", " or ".join(f"axes {list(s)}" for s in fitting)
                               if fitting else "no axes")
    pinned.axes(ctx, 1, rank, [p for ps in groups.values() for p in ps], "axes")
    outs = [build([d for d, named in enumerate(ps[0]) if named]) for ps in groups.values()]
    fits = [pinned.axes_fit(ctx, 1, rank, ps) for ps in groups.values()]
    return pinned.by_meaning(fits, outs, ctx.op_type.lower())


def _identity(ctx: OpContext, red: Reduction, x: te.Tensor) -> te.Tensor:
    """Reduction over no axes: the element function and the finish, element by element."""

    def body(*idx: te.Expr) -> te.Expr:
        v = red.elem(x[idx])
        return red.finish(v, te.Const(1, "int64")) if red.finish else v

    return te.compute(x.shape, body, name=ctx.op_type.lower())


def _check_dtype(ctx: OpContext, x: te.Tensor, float_only: bool) -> None:
    if x.dtype == "bool" or (float_only and x.dtype not in te.FLOAT_DTYPES):
        raise ctx.error(f"{ctx.op_type} on {x.dtype} data is not supported")


def _reduce(ctx: OpContext) -> list[te.Tensor]:
    red = REDUCTIONS[ctx.op_type]
    x = ctx.input(0)
    if x.dtype == "bool" and red.combiner in ("max", "min"):
        # a maximum of bools is "any", a minimum "all" (true over nothing): on bytes
        b = te.compute(x.shape, lambda *i: te.cast("uint8", x[i]), name=x.name, inline=True)
        r = reduced(ctx, b, lambda axes: _reduce_over(ctx, red, b, axes))
        return [te.compute(r.shape, lambda *i: te.cast("bool", r[i]), name=r.name + "_bool")]
    _check_dtype(ctx, x, red.float_only)
    return [reduced(ctx, x, lambda axes: _reduce_over(ctx, red, x, axes))]


def _reduce_over(ctx: OpContext, red: Reduction, x: te.Tensor, axes: list[int] | None
                 ) -> te.Tensor:
    if axes is None:
        return _identity(ctx, red, x)
    keep = bool(ctx.attr("keepdims", 1))
    name = ctx.op_type.lower()
    acc = reduce_compute(x.shape, axes, keep, red.combiner, lambda i: red.elem(x[i]), name)
    if red.finish is None:
        return acc
    finish = red.finish
    n = te.run_product([x.shape[d] for d in axes])  # the run-time count over a DynExtent
    return te.compute(acc.shape, lambda *i: finish(acc[i], n), name=name + "_finish")


for _name in REDUCTIONS:
    register_op(_name)(_reduce)


@register_op("ReduceLogSumExp")
def reduce_log_sum_exp(ctx: OpContext) -> list[te.Tensor]:
    """`m + log(sum(exp(x - m)))` with `m` the maximum (0 where it is infinite)."""
    x = ctx.input(0)
    _check_dtype(ctx, x, True)
    return [reduced(ctx, x, lambda axes: _log_sum_exp_over(ctx, x, axes))]


def _log_sum_exp_over(ctx: OpContext, x: te.Tensor, axes: list[int] | None) -> te.Tensor:
    if axes is None:
        return te.compute(x.shape, lambda *i: x[i], name="reducelogsumexp")
    keep = bool(ctx.attr("keepdims", 1))
    # only a shift: NaN-propagating or not, a NaN reaches the result through the sum (softmax.py)
    raw = reduce_compute(x.shape, axes, True, "max_nan", lambda i: x[i], "lse_max")

    def shift(*i: te.Expr) -> te.Expr:
        m = raw[i]
        finite = te.logical_and(te.gt(m, -math.inf), te.lt(m, math.inf))
        return te.select(finite, m, te.Const(0, m.dtype))

    m = te.compute(raw.shape, shift, name="lse_shift")
    s = reduce_compute(
        x.shape, axes, True, "sum", lambda i: te.unary("exp", x[i] - m[stat_index(i, axes)]),
        "lse_sum",
    )
    out_shape = ctx.out_shapes[0]

    def finish(*o: te.Expr) -> te.Expr:
        it = iter(o)
        idx = tuple(
            te.Const(0, "int64") if (d in axes and not keep) else next(it)
            for d in range(len(x.shape))
        )
        return te.unary("log", s[idx]) + m[idx]

    return te.compute(out_shape, finish, name="reducelogsumexp")
