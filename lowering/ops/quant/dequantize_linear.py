"""DequantizeLinear: `y = (x - x_zero_point) * x_scale`, per tensor, per axis or blocked.

The difference is taken in int32 (exact for every 8- and 16-bit type; for int32 data, whose
zero point ONNX fixes at 0, as onnxruntime) and converted to float once.
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.quant.params import as_float, as_int32, linear_params


@register_op("DequantizeLinear")
def dequantize_linear(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    p = linear_params(ctx, x.shape, x.dtype)

    def body(*idx: te.Expr) -> te.Expr:
        d = as_int32(x[idx])
        zp = p.zero_point_at(idx)
        if zp is not None:
            d = d - as_int32(zp)
        return as_float(d) * p.scale_at(idx)

    return [te.compute(x.shape, body, name="dequantize")]
