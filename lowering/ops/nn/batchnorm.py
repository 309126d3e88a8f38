"""BatchNormalization in inference form: Y = X·a[c] + b[c], a = scale/√(var+ε), b = B - mean·a.

The per-channel a and b are small stages of their own, so the element-wise pass over X is one
multiply-add. (The `fold_batchnorm` pass folds most BNs into the weights of the op before.)

In training mode (training_mode=1) mean and var are the batch's own, per channel over N and the
spatial axes (the variance the population one, of x - mean: two passes, as ONNX's reference),
and the optional outputs running_mean/running_var are the inputs' statistics moved toward the
batch's: input·momentum + batch·(1 - momentum).
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op


def per_channel(t: te.Tensor, c: te.Var) -> te.Expr:
    """Element c of a per-channel parameter of shape [C] (or [1], broadcast)."""
    return t[0] if t.shape == (1,) else t[c]


@register_op("BatchNormalization")
def batch_normalization(ctx: OpContext) -> list[te.Tensor]:
    training = bool(int(ctx.attr("training_mode", 0)))
    if len(ctx.out_shapes) > 1 and not training:
        raise ctx.error("running_mean and running_var are outputs of training mode only")
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
    running: list[te.Tensor] = []
    if training:
        mean, var, running = _batch_statistics(x, mean, var, float(ctx.attr("momentum", 0.9)),
                                               ctx.out_dtypes[1:])

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
    return [te.compute(x.shape, lambda n, c, *s: x[(n, c, *s)] * a[c] + b[c], name="bn"),
            *running]


def _batch_statistics(x: te.Tensor, mean: te.Tensor, var: te.Tensor, momentum: float,
                      dtypes: list[str]) -> tuple[te.Tensor, te.Tensor, list[te.Tensor]]:
    """The batch's mean and variance per channel, and running_mean and running_var of
    `dtypes` (as many as the node has)."""
    channels, count = x.shape[1], x.size // max(x.shape[1], 1)
    others = [d for i, d in enumerate(x.shape) if i != 1]

    def over_batch(c: te.Var, term) -> te.Expr:
        axes = [te.reduce_axis(d, "r") for d in others]
        idx = (axes[0].var, c, *(a.var for a in axes[1:]))
        return te.reduce_sum(term(idx), axes)

    total = te.compute((channels,), lambda c: over_batch(c, lambda i: x[i]), name="bn_sum")
    batch_mean = te.compute((channels,), lambda c: total[c] / float(max(count, 1)),
                            name="bn_mean")
    squares = te.compute((channels,), lambda c: over_batch(
        c, lambda i: (x[i] - batch_mean[c]) * (x[i] - batch_mean[c])), name="bn_squares")
    batch_var = te.compute((channels,), lambda c: squares[c] / float(max(count, 1)),
                           name="bn_var")
    keep = te.Const(momentum, x.dtype)
    move = te.Const(1.0 - momentum, x.dtype)
    running = [te.compute((channels,), lambda c, old=old, new=new, dt=dt: te.cast(dt, te.cast(
        x.dtype, per_channel(old, c)) * keep + new[c] * move), name="bn_running")
        for old, new, dt in zip((mean, var), (batch_mean, batch_var), dtypes, strict=False)]
    return batch_mean, batch_var, running
