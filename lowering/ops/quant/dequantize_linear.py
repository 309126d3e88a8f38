"""DequantizeLinear: `y = (x - x_zero_point) * x_scale`, per tensor, per axis or blocked.

The difference is taken in int32 (exact for every 2- to 16-bit type; for int32 data, whose
zero point ONNX fixes at 0, as onnxruntime) and converted to float once; for the 8- and 4-bit
floats it is taken in float32 (exact: both are values of the type).
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.quant.params import as_float, as_int32, linear_params


@register_op("DequantizeLinear")
def dequantize_linear(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    p = linear_params(ctx, x.shape, x.dtype)
    wide = as_float if x.dtype in te.FLOAT_DTYPES else as_int32

    def body(*idx: te.Expr) -> te.Expr:
        d = wide(x[idx])
        zp = p.zero_point_at(idx)
        if zp is not None:
            d = d - wide(zp)
        return as_float(d) * p.scale_at(idx)

    return [te.compute(x.shape, body, name="dequantize")]
