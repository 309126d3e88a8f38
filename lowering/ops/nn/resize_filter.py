"""Resize's filtered modes: cubic (cubic_coeff_a, exclude_outside), antialias (linear and cubic
filters widened by 1/scale when downsampling) and tf_crop_and_resize (a region of interest,
extrapolation_value outside it), as ONNX's reference defines them.

Per resized axis a table stage holds, for each output position, the filter's raw weights over a
fixed number of taps (4 for cubic, 2 for linear, 2·⌈1/scale⌉ or 4·⌈1/scale⌉ under antialias)
starting at a first input position; taps beyond the axis read its edge (or, with
exclude_outside, weigh 0), and the weights are divided by their sum, which leaves cubic's and
linear's unchanged and normalises the widened ones. The resampling is separable: one pass per
resized axis, each a short weighted sum over its taps reading the pass before, so a cubic 2-D
resize costs 4 + 4 terms per output instead of 16. tf_crop_and_resize marks positions whose
coordinate falls outside [0, in - 1]; the last pass writes extrapolation_value wherever any
axis is marked.

A scale or region of interest given at run time is a float32 expression the table stages read:
the tables are computed when the kernel runs in any case. Only the number of taps depends on
the scale (under antialias); for a run-time scale it is counted for the least scale that still
gives the output's length (the check in resize.py holds it there), and the taps past the
filter's support weigh 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lowering import te
from lowering.ops.nn.resize_coords import nearest_index, original_coordinate

F32 = "float32"


def _f(v: float) -> te.Const:
    return te.Const(float(np.float32(v)), F32)


@dataclass(frozen=True)
class Filter:
    mode: str  # nearest, linear or cubic
    transform: str
    nearest: str
    cubic_a: float
    exclude_outside: bool
    antialias: bool
    extrapolation: float


# A region of interest along one axis: (start, end), constants or float32 loads.
Roi = tuple[float, float] | tuple[te.Expr, te.Expr]
Scale = float | te.Expr


def crop_coordinate(out_pos: te.Expr, roi: Roi, out_len: int, in_len: int) -> te.Expr:
    """tf_crop_and_resize's input coordinate (float32, in the reference's operation order)."""
    if isinstance(roi[0], te.Expr) or isinstance(roi[1], te.Expr):
        lo, hi = (v if isinstance(v, te.Expr) else _f(v) for v in roi)
        if out_len == 1:
            return (hi - lo) * _f((in_len - 1) / 2) + lo * _f(in_len - 1)
        return te.cast(F32, out_pos) * (hi - lo) * _f(in_len - 1) / _f(out_len - 1) + \
            lo * _f(in_len - 1)
    start, end = (float(np.float32(v)) for v in roi)
    if out_len == 1:
        return _f((end - start) * (in_len - 1) / 2 + start * (in_len - 1))
    x = te.cast(F32, out_pos)
    return x * _f(end - start) * _f(in_len - 1) / _f(out_len - 1) + _f(start * (in_len - 1))


def least_scale(out_len: int, in_len: int) -> float:
    """The least float32 scale whose `int(scale * in_len)` is `out_len`, from a little below
    (a run-time scale's tap count is counted for it)."""
    return out_len / in_len * (1 - 2.0**-20)


def _taps(f: Filter, scale: float) -> tuple[int, int]:
    """(count, first offset from floor(coordinate)) of the taps one output reads."""
    if f.mode == "nearest":
        return 1, 0
    support = 1 if f.mode == "linear" else 2
    if f.antialias and scale < 1.0:
        start = math.floor(-support / scale) + 1
        return 2 - 2 * start, start
    return 2 * support, 1 - support


def _kernel(f: Filter, d: te.Expr) -> te.Expr:
    """The filter's weight at distance d (≥ 0, in the filter's own units)."""
    one = _f(1.0)
    if f.mode == "linear":
        return te.maximum(one - d, _f(0.0))
    a = _f(f.cubic_a)
    near = ((a + 2.0) * d - (a + 3.0)) * d * d + one
    far = ((a * d - a * 5.0) * d + a * 8.0) * d - a * 4.0
    return te.select(te.le(d, one), near, te.select(te.lt(d, _f(2.0)), far, _f(0.0)))


@dataclass
class AxisTaps:
    first: te.Tensor  # [out] int64: the first tap's (unclamped) input position
    weights: te.Tensor  # [out, count] the taps' weights, normalised
    outside: te.Tensor | None  # [out] bool: tf_crop_and_resize extrapolates here
    count: int


def axis_taps(f: Filter, scale: Scale, out_len: int, in_len: int, roi: Roi | None) -> AxisTaps:
    count, start = _taps(f, least_scale(out_len, in_len) if isinstance(scale, te.Expr)
                         else scale)
    narrow: te.Expr = _f(1.0)
    if f.antialias:
        narrow = te.minimum(scale, _f(1.0)) if isinstance(scale, te.Expr) else \
            _f(min(scale, 1.0))

    def coord(i: te.Expr) -> te.Expr:
        if f.transform == "tf_crop_and_resize":
            assert roi is not None
            return crop_coordinate(i, roi, out_len, in_len)
        return original_coordinate(f.transform, i, scale, out_len, in_len)

    def first(i: te.Var) -> te.Expr:
        c = coord(i)
        if f.mode == "nearest":
            return nearest_index(f.nearest, c, in_len)
        return te.cast("int64", te.unary("floor", c)) + start

    first_t = te.compute((out_len,), first, name="resize_first")

    def raw(i: te.Var, t: te.Var) -> te.Expr:
        if f.mode == "nearest":
            return _f(1.0)
        c = coord(i)
        ratio = c - te.unary("floor", c)
        d = te.unary("abs", te.cast(F32, t + start) - ratio) * narrow
        w = _kernel(f, d)
        if f.exclude_outside:
            pos = first_t[i] + t
            w = te.select(te.logical_and(te.ge(pos, 0), te.lt(pos, in_len)), w, _f(0.0))
        return w

    raw_t = te.compute((out_len, count), raw, name="resize_raw")

    def total(i: te.Var) -> te.Expr:
        t = te.reduce_axis(count, "t")
        return te.reduce_sum(raw_t[i, t.var], [t])

    sums = te.compute((out_len,), total, name="resize_norm")
    weights = te.compute((out_len, count), lambda i, t: raw_t[i, t] / sums[i],
                         name="resize_weights")
    outside = None
    if f.transform == "tf_crop_and_resize":
        outside = te.compute((out_len,), lambda i: te.logical_or(
            te.lt(coord(i), _f(0.0)), te.gt(coord(i), _f(in_len - 1))), name="resize_outside")
    return AxisTaps(first_t, weights, outside, count)


def filtered_resize(x: te.Tensor, f: Filter, scales: list[np.float32 | te.Expr],
                    out_shape: tuple[int, ...], resized: list[int],
                    rois: dict[int, Roi]) -> te.Tensor:
    """x resampled along `resized` (one separable pass each) to `out_shape`."""
    taps = {a: axis_taps(f, scales[a] if isinstance(scales[a], te.Expr) else float(scales[a]),
                         out_shape[a], x.shape[a], rois.get(a)) for a in resized}
    shape = list(x.shape)
    prev = x
    for k, a in enumerate(resized):
        shape[a] = out_shape[a]
        last = k == len(resized) - 1
        tap = taps[a]
        n = x.shape[a]

        def body(*o: te.Var, prev: te.Tensor = prev, tap: AxisTaps = tap, a: int = a,
                 n: int = n, last: bool = last) -> te.Expr:
            t = te.reduce_axis(tap.count, "t")
            idx = list(o)
            idx[a] = te.minimum(te.maximum(tap.first[o[a]] + t.var, 0), n - 1)
            return te.reduce_sum(prev[tuple(idx)] * te.cast(x.dtype, tap.weights[o[a], t.var]),
                                 [t])

        prev = te.compute(tuple(shape), body, name=f"resize_pass{k}")
    marked = [(a, taps[a].outside) for a in resized if taps[a].outside is not None]
    if not marked:
        return prev
    value = te.Const(f.extrapolation, x.dtype)
    result = prev

    def extrapolate(*o: te.Var) -> te.Expr:
        return te.select(te.any_of([m[o[a]] for a, m in marked]), value, result[o])

    return te.compute(out_shape, extrapolate, name="resize_extrapolate")
