"""sinh and cosh for vecmath, computed in double from the float argument and rounded once.

With E = e^|x| = 2^(|x| log2 e) (vecmath_double.exp2_d; |x| clamped to 100, whose e^100 is a
finite double that still rounds to a float infinity), cosh = (E + 1/E)/2 and, from |x| = 1
on, sinh = ±(E - 1/E)/2, where the difference loses at most a factor 1.16. Below 1, where it
would cancel, sinh is its Taylor series to x^13 (within 8e-13 relative). Results that pass
FLT_MAX (|x| > 89.4) round to ±inf only at the final rounding; sinh keeps the sign of zero.
"""

from __future__ import annotations

import math

from targets.cpu.vecmath_double import exp2_d
from targets.cpu.vecmath_ir import Fn

D = "double"
_LOG2E = 1.4426950408889634
# sinh x = x + x^3 S(x^2): 1/3!, 1/5!, ..., 1/13!, highest first for Horner
_SINH_S = [1.0 / math.factorial(k) for k in range(13, 2, -2)]


def _exp_abs(b: Fn, x: str) -> tuple[str, str]:
    """(|x| as a double, e^|x| in double)."""
    a = b.cast("fpext", b.fabs(x), "float", D)
    t = b.fmul(b.clamp(a, 0.0, 100.0, D), b.c(_LOG2E, D), D)
    return a, exp2_d(b, t)


def sinh_body(b: Fn, x: str) -> str:
    a, e = _exp_abs(b, x)
    big = b.fmul(b.fsub(e, b.fdiv(b.c(1.0, D), e, D), D), b.c(0.5, D), D)
    a2 = b.fmul(a, a, D)
    small = b.fma(b.fmul(a, a2, D), b.horner(a2, _SINH_S, D), a, D)
    r = b.select(b.fcmp("olt", a, b.c(1.0, D), D), small, big, D)  # NaN takes `big`: NaN
    return b.copysign(b.cast("fptrunc", r, D, "float"), x)


def cosh_body(b: Fn, x: str) -> str:
    _, e = _exp_abs(b, x)
    r = b.fmul(b.fadd(e, b.fdiv(b.c(1.0, D), e, D), D), b.c(0.5, D), D)
    return b.cast("fptrunc", r, D, "float")
