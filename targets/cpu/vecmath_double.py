"""Double-precision cores of the float vector math functions: log2, ln, log1p and 2^t of a
double, atan of a ratio of two doubles. A float function that widens its argument, computes
with these and rounds once is correctly rounded but for arguments within ~1e-4 ulp of a
rounding boundary (pow, the inverse and hyperbolic functions).

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
_SHIFT_D = 6755399441055744.0  # 1.5 * 2^52: t + SHIFT rounds t to an integer in the low bits
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


def ln_d(b: Fn, u: str) -> str:
    """ln u of a double that is positive normal, 0 (-inf), inf, negative (NaN) or NaN."""
    r = b.fmul(log2_d(b, u), b.c(math.log(2.0), D), D)
    r = b.select(b.fcmp("oeq", u, b.c(INF, D), D), b.c(INF, D), r, D)
    r = b.select(b.fcmp("oeq", u, b.c(0.0, D), D), b.c(-INF, D), r, D)
    r = b.select(b.fcmp("olt", u, b.c(0.0, D), D), NAN, r, D)
    return b.select(b.fcmp("uno", u, u, D), u, r, D)


def ln1p_d(b: Fn, w: str) -> str:
    """log(1 + w) in double: ln(u) + (w - (u-1))/u with u = 1 + w rounded (the correction
    restores what the rounding dropped, so tiny w keep their full precision)."""
    u = b.fadd(b.c(1.0, D), w, D)
    c = b.fsub(w, b.fsub(u, b.c(1.0, D), D), D)
    lu = ln_d(b, u)
    r = b.fadd(lu, b.fdiv(c, u, D), D)
    r = b.select(b.fcmp("oeq", c, b.c(0.0, D), D), lu, r, D)  # u = 0 (0/0), exact sums
    return b.select(b.fcmp("oeq", w, b.c(INF, D), D), b.c(INF, D), r, D)


def atan_ratio_d(b: Fn, p: str, q: str) -> str:
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


def exp2_d(b: Fn, t: str) -> str:
    """2^t of a double t clamped to [-400, 400] (a NaN stays NaN), relative error about 1e-16:
    2^n e^(r ln2) with n = round(t), |r| <= 1/2, e^(r ln2) by its Taylor polynomial."""
    tc = b.clamp(t, -400.0, 400.0, D)
    kd = b.fadd(tc, b.c(_SHIFT_D, D), D)
    nf = b.fsub(kd, b.c(_SHIFT_D, D), D)
    r = b.fmul(b.fsub(tc, nf, D), b.c(math.log(2.0), D), D)
    p = b.horner(r, [1.0 / math.factorial(k) for k in range(11, -1, -1)], D)
    sc = b.iop("add", b.iop("shl", b.bitcast(kd, D, "i64"), "52", "i64"), str(1023 << 52), "i64")
    return b.fmul(p, b.bitcast(sc, "i64", D), D)
