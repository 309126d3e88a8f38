"""Conversions to the 8-bit floats with ONNX's options (Cast's `saturate` and `round_mode`,
QuantizeLinear's `saturate`), as te expressions around `te.cast`.

`te.cast` to an 8-bit float rounds as Cast does by default: to nearest even, saturating to the
largest finite value (infinities included), E8M0 rounding up (targets/cpu/narrow_ir.py). The
other settings are selects around it, in float32 (a float64 or an integer is rounded to float32
first, as onnxruntime converts it):
- saturate=0: a value whose rounding passes the largest finite value (ties included where the
  largest has an odd mantissa), and ±inf, become NaN (E4M3FN: of x's sign; the FNUZ kinds'
  one NaN) or ±inf (E5M2), as the spec's table and ml_dtypes say. (onnxruntime 1.32 differs
  just above the largest: E4M3FN keeps 448 for [480, 496), E5M2 gives NaN in [61440, 65536).)
- E8M0 (a power of two 2^-127..2^127, no sign, NaN): round_mode "down" halves the "up" result
  when that passed x, "nearest" takes the upper power from 1.5 times the lower (ties up);
  saturate=0 makes NaN of everything outside [2^-127, 2^127] (zero, negatives and ±inf
  included) before rounding, as onnxruntime does.
"""

from __future__ import annotations

import math

from lowering import te

E8M0 = "float8_e8m0fnu"
ROUND_MODES = ("up", "down", "nearest")
_NAN = math.nan
_NEG_NAN = math.copysign(math.nan, -1.0)
# kind -> (threshold, whether the threshold itself overflows, overflow of a positive x, of a
# negative x): a value overflows when |x| is past the threshold (the midpoint between the
# largest finite value and the next power's step)
_OVERFLOW = {
    "float8_e4m3fn": (464.0, False, _NAN, _NEG_NAN),  # 448 + 16: the tie goes to 448 (even)
    "float8_e4m3fnuz": (248.0, True, _NAN, _NAN),  # 240 + 8: the tie goes up (240 is odd)
    "float8_e5m2": (61440.0, True, math.inf, -math.inf),  # 57344 + 4096, 57344 is odd
    "float8_e5m2fnuz": (61440.0, True, _NAN, _NAN),
}


def convert(x: te.Expr, dtype: str, saturate: bool = True, round_mode: str = "up") -> te.Expr:
    """`x` as `dtype`, as ONNX's Cast with these attributes (which only the 8-bit floats
    read; 4-bit floats always saturate)."""
    if dtype == E8M0:
        return _e8m0(te.cast("float32", x), saturate, round_mode)
    if saturate or dtype not in _OVERFLOW:
        return te.cast(dtype, x)
    f = te.cast("float32", x)
    threshold, inclusive, above, below = _OVERFLOW[dtype]
    a = te.unary("abs", f)
    over = te.ge(a, threshold) if inclusive else te.gt(a, threshold)
    overflow = te.select(te.lt(f, 0.0), te.Const(below, dtype), te.Const(above, dtype))
    return te.select(over, overflow, te.cast(dtype, f))


def _e8m0(f: te.Expr, saturate: bool, round_mode: str) -> te.Expr:
    if round_mode not in ROUND_MODES:
        raise te.TEError(f"round_mode {round_mode!r}")
    if saturate and round_mode == "up":
        return te.cast(E8M0, f)
    lowest, highest = 2.0 ** -127, 2.0 ** 127
    up = te.cast("float32", te.cast(E8M0, f))  # the power at or above |x|, clamped
    r = up
    if round_mode in ("down", "nearest"):
        down = te.select(te.gt(up, f), up * 0.5, up)
        down = te.select(te.lt(down, lowest), te.const(lowest), down)  # NaN stays NaN
        r = down if round_mode == "down" else te.select(te.ge(f, up * 0.75), up, down)
    if not saturate:
        inside = te.logical_and(te.ge(f, lowest), te.le(f, highest))
        r = te.select(inside, r, te.const(_NAN))
    return te.cast(E8M0, r)
