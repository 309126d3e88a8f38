"""Resize's coordinate arithmetic as float32 expressions, operation for operation as onnxruntime.

`original_coordinate` maps an output position to an input coordinate for each
coordinate_transformation_mode; `nearest_index` rounds it for each nearest_mode. Both work on
one axis and are evaluated once per output position, into small per-axis tables.
"""

from __future__ import annotations

import numpy as np

from lowering import te

TRANSFORMS = (
    "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
)
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")

F32 = "float32"


def _f(v: float) -> te.Const:
    return te.Const(float(np.float32(v)), F32)


def original_coordinate(
    mode: str, out_pos: te.Expr, scale: float | te.Expr, out_len: int, in_len: int
) -> te.Expr:
    """Input coordinate (float32) of output position `out_pos` along one axis; `scale` a
    constant or a float32 expression (a scale given at run time)."""
    xr = te.cast(F32, out_pos)
    s = scale if isinstance(scale, te.Expr) else _f(scale)
    if mode == "half_pixel":
        return (xr + 0.5) / s - 0.5
    if mode == "half_pixel_symmetric":
        # float32 as onnxruntime: adjustment = out / (scale * in), offset = in / 2 * (1 - adj)
        adjustment = _f(out_len) / (s * _f(in_len))
        offset = _f(in_len / 2) * (_f(1.0) - adjustment)
        # onnxruntime adds up this one in double precision
        x64 = te.cast("float64", out_pos)
        total = te.cast("float64", offset) + (x64 + 0.5) / te.cast("float64", s) - 0.5
        return te.cast(F32, total)
    if mode == "pytorch_half_pixel":
        return (xr + 0.5) / s - 0.5 if out_len > 1 else _f(0.0)
    if mode == "align_corners":
        return xr * _f(in_len - 1) / _f(out_len - 1) if out_len > 1 else _f(0.0)
    if mode == "asymmetric":
        return xr / s
    raise ValueError(f"unknown coordinate_transformation_mode {mode}")


def nearest_index(mode: str, coord: te.Expr, in_len: int) -> te.Expr:
    """The input index (int64, clamped to the axis) nearest_mode picks for `coord`."""
    if mode == "floor":
        r = te.unary("floor", coord)
    elif mode == "ceil":
        r = te.unary("ceil", coord)
    else:  # round: ties go down (prefer_floor) or up (prefer_ceil)
        fl = te.unary("floor", coord)
        frac = coord - fl
        up = te.gt(frac, 0.5) if mode == "round_prefer_floor" else te.ge(frac, 0.5)
        r = fl + te.select(up, _f(1.0), _f(0.0))
    return te.minimum(te.maximum(te.cast("int64", r), 0), in_len - 1)


def linear_taps(coord: te.Expr, in_len: int) -> tuple[te.Expr, te.Expr, te.Expr, te.Expr]:
    """(lo, hi, w_lo, w_hi) for linear interpolation at `coord`, clamped into the axis."""
    c = te.minimum(te.maximum(coord, _f(0.0)), _f(in_len - 1))
    lo = te.minimum(te.cast("int64", c), in_len - 1)
    hi = te.minimum(lo + 1, in_len - 1)
    d_lo = te.unary("abs", c - te.cast(F32, lo))
    d_hi = te.unary("abs", c - te.cast(F32, hi))
    same = te.eq(lo, hi)
    return lo, hi, te.select(same, _f(0.5), d_hi), te.select(same, _f(0.5), d_lo)
