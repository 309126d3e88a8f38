"""Softmax and LogSoftmax (opset-13 semantics: along one axis), numerically stable.

Three stages: the row maximum (NaN-propagating, see `_row_stats`), the row sum of
`exp(x - max)` (both non-inline reductions kept with size-1 dims), then one element-wise
stage. A row of all -inf gives NaN, as in onnxruntime (`-inf - -inf`).
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.common import normalize_axis
from lowering.ops.reduce.core import reduce_compute, stat_index


def _row_stats(ctx: OpContext) -> tuple[te.Tensor, int, te.Tensor, te.Tensor]:
    x = ctx.input(0)
    if x.dtype not in te.FLOAT_DTYPES:
        raise ctx.error(f"{ctx.op_type} on {x.dtype} data is not supported")
    try:
        axis = normalize_axis(int(ctx.attr("axis", -1)), len(x.shape))
    except ValueError as e:
        raise ctx.error(str(e)) from None
    axes = [axis]
    # The maximum is only a shift, so "max_nan" (te.Binary) gives the same outputs as the
    # NaN-ignoring, signed-zero-ordering "max": a NaN in the row reaches every output through
    # the sum either way, and exp(x - m) is the same for m = +0 and -0. LLVM reduces it by
    # halves: softmax over 12x128x128 takes 0.70-0.75x the time (ARCHITECTURE.md).
    m = reduce_compute(x.shape, axes, True, "max_nan", lambda i: x[i], "softmax_max")
    s = reduce_compute(
        x.shape, axes, True, "sum", lambda i: te.unary("exp", x[i] - m[stat_index(i, axes)]),
        "softmax_sum",
    )
    return x, axis, m, s


@register_op("Softmax")
def softmax(ctx: OpContext) -> list[te.Tensor]:
    x, axis, m, s = _row_stats(ctx)

    def body(*i: te.Expr) -> te.Expr:
        j = stat_index(i, [axis])
        return te.unary("exp", x[i] - m[j]) / s[j]

    return [te.compute(x.shape, body, name="softmax")]


@register_op("LogSoftmax")
def log_softmax(ctx: OpContext) -> list[te.Tensor]:
    x, axis, m, s = _row_stats(ctx)
    log_s = te.compute(s.shape, lambda *i: te.unary("log", s[i]), name="logsoftmax_log")

    def body(*i: te.Expr) -> te.Expr:
        j = stat_index(i, [axis])
        return x[i] - m[j] - log_s[j]

    return [te.compute(x.shape, body, name="logsoftmax")]
