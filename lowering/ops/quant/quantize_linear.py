"""QuantizeLinear: `y = saturate(round_half_even(x / y_scale) + y_zero_point)`, per tensor,
per axis or blocked, to int8, uint8, int16, uint16 and the 4- and 2-bit integers; to the 8-
and 4-bit floats `y = convert(x / y_scale + y_zero_point)` with the `saturate` attribute
(lowering/convert.py). ONNX's reference leaves a float8 zero point out (it must be 0): so does
this when it is a constant 0, keeping the sign of a zero result."""

from __future__ import annotations

from lowering import te
from lowering.convert import convert
from lowering.ops import OpContext, register_op
from lowering.ops.quant.params import (
    FLOAT_QUANT_DTYPES,
    LINEAR_DTYPES,
    as_float,
    check_quant_dtype,
    linear_params,
    quantize,
)


@register_op("QuantizeLinear")
def quantize_linear(ctx: OpContext) -> list[te.Tensor]:
    x, out = ctx.input(0), ctx.out_dtypes[0]
    check_quant_dtype(ctx, out, "the output", LINEAR_DTYPES)
    p = linear_params(ctx, x.shape, out)
    saturate = bool(ctx.attr("saturate", 1))
    zp = p.zero_point
    known = ctx.consts[2] if zp is not None and len(ctx.consts) > 2 else None
    skip_zero = (out.startswith("float8") and known is not None
                 and not known.astype("float32").any())

    def body(*idx: te.Expr) -> te.Expr:
        v = as_float(x[idx]) / p.scale_at(idx)
        if out in FLOAT_QUANT_DTYPES:
            z = None if skip_zero else p.zero_point_at(idx)
            return convert(v if z is None else v + as_float(z), out, saturate)
        return quantize(v, p.zero_point_at(idx), out)

    return [te.compute(x.shape, body, name="quantize")]
