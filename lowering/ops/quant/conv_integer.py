"""ConvInteger: Conv of `(x - x_zero_point)` by `(w - w_zero_point)` in int32 (Conv's geometry;
padding is zero after the shift, i.e. the input's zero point); w's zero point per tensor or per
output channel."""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.nn.conv import conv_of
from lowering.ops.quant.params import shifted


def integer_conv(ctx: OpContext, x: int, x_zp: int, w: int, w_zp: int,
                 bias: te.Tensor | None = None) -> te.Tensor:
    """The int32 convolution of inputs `x` and `w` less their zero points (plus an int32
    bias), through Conv's definition."""
    if bias is not None and bias.dtype != "int32":
        raise ctx.error(f"bias is {bias.dtype}; quantized convolutions take an int32 bias")
    return conv_of(ctx, shifted(ctx, x, x_zp, None), shifted(ctx, w, w_zp, 0), bias,
                   ("int32",))


@register_op("ConvInteger")
def conv_integer(ctx: OpContext) -> list[te.Tensor]:
    return [integer_conv(ctx, 0, 2, 1, 3)]
