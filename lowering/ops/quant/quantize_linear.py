"""QuantizeLinear: `y = saturate(round_half_even(x / y_scale) + y_zero_point)`, per tensor,
per axis or blocked; outputs int8, uint8, int16 or uint16 (8-bit floats and 4-bit integers are
refused earlier, by their element type)."""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.quant.params import (
    QUANT_DTYPES,
    as_float,
    check_quant_dtype,
    linear_params,
    quantize,
)


@register_op("QuantizeLinear")
def quantize_linear(ctx: OpContext) -> list[te.Tensor]:
    x, out = ctx.input(0), ctx.out_dtypes[0]
    check_quant_dtype(ctx, out, "the output", QUANT_DTYPES)
    p = linear_params(ctx, x.shape, out)

    def body(*idx: te.Expr) -> te.Expr:
        return quantize(as_float(x[idx]) / p.scale_at(idx), p.zero_point_at(idx), out)

    return [te.compute(x.shape, body, name="quantize")]
