"""DFT: the discrete Fourier transform along one axis of a real ([..., 1]) or complex
([..., 2], real and imaginary parts) signal; inverse, one-sided (real-to-complex, and its
inverse complex-to-real) and a constant dft_length.

The transform is a direct sum: output bin k reads every input sample t with the twiddle
e^(∓2πi·kt/L), looked up in a table of cos/sin(2πm/L) (m = kt mod L) that a small stage fills
in float64 at the start of the kernel, so the O(L²) terms cost one multiply-add each and no
transcendental calls. Inputs are truncated or zero-padded to dft_length L as numpy's fft does
(the sum simply stops at min(n, L)). The inverse one-sided transform is numpy's irfft, which
ONNX's reference follows: the first L//2+1 bins extended by Hermitian symmetry, so each bin
0 < k < L/2 counts twice and only real parts survive; onnxruntime agrees when the input holds
exactly L//2+1 bins (with other counts its results follow neither numpy nor a rule we found).
"""

from __future__ import annotations

import math

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.common import axis_of

F64 = "float64"


def twiddles(length: int, dtype: str) -> te.Tensor:
    """A [length, 2] table: cos and sin of 2πm/length, computed in float64, stored as dtype."""
    step = 2.0 * math.pi / length

    def body(m: te.Var, c: te.Var) -> te.Expr:
        angle = te.cast(F64, m) * step
        value = te.select(te.eq(c, 0), te.unary("cos", angle), te.unary("sin", angle))
        return te.cast(dtype, value)

    return te.compute((length, 2), body, name="dft_twiddle")


def dft(x: te.Tensor, axis: int, length: int, *, inverse: bool, onesided: bool,
        scale: float = 1.0) -> te.Tensor:
    """The transform of `x` ([..., 1 or 2]) along `axis` with dft_length `length`, every output
    multiplied by `scale` (an inverse already divides by `length`)."""
    dtype = x.dtype
    parts = x.shape[-1]
    n = x.shape[axis]
    real_out = inverse and onesided
    bins = length // 2 + 1 if onesided and not inverse else length
    out_shape = list(x.shape)
    out_shape[axis] = bins
    out_shape[-1] = 1 if real_out else 2
    # samples (forward) or bins (inverse) that the sum reads
    used = min(n, length // 2 + 1 if real_out else length)
    if used == 0 or length == 0:
        return te.compute(out_shape, lambda *o: te.Const(0, dtype), name="dft_empty")
    table = twiddles(length, dtype)
    sign = 1.0 if inverse else -1.0
    norm = scale / length if inverse else scale

    def body(*o: te.Var) -> te.Expr:
        k, c = o[axis], o[-1]
        t = te.reduce_axis(used, "t")
        p = te.reduce_axis(parts, "p")
        idx = list(o)
        idx[axis], idx[-1] = t.var, p.var
        if real_out:  # output sample k from bin t: Re(X_t e^{+iθ}) = Xr cos - Xi sin
            m = (t.var * k) % length
            twice = te.logical_and(te.gt(t.var, 0), te.ne(t.var * 2, length))
            weight = te.select(twice, te.Const(2 * norm, dtype), te.Const(norm, dtype))
            coef = te.select(te.eq(p.var, 0), table[m, 0], -table[m, 1]) * weight
        else:  # (xr + i·xi)(cos + i·sign·sin), the part c of it
            m = (k * t.var) % length
            cos, sin = table[m, 0], table[m, 1]
            off = te.select(te.eq(c, 0), te.Const(-sign, dtype), te.Const(sign, dtype)) * sin
            coef = te.select(te.eq(c, p.var), cos, off)
            if norm != 1.0:
                coef = coef * te.Const(norm, dtype)
        return te.reduce_sum(x[tuple(idx)] * coef, [t, p])

    return te.compute(out_shape, body, name="dft")


def int_scalar(ctx: OpContext, i: int, what: str) -> int:
    """Constant input `i`, one integer (what sets a shape: a length, an axis)."""
    v = ctx.const(i, what)
    if v.size != 1 or v.dtype.kind not in "iu":
        raise ctx.error(f"{what} must be one integer, got {v.dtype} of shape {list(v.shape)}")
    return int(v.reshape(-1)[0])


@register_op("DFT")
def dft_op(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    rank = len(x.shape)
    if x.dtype not in te.FLOAT_DTYPES:
        raise ctx.error(f"DFT of {x.dtype} is not supported (floats only)")
    if rank < 2 or x.shape[-1] not in (1, 2):
        raise ctx.error(f"input shape {list(x.shape)}: the last axis must be 1 (real) or 2 "
                        "(complex)")
    # opset 20 takes the axis as input 2 (default -2); opset 17's attribute if still present
    axis = int_scalar(ctx, 2, "axis") if ctx.has_input(2) else int(ctx.attr("axis", -2))
    axis = axis_of(ctx, axis, rank)
    if axis == rank - 1:
        raise ctx.error("axis must not be the last axis (it holds the real/imaginary parts)")
    inverse = bool(ctx.attr("inverse", 0))
    onesided = bool(ctx.attr("onesided", 0))
    if onesided and not inverse and x.shape[-1] != 1:
        raise ctx.error("a one-sided DFT takes a real input (last axis 1)")
    n = x.shape[axis]
    if ctx.has_input(1):
        length = int_scalar(ctx, 1, "dft_length")
        if length <= 0:
            raise ctx.error(f"dft_length {length} must be positive")
    else:
        length = 2 * (n - 1) if inverse and onesided else n
        if length <= 0:
            raise ctx.error(f"an inverse one-sided DFT of {n} bins needs a dft_length")
    out = dft(x, axis, length, inverse=inverse, onesided=onesided)
    if out.shape != tuple(ctx.out_shapes[0]):
        raise ctx.error(f"output shape {list(out.shape)} differs from the inferred "
                        f"{list(ctx.out_shapes[0])}")
    return [out]
