"""LayerNormalization over the trailing axes from `axis`, with its Mean / InvStdDev outputs.

Stages: row sum → mean, row sum of squared deviations → 1/sqrt(var + eps) (two-pass variance,
each a non-inline reduction), then `(x - mean) * inv_std * scale + bias` element-wise, with
scale and bias broadcast unidirectionally onto the normalised dimensions.
"""

from __future__ import annotations

import math

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.common import broadcast_load, normalize_axis
from lowering.ops.reduce.core import reduce_compute, stat_index


@register_op("LayerNormalization")
def layer_normalization(ctx: OpContext) -> list[te.Tensor]:
    x, scale = ctx.input(0), ctx.input(1)
    bias = ctx.inputs[2] if ctx.has_input(2) else None
    dtype = x.dtype
    if dtype not in te.FLOAT_DTYPES:
        raise ctx.error(f"LayerNormalization on {dtype} data is not supported")
    rank = len(x.shape)
    try:
        axis = normalize_axis(int(ctx.attr("axis", -1)), rank)
    except ValueError as e:
        raise ctx.error(str(e)) from None
    axes = list(range(axis, rank))
    norm_shape = x.shape[axis:]
    for name, t in (("Scale", scale), ("B", bias)):
        if t is None:
            continue
        if t.dtype != dtype:
            raise ctx.error(f"{name} has dtype {t.dtype}, X has {dtype}")
        if len(t.shape) > len(norm_shape) or any(
            d not in (1, full) for d, full in zip(t.shape[::-1], norm_shape[::-1], strict=False)
        ):
            raise ctx.error(f"{name} of shape {list(t.shape)} does not broadcast to "
                            f"{list(norm_shape)}")
    eps = float(ctx.attr("epsilon", 1e-5))
    n = te.Const(math.prod(norm_shape), dtype)

    total = reduce_compute(x.shape, axes, True, "sum", lambda i: x[i], "layernorm_sum")
    mean = te.compute(total.shape, lambda *i: total[i] / n, name="layernorm_mean")

    def sq_dev(i: tuple[te.Expr, ...]) -> te.Expr:
        d = x[i] - mean[stat_index(i, axes)]
        return d * d

    var_sum = reduce_compute(x.shape, axes, True, "sum", sq_dev, "layernorm_var")
    inv_std = te.compute(
        var_sum.shape,
        lambda *i: te.Const(1, dtype) / te.unary("sqrt", var_sum[i] / n + te.Const(eps, dtype)),
        name="layernorm_invstd",
    )

    def body(*i: te.Expr) -> te.Expr:
        j = stat_index(i, axes)
        norm = i[axis:]
        y = (x[i] - mean[j]) * inv_std[j] * broadcast_load(scale, norm)
        return y + broadcast_load(bias, norm) if bias is not None else y

    results = [te.compute(x.shape, body, name="layernorm")]
    for stat, out_dtype in zip((mean, inv_std), ctx.out_dtypes[1:], strict=False):
        if out_dtype != dtype:
            stat = te.compute(stat.shape, lambda *i, s=stat, d=out_dtype: te.cast(d, s[i]),
                              name="layernorm_stat")
        results.append(stat)
    return results
