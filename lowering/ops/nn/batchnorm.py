"""BatchNormalization in inference form: Y = X·a[c] + b[c], a = scale/√(var+ε), b = B - mean·a.

The per-channel a and b are small stages of their own, so the element-wise pass over X is one
multiply-add. (The `fold_batchnorm` pass folds most BNs into the weights of the op before.)
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op


def per_channel(t: te.Tensor, c: te.Var) -> te.Expr:
    """Element c of a per-channel parameter of shape [C] (or [1], broadcast)."""
    return t[0] if t.shape == (1,) else t[c]


@register_op("BatchNormalization")
def batch_normalization(ctx: OpContext) -> list[te.Tensor]:
    if int(ctx.attr("training_mode", 0)) or len(ctx.out_shapes) > 1:
        raise ctx.error("BatchNormalization in training mode is not supported",
                        hint="export the model in inference (eval) mode")
    x = ctx.input(0)
    scale, bias, mean, var = (ctx.input(i) for i in range(1, 5))
    if len(x.shape) < 2:
        raise ctx.error(f"input of rank {len(x.shape)}: BatchNormalization needs N and C axes")
    if x.dtype not in te.FLOAT_DTYPES:
        raise ctx.error(f"BatchNormalization of {x.dtype} tensors is not supported")
    channels = x.shape[1]
    for name, t in (("scale", scale), ("B", bias), ("mean", mean), ("var", var)):
        if t.shape not in ((channels,), (1,)):
            raise ctx.error(f"{name} of shape {list(t.shape)}, expected [{channels}]")
    eps = float(ctx.attr("epsilon", 1e-5))

    def a_of(c: te.Var) -> te.Expr:
        v = te.cast(x.dtype, per_channel(var, c))
        return te.cast(x.dtype, per_channel(scale, c)) / te.unary("sqrt", v + eps)

    a = te.compute((channels,), a_of, name="bn_scale")
    b = te.compute(
        (channels,),
        lambda c: te.cast(x.dtype, per_channel(bias, c))
        - te.cast(x.dtype, per_channel(mean, c)) * a[c],
        name="bn_shift",
    )
    return [te.compute(x.shape, lambda n, c, *s: x[(n, c, *s)] * a[c] + b[c], name="bn")]
