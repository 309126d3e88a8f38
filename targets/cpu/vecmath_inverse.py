"""The inverse trigonometric and hyperbolic functions (asin, acos, atan, asinh, acosh, atanh)
for vecmath, and the double-precision cores they share with pow: log2 and log1p of a double,
atan of a ratio of two doubles.

Each function widens its float argument to double (exactly), computes in double and rounds
once, so its error is half an ulp plus the cores' ~1e-11 relative error: the results are
correctly rounded but for arguments within ~1e-4 ulp of a rounding boundary. Written as
ratios and log1p's, nothing cancels: 1 - a and 1 + a of a float a are exact in double,
acos x = 2 atan(sqrt(1-x) / sqrt(1+x)) keeps its accuracy near x = 1, asinh and acosh go
through log1p (accurate near 0), and the squares of floats neither overflow nor underflow
in double.

atan(p/q) reduces num/den = min(p,q)/max(p,q) in [0, 1] around the nearest of tan(k pi/8),
k = 0, 1, 2 (atan r = k pi/8 + atan((num - c den) / (den + c num)), c = tan(k pi/8), one
division), leaving |u| <= tan(pi/16) where eight terms of atan's series are within 3e-13
relative; p > q adds pi/2 - (...).
"""

from __future__ import annotations

import math

from targets.cpu.vecmath_ir import INF, NAN, Fn

D = "double"
_LOG2E = 1.4426950408889634
_SQRT_HALF_D_BITS = 0x3FE6A09E667F3BCD
_PI_2 = math.pi / 2
# atan u = u + u^3 Q(u^2): the series' terms -1/3, 1/5, ..., -1/15, highest first for Horner
_ATAN_Q = [(-1.0) ** n / (2 * n + 1) for n in range(7, 0, -1)]


def log2_d(b: Fn, xd: str) -> str:
    """log2 of a positive normal double (no special values), relative error about 1e-15:
    e + log(m)/ln2 with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s), s = (m-1)/(m+1)."""
    ib = b.bitcast(xd, D, "i64")
    e = b.iop("ashr", b.iop("sub", ib, str(_SQRT_HALF_D_BITS), "i64"), "52", "i64")
    m = b.bitcast(b.iop("sub", ib, b.iop("shl", e, "52", "i64"), "i64"), "i64", D)
    s = b.fdiv(b.fsub(m, b.c(1.0, D), D), b.fadd(m, b.c(1.0, D), D), D)
    s2 = b.fmul(s, s, D)
    ser = b.horner(s2, [1.0 / k for k in range(17, 2, -2)], D)  # 1/17 s^16 + ... + 1/3 s^2
    s_ln2 = b.fmul(s, b.c(2.0 * _LOG2E, D), D)
    log2m = b.fma(b.fmul(s_ln2, s2, D), ser, s_ln2, D)
    return b.fadd(b.cast("sitofp", e, "i64", D), log2m, D)


def _ln_d(b: Fn, u: str) -> str:
    """ln u of a double that is positive normal, 0 (-inf), inf, negative (NaN) or NaN."""
    r = b.fmul(log2_d(b, u), b.c(math.log(2.0), D), D)
    r = b.select(b.fcmp("oeq", u, b.c(INF, D), D), b.c(INF, D), r, D)
    r = b.select(b.fcmp("oeq", u, b.c(0.0, D), D), b.c(-INF, D), r, D)
    r = b.select(b.fcmp("olt", u, b.c(0.0, D), D), NAN, r, D)
    return b.select(b.fcmp("uno", u, u, D), u, r, D)


def _ln1p_d(b: Fn, w: str) -> str:
    """log(1 + w) in double: ln(u) + (w - (u-1))/u with u = 1 + w rounded (the correction
    restores what the rounding dropped, so tiny w keep their full precision)."""
    u = b.fadd(b.c(1.0, D), w, D)
    c = b.fsub(w, b.fsub(u, b.c(1.0, D), D), D)
    lu = _ln_d(b, u)
    r = b.fadd(lu, b.fdiv(c, u, D), D)
    r = b.select(b.fcmp("oeq", c, b.c(0.0, D), D), lu, r, D)  # u = 0 (0/0), exact sums
    return b.select(b.fcmp("oeq", w, b.c(INF, D), D), b.c(INF, D), r, D)


def _atan_ratio_d(b: Fn, p: str, q: str) -> str:
    """atan(p / q) in [0, pi/2] for finite p, q >= 0, not both 0 (a NaN gives NaN)."""
    swap = b.fcmp("ogt", p, q, D)
    num, den = b.select(swap, q, p, D), b.select(swap, p, q, D)
    k1 = b.fcmp("ogt", num, b.fmul(den, b.c(math.tan(math.pi / 16), D), D), D)
    k2 = b.fcmp("ogt", num, b.fmul(den, b.c(math.tan(3 * math.pi / 16), D), D), D)
    c = b.select(k2, b.c(1.0, D), b.select(k1, b.c(math.tan(math.pi / 8), D), b.c(0.0, D), D), D)
    a = b.select(k2, b.c(math.pi / 4, D),
                 b.select(k1, b.c(math.pi / 8, D), b.c(0.0, D), D), D)
    u = b.fdiv(b.fsub(num, b.fmul(c, den, D), D), b.fma(c, num, den, D), D)
    u2 = b.fmul(u, u, D)
    r = b.fadd(a, b.fma(b.fmul(u, u2, D), b.horner(u2, _ATAN_Q, D), u, D), D)
    return b.select(swap, b.fsub(b.c(_PI_2, D), r, D), r, D)


def _widen_abs(b: Fn, x: str) -> str:
    return b.cast("fpext", b.fabs(x), "float", D)


def _signed_float(b: Fn, r: str, x: str) -> str:
    """The double `r` rounded to float with the sign of `x` (odd functions; -0 stays -0)."""
    return b.copysign(b.cast("fptrunc", r, D, "float"), x)


def atan_body(b: Fn, x: str) -> str:
    a = _widen_abs(b, x)
    r = _atan_ratio_d(b, a, b.c(1.0, D))
    r = b.select(b.fcmp("oeq", a, b.c(INF, D), D), b.c(_PI_2, D), r, D)
    return _signed_float(b, r, x)


def asin_body(b: Fn, x: str) -> str:
    """atan(a / sqrt((1-a)(1+a))): |x| > 1 takes the square root of a negative, NaN."""
    a = _widen_abs(b, x)
    one = b.c(1.0, D)
    q = b.sqrt(b.fmul(b.fsub(one, a, D), b.fadd(one, a, D), D), D)
    return _signed_float(b, _atan_ratio_d(b, a, q), x)


def acos_body(b: Fn, x: str) -> str:
    """2 atan(sqrt(1-x) / sqrt(1+x)): acos(1) = +0, acos(-1) = pi, NaN outside [-1, 1]."""
    xd = b.cast("fpext", x, "float", D)
    one = b.c(1.0, D)
    p, q = b.sqrt(b.fsub(one, xd, D), D), b.sqrt(b.fadd(one, xd, D), D)
    r = b.fmul(b.c(2.0, D), _atan_ratio_d(b, p, q), D)
    return b.cast("fptrunc", r, D, "float")


def asinh_body(b: Fn, x: str) -> str:
    """log1p(a + a^2 / (1 + sqrt(1 + a^2))), a = |x| (log(a + sqrt(a^2 + 1)) without the
    cancellation near 0)."""
    a = _widen_abs(b, x)
    a2 = b.fmul(a, a, D)
    w = b.fadd(a, b.fdiv(a2, b.fadd(b.c(1.0, D), b.sqrt(b.fadd(b.c(1.0, D), a2, D), D), D), D), D)
    r = _ln1p_d(b, w)
    r = b.select(b.fcmp("oeq", a, b.c(INF, D), D), b.c(INF, D), r, D)  # inf/inf above
    return _signed_float(b, r, x)


def acosh_body(b: Fn, x: str) -> str:
    """log1p(t + sqrt(t (x+1))), t = x - 1 (exact near 1); NaN below 1."""
    xd = b.cast("fpext", x, "float", D)
    t = b.fsub(xd, b.c(1.0, D), D)
    w = b.fadd(t, b.sqrt(b.fmul(t, b.fadd(xd, b.c(1.0, D), D), D), D), D)
    r = b.select(b.fcmp("olt", xd, b.c(1.0, D), D), NAN, _ln1p_d(b, w), D)
    return b.cast("fptrunc", r, D, "float")


def atanh_body(b: Fn, x: str) -> str:
    """log1p(2a / (1-a)) / 2, a = |x|: atanh(±1) = ±inf, NaN beyond (log1p of < -1)."""
    a = _widen_abs(b, x)
    w = b.fdiv(b.fadd(a, a, D), b.fsub(b.c(1.0, D), a, D), D)
    r = b.fmul(_ln1p_d(b, w), b.c(0.5, D), D)
    return _signed_float(b, r, x)
