"""Quantisation parameters and the rounding every quantized operator shares.

A scale or zero point is per tensor (one element), per axis (1-D, one per slice along `axis`)
or blocked (the input's shape with `axis` cut into blocks of `block` elements). `param_at`
reads the one that applies to an element of the quantized tensor; `quantize` rounds a float
to an integer type as ONNX specifies (half to even, plus the zero point, saturated).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from lowering import te
from lowering.ops import OpContext
from lowering.ops.common import axis_of

QUANT_DTYPES = ("int8", "uint8", "int16", "uint16")
# QuantizeLinear and DequantizeLinear also take the 4- and 2-bit integers and the 8- and 4-bit
# floats (not E8M0): a float type's value is converted, not rounded to an integer
FLOAT_QUANT_DTYPES = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
                      "float4_e2m1fn")
LINEAR_DTYPES = (*QUANT_DTYPES, *te.NARROW_INT_DTYPES, *FLOAT_QUANT_DTYPES)


@dataclass(frozen=True)
class LinearParams:
    """QuantizeLinear's and DequantizeLinear's scale (input 1) and zero point (input 2), checked
    against the quantized tensor: axis is None when each is one value."""

    scale: te.Tensor
    zero_point: te.Tensor | None
    axis: int | None
    block: int

    def scale_at(self, idx: Sequence[te.Expr]) -> te.Expr:
        return param_at(self.scale, idx, self.axis, self.block)

    def zero_point_at(self, idx: Sequence[te.Expr]) -> te.Expr | None:
        if self.zero_point is None:
            return None
        return param_at(self.zero_point, idx, self.axis, self.block)


def linear_params(ctx: OpContext, x_shape: Sequence[int], quantized: str) -> LinearParams:
    """The node's LinearParams for data of `x_shape`; `quantized` is the integer type (the
    zero point's, when there is one)."""
    check_quant_dtype(ctx, quantized, "the quantized type", (*LINEAR_DTYPES, "int32"))
    zp = ctx.input(2) if ctx.has_input(2) else None
    if zp is not None and zp.dtype != quantized:
        raise ctx.error(f"zero point is {zp.dtype}, the quantized data {quantized}")
    block = int(ctx.attr("block_size", 0))
    if block < 0:
        raise ctx.error(f"block_size {block} is negative")
    axis = None
    if block or any(ctx.input(i).size != 1 for i in (1, 2) if ctx.has_input(i)):
        axis = axis_of(ctx, ctx.attr("axis", 1), len(x_shape))
    for i in (1, 2):
        if ctx.has_input(i):
            check_param(ctx, i, x_shape, axis, block)
    return LinearParams(ctx.input(1), zp, axis, block)


def check_param(ctx: OpContext, i: int, x_shape: Sequence[int], axis: int | None,
                block: int = 0) -> None:
    """Input `i` (a scale or zero point) fits `x_shape` per tensor, per `axis` or blocked."""
    t = ctx.input(i)
    if t.size == 1 and (not block or len(t.shape) <= 1):
        return
    what = f"input {i} of shape {list(t.shape)}"
    if axis is None:
        raise ctx.error(f"{what}: only a per-tensor (one element) parameter fits here")
    if block:
        want = list(x_shape)
        want[axis] = math.ceil(x_shape[axis] / block)
        if list(t.shape) != want:
            raise ctx.error(f"{what} does not fit blocks of {block} along axis {axis} of "
                            f"{list(x_shape)} (expected {want})")
        return
    if len(t.shape) != 1 or t.shape[0] != x_shape[axis]:
        raise ctx.error(f"{what} is neither one value nor one per element of axis {axis} "
                        f"({x_shape[axis]}) of {list(x_shape)}")


def param_at(t: te.Tensor, idx: Sequence[te.Expr], axis: int | None, block: int = 0) -> te.Expr:
    """The element of `t` (checked by check_param) that applies at index `idx` of x."""
    if t.size == 1:
        return t[(0,) * len(t.shape)] if t.shape else t[()]
    assert axis is not None
    if block:
        return t[tuple(i // block if d == axis else i for d, i in enumerate(idx))]
    return t[idx[axis]]


def as_int32(v: te.Expr) -> te.Expr:
    return te.cast("int32", v)


def as_float(v: te.Expr) -> te.Expr:
    return te.cast("float32", v)


def quantize(v: te.Expr, zero_point: te.Expr | None, dtype: str) -> te.Expr:
    """round_half_even(v) + zero_point, saturated to `dtype` (v is float32). The sum and the
    clamp stay in float, where they are exact for these types, so a value far outside the
    range saturates instead of overflowing an integer."""
    q = te.unary("round", v)
    if zero_point is not None:
        q = q + as_float(zero_point)
    lo, hi = te.int_range(dtype)
    q = te.minimum(te.maximum(q, te.Const(lo, "float32")), te.Const(hi, "float32"))
    return te.cast(dtype, te.cast("int32", q))


def zero_point_dtype(ctx: OpContext, zp: int, data: int) -> None:
    """A zero point (input `zp`, when given) has the type of the data it shifts (input `data`)."""
    if ctx.has_input(zp) and ctx.input(zp).dtype != ctx.input(data).dtype:
        raise ctx.error(f"zero point (input {zp}) is {ctx.input(zp).dtype}, "
                        f"the data (input {data}) {ctx.input(data).dtype}")


def check_quant_dtype(ctx: OpContext, dtype: str, what: str,
                      allowed: Sequence[str] = QUANT_DTYPES) -> None:
    if dtype not in allowed:
        raise ctx.error(f"{what} is {dtype}; aotc quantizes to {', '.join(allowed)}")


def shifted(ctx: OpContext, i: int, zp: int, axis: int | None) -> te.Tensor:
    """Input `i` minus its zero point (input `zp`, per tensor or along `axis`) as an inline
    int32 view: what the integer products multiply. A zero point known to be 0 is left out."""
    t = ctx.input(i)
    if t.dtype not in ("int8", "uint8"):
        raise ctx.error(f"input {i} is {t.dtype}; integer products take int8 or uint8")
    known = ctx.consts[zp] if ctx.has_input(zp) else None
    if not ctx.has_input(zp) or (known is not None and not known.any()):
        return te.compute(t.shape, lambda *idx: as_int32(t[idx]), name="i32", inline=True)
    zero_point_dtype(ctx, zp, i)
    check_param(ctx, zp, t.shape, axis)
    z = ctx.input(zp)
    return te.compute(t.shape, lambda *idx: as_int32(t[idx]) - as_int32(param_at(z, idx, axis)),
                      name="i32", inline=True)


def requantize(acc: te.Expr, multiplier: te.Expr, zero_point: te.Expr | None,
               dtype: str) -> te.Expr:
    """An int32 accumulator in the output's quantisation: round(acc * multiplier) + zero point,
    saturated, as onnxruntime requantizes (the multiplier is in_scale * w_scale / out_scale,
    computed in float32 in that order)."""
    return quantize(as_float(acc) * multiplier, zero_point, dtype)
