"""QLinearConv: ConvInteger's int32 sum plus the int32 bias, requantized once to the output's
scale and zero point; the weights' scale and zero point per tensor or per output channel."""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.quant.conv_integer import integer_conv
from lowering.ops.quant.params import check_param, param_at, requantize

X, X_SCALE, X_ZP, W, W_SCALE, W_ZP, Y_SCALE, Y_ZP, BIAS = range(9)


@register_op("QLinearConv")
def qlinear_conv(ctx: OpContext) -> list[te.Tensor]:
    x, w = ctx.input(X), ctx.input(W)
    out = ctx.out_dtypes[0]
    bias = ctx.inputs[BIAS] if ctx.has_input(BIAS) else None
    acc = integer_conv(ctx, X, X_ZP, W, W_ZP, bias)
    for i in (X_SCALE, Y_SCALE, Y_ZP):
        if ctx.has_input(i):
            check_param(ctx, i, x.shape, None)
    check_param(ctx, W_SCALE, w.shape, 0)
    y_zp = ctx.input(Y_ZP) if ctx.has_input(Y_ZP) else None
    if y_zp is not None and y_zp.dtype != out:
        raise ctx.error(f"output zero point is {y_zp.dtype}, the output {out}")
    x_s, w_s, y_s = ctx.input(X_SCALE), ctx.input(W_SCALE), ctx.input(Y_SCALE)

    def body(*idx: te.Expr) -> te.Expr:
        # the output channel is axis 1 of y, the weights' axis 0
        channel = (idx[1],)
        multiplier = param_at(x_s, idx, None) * param_at(w_s, channel, 0) / param_at(
            y_s, idx, None)
        zp = None if y_zp is None else param_at(y_zp, idx, None)
        return requantize(acc[idx], multiplier, zp, out)

    return [te.compute(acc.shape, body, name="qlinear_conv")]
