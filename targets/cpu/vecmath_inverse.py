"""The inverse trigonometric and hyperbolic functions (asin, acos, atan, asinh, acosh, atanh)
for vecmath, on the double-precision cores of vecmath_double.py.

Each function widens its float argument to double (exactly), computes in double and rounds
once, so its error is half an ulp plus the cores' ~1e-11 relative error: the results are
correctly rounded but for arguments within ~1e-4 ulp of a rounding boundary. Written as
ratios and log1p's, nothing cancels: 1 - a and 1 + a of a float a are exact in double,
acos x = 2 atan(sqrt(1-x) / sqrt(1+x)) keeps its accuracy near x = 1, asinh and acosh go
through log1p (accurate near 0), and the squares of floats neither overflow nor underflow
in double.
"""

from __future__ import annotations

import math

from targets.cpu.vecmath_double import atan_ratio_d, ln1p_d
from targets.cpu.vecmath_ir import INF, NAN, Fn

D = "double"
_PI_2 = math.pi / 2


def _widen_abs(b: Fn, x: str) -> str:
    return b.cast("fpext", b.fabs(x), "float", D)


def _signed_float(b: Fn, r: str, x: str) -> str:
    """The double `r` rounded to float with the sign of `x` (odd functions; -0 stays -0)."""
    return b.copysign(b.cast("fptrunc", r, D, "float"), x)


def atan_body(b: Fn, x: str) -> str:
    a = _widen_abs(b, x)
    r = atan_ratio_d(b, a, b.c(1.0, D))
    r = b.select(b.fcmp("oeq", a, b.c(INF, D), D), b.c(_PI_2, D), r, D)
    return _signed_float(b, r, x)


def asin_body(b: Fn, x: str) -> str:
    """atan(a / sqrt((1-a)(1+a))): |x| > 1 takes the square root of a negative, NaN."""
    a = _widen_abs(b, x)
    one = b.c(1.0, D)
    q = b.sqrt(b.fmul(b.fsub(one, a, D), b.fadd(one, a, D), D), D)
    return _signed_float(b, atan_ratio_d(b, a, q), x)


def acos_body(b: Fn, x: str) -> str:
    """2 atan(sqrt(1-x) / sqrt(1+x)): acos(1) = +0, acos(-1) = pi, NaN outside [-1, 1]."""
    xd = b.cast("fpext", x, "float", D)
    one = b.c(1.0, D)
    p, q = b.sqrt(b.fsub(one, xd, D), D), b.sqrt(b.fadd(one, xd, D), D)
    r = b.fmul(b.c(2.0, D), atan_ratio_d(b, p, q), D)
    return b.cast("fptrunc", r, D, "float")


def asinh_body(b: Fn, x: str) -> str:
    """log1p(a + a^2 / (1 + sqrt(1 + a^2))), a = |x| (log(a + sqrt(a^2 + 1)) without the
    cancellation near 0)."""
    a = _widen_abs(b, x)
    a2 = b.fmul(a, a, D)
    w = b.fadd(a, b.fdiv(a2, b.fadd(b.c(1.0, D), b.sqrt(b.fadd(b.c(1.0, D), a2, D), D), D), D), D)
    r = ln1p_d(b, w)
    r = b.select(b.fcmp("oeq", a, b.c(INF, D), D), b.c(INF, D), r, D)  # inf/inf above
    return _signed_float(b, r, x)


def acosh_body(b: Fn, x: str) -> str:
    """log1p(t + sqrt(t (x+1))), t = x - 1 (exact near 1); NaN below 1."""
    xd = b.cast("fpext", x, "float", D)
    t = b.fsub(xd, b.c(1.0, D), D)
    w = b.fadd(t, b.sqrt(b.fmul(t, b.fadd(xd, b.c(1.0, D), D), D), D), D)
    r = b.select(b.fcmp("olt", xd, b.c(1.0, D), D), NAN, ln1p_d(b, w), D)
    return b.cast("fptrunc", r, D, "float")


def atanh_body(b: Fn, x: str) -> str:
    """log1p(2a / (1-a)) / 2, a = |x|: atanh(±1) = ±inf, NaN beyond (log1p of < -1)."""
    a = _widen_abs(b, x)
    w = b.fdiv(b.fadd(a, a, D), b.fsub(b.c(1.0, D), a, D), D)
    r = b.fmul(ln1p_d(b, w), b.c(0.5, D), D)
    return _signed_float(b, r, x)
