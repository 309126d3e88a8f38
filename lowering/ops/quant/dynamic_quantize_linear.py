"""DynamicQuantizeLinear: uint8 quantisation of a float tensor with its range as parameters.

The range is widened to include 0; `scale = (max - min) / 255`, except that a range of one value
(all zeros) gives scale 1 as onnxruntime computes it (ONNX's function body would divide by
zero there); `zero_point = round(saturate(0 - min / scale))`; then QuantizeLinear.
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.quant.params import quantize


def _whole(x: te.Tensor, combiner: str) -> te.Tensor:
    """The min or max of every element of `x`, widened to include 0 (a scalar)."""
    axes = [te.reduce_axis(n, "q") for n in x.shape]
    r = te.compute((), lambda: te.reduce(combiner, x[tuple(a.var for a in axes)], axes),
                   name=f"range_{combiner}")
    zero = te.Const(0.0, "float32")
    widen = te.minimum if combiner == "min" else te.maximum
    return te.compute((), lambda: widen(r[()], zero), name=f"range_{combiner}0", inline=True)


@register_op("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    if x.dtype != "float32":
        raise ctx.error(f"input is {x.dtype}; DynamicQuantizeLinear quantizes float32")
    lo, hi = _whole(x, "min"), _whole(x, "max")
    scale = te.compute((), lambda: te.select(te.eq(hi[()], lo[()]), te.Const(1.0, "float32"),
                                             (hi[()] - lo[()]) / te.Const(255.0, "float32")),
                       name="dq_scale")
    zp = te.compute((), lambda: quantize(te.Const(0.0, "float32") - lo[()] / scale[()], None,
                                         "uint8"), name="dq_zero_point")
    y = te.compute(x.shape, lambda *i: quantize(x[i] / scale[()], zp[()], "uint8"),
                   name="dq_quantize")
    return [y, scale, zp]
