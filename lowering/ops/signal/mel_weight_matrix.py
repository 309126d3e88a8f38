"""MelWeightMatrix: a [dft_length//2 + 1, num_mel_bins] matrix of triangular filters that maps a
one-sided spectrum to mel bands, as ONNX's reference defines it: num_mel_bins + 2 points evenly
spaced in mel (mel = 2595·log10(1 + hz/700)) from lower_edge_hertz, stepping by the span over
num_mel_bins + 2, back to hertz and to a spectrum bin ⌊(dft_length + 1)·hz / sample_rate⌋;
filter i rises from bin b[i] to 1 at b[i+1] and falls to 0 at b[i+2].

num_mel_bins and dft_length set the shape and must be constants. When sample_rate and the edges
are constants too, the bins are computed here with numpy exactly as the reference does (log1p,
expm1 in float64), so the matrix matches it bit for bit; otherwise a small float64 stage computes
them at run time from log and exp (log(1 + x) and exp(y) - 1: a bin can differ from the
reference's only where (dft_length + 1)·hz / sample_rate lands within rounding of an integer).
"""

from __future__ import annotations

import math

import numpy as np

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.shape.shape import constant_vector
from lowering.ops.signal.dft import int_scalar

F64 = "float64"


def _constant_bins(mels: int, length: int, rate: float, lower: float, upper: float) -> list[int]:
    points = np.arange(0, mels + 2)
    low = 2595 * np.log1p(lower / 700) / np.log(10)
    high = 2595 * np.log1p(upper / 700) / np.log(10)
    hz = 700 * np.expm1((points * ((high - low) / points.shape[0]) + low) / 2595 * np.log(10))
    return [int(b) for b in ((length + 1) * hz) // rate]


def _runtime_bins(ctx: OpContext, mels: int, length: int) -> te.Tensor:
    rate, lower, upper = ctx.input(2), ctx.input(3), ctx.input(4)

    def scalar(t: te.Tensor) -> te.Expr:
        return te.cast(F64, t[(0,) * len(t.shape)])

    def mel(hz: te.Expr) -> te.Expr:
        return te.unary("log", hz / 700.0 + 1.0) * (2595.0 / math.log(10))

    def body(i: te.Var) -> te.Expr:
        low, high = mel(scalar(lower)), mel(scalar(upper))
        point = te.cast(F64, i) * ((high - low) / float(mels + 2)) + low
        hz = (te.unary("exp", point / 2595.0 * math.log(10)) - 1.0) * 700.0
        return te.cast("int64", te.unary("floor", hz * float(length + 1) / scalar(rate)))

    return te.compute((mels + 2,), body, name="mel_bins")


@register_op("MelWeightMatrix")
def mel_weight_matrix(ctx: OpContext) -> list[te.Tensor]:
    mels = int_scalar(ctx, 0, "num_mel_bins")
    length = int_scalar(ctx, 1, "dft_length")
    if mels <= 0 or length <= 0:
        raise ctx.error(f"num_mel_bins {mels} and dft_length {length} must be positive")
    for i in (2, 3, 4):
        if ctx.input(i).size != 1:
            raise ctx.error(f"input {i} must be a scalar, got shape {list(ctx.input(i).shape)}")
    dtype = ctx.out_dtypes[0]
    if dtype not in te.FLOAT_DTYPES:
        raise ctx.error(f"output_datatype {dtype} is not a float type")
    values = [ctx.consts[i] if i < len(ctx.consts) else None for i in (2, 3, 4)]
    if all(v is not None for v in values):
        rate, lower, upper = (np.asarray(v).reshape(-1)[0] for v in values)  # type: ignore[union-attr]
        if rate <= 0:
            raise ctx.error(f"sample_rate {rate} must be positive")
        bins = constant_vector(_constant_bins(mels, length, rate, lower, upper), "int64",
                               "mel_bins")
    else:
        bins = _runtime_bins(ctx, mels, length)

    def body(j: te.Var, i: te.Var) -> te.Expr:
        lo, center, hi = bins[i], bins[i + 1], bins[i + 2]
        jf = te.cast(F64, j)
        rising = (jf - te.cast(F64, lo)) / te.cast(F64, te.maximum(center - lo, 1))
        falling = (te.cast(F64, hi) - jf) / te.cast(F64, te.maximum(hi - center, 1))
        v = te.select(te.logical_and(te.le(lo, j), te.lt(j, center)), rising,
                      te.Const(0.0, F64))
        v = te.select(te.logical_and(te.lt(center, j), te.lt(j, hi)), falling, v)
        return te.cast(dtype, te.select(te.eq(j, center), te.Const(1.0, F64), v))

    shape = (length // 2 + 1, mels)
    if tuple(ctx.out_shapes[0]) != shape:
        raise ctx.error(f"output shape {list(shape)} differs from the inferred "
                        f"{list(ctx.out_shapes[0])}")
    return [te.compute(shape, body, name="mel_weight_matrix")]
