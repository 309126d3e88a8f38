"""Scalar float math functions written in LLVM IR, for the loop vectorizer.

LLVM turns ``llvm.exp.v16f32`` (and friends) into sixteen scalar ``expf`` calls, so the CPU code
generator does not use the libm intrinsics: it calls the functions defined here from its loops.
Each one is ``define internal float @aotc_…(float) alwaysinline`` and uses only arithmetic,
``fcmp``/``select``, ``bitcast`` and integer operations and the intrinsics ``llvm.fmuladd``,
``llvm.fabs``, ``llvm.copysign``, ``llvm.sqrt`` (and ``llvm.ldexp`` where it is one
instruction, see ``math_ir``).  There are no branches, no libm calls and no rounding
intrinsics (``llvm.rint``/``llvm.floor`` become ``rintf``/``floorf`` calls on x86 targets without
SSE4.1), so after inlining the loop vectorizer widens them on every target.

Numerics (DESIGN.md decision 3): no ``nnan``/``ninf``/``fast`` flags, the FP environment is never
touched, and results do not depend on whether ``llvm.fmuladd`` is fused: every range reduction
that must be exact is exact with or without FMA (Cody-Waite constants with few significant bits).
Rounding to an integer uses the ``x + 1.5·2^23`` trick, which assumes the default
round-to-nearest mode (as does every libm).

Accuracy: max error in float32 ulps against float64 references, measured exhaustively (exp: all
2^32 inputs; the others every 13th bit pattern, erf every 61st) on a Cascade Lake host; the same
within 0.1 ulp for baseline x86-64 without FMA. ``tests/test_vecmath.py`` checks samples of it.

- ``exp`` 1.01 ulp: underflow is gradual (denormal results are produced, rounded once), results
  round to +inf above ln(FLT_MAX), to 0 below about -103.97; -inf and -3.4e38 give exactly 0.
- ``exp_nonpositive``: exp's floats bit for bit on x <= 0 (what sigmoid, softplus and erf take),
  with no upper clamp and, without a scale instruction, one exponent-built factor.
- ``log`` 0.82 ulp: denormal inputs are scaled by 2^23 first; 0 -> -inf, negative -> NaN.
- ``log1p`` 1.44 ulp (used by softplus): ``log(u) + (a - (u-1))/u`` with ``u = 1 + a``.
- ``tanh`` 1.31 ulp: odd polynomial below 0.625 (no cancellation near 0), ``1 - 2/(e^{2|x|}+1)``.
- ``erf`` 1.41 ulp, absolute 8.4e-8: ``x + x Q(x²)`` below 1, ``1 - e^{-x²}/x R(1/x²)`` above
  (Cephes erfcf fits), exactly ±1 from |x| = 4.
- ``sigmoid`` 2.40 ulp: ``e/(1+e)`` or ``1/(1+e)`` with ``e = exp(-|x|)`` (tails accurate down
  to denormals, never NaN).
- ``softplus`` 1.94 ulp: ``max(x, 0) + log1p(exp(-|x|))``.
- ``pow`` 0.50 ulp (20M random pairs): computed in double (log2 by an atanh series, exp2 by a
  Taylor polynomial) and rounded once to float; special cases follow C99 ``powf`` (pow(x, ±0) = 1,
  pow(1, y) = 1, pow(-1, ±inf) = 1, negative finite x with non-integer y -> NaN, signed zeros and
  infinities for odd integer y, NaN otherwise propagates).
- ``asin``, ``acos``, ``atan``, ``asinh``, ``acosh``, ``atanh`` 0.50 ulp (about 10M inputs
  each, over every 97th bit pattern too): computed in double and rounded once
  (``vecmath_inverse.py``); NaN outside the domain, ±inf at atanh(±1), signed zeros kept.
- ``sinh``, ``cosh`` 0.50 ulp (about 10M inputs, every 97th bit pattern too): in double from
  e^|x| and rounded once (``vecmath_hyperbolic.py``), ±inf past |x| = 89.4.

The IR builder is ``vecmath_ir.py``; the double-precision cores (log2, ln, log1p, 2^t, atan
of a ratio) that pow and the functions computed in double share are ``vecmath_double.py``. tan, like sin and cos, is not here: the
code generator calls libm for it (an accurate float reduction modulo pi/2 needs Payne-Hanek).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from targets.cpu import vecmath_double, vecmath_hyperbolic, vecmath_inverse
from targets.cpu.vecmath_ir import INF, NAN, Fn

__all__ = ["MATH_FUNCTIONS", "math_ir"]

#: ONNX-ish name -> LLVM function name (``float (float)``; ``pow`` is ``float (float, float)``).
MATH_FUNCTIONS: dict[str, str] = {
    "exp": "aotc_expf",
    "log": "aotc_logf",
    "log1p": "aotc_log1pf",
    "tanh": "aotc_tanhf",
    "erf": "aotc_erff",
    "sigmoid": "aotc_sigmoidf",
    "exp_nonpositive": "aotc_exp_nonpositivef",  # e^x for x <= 0 only (sigmoid, softplus, erf)
    "softplus": "aotc_softplusf",
    "pow": "aotc_powf",
    "asin": "aotc_asinf",
    "acos": "aotc_acosf",
    "atan": "aotc_atanf",
    "asinh": "aotc_asinhf",
    "acosh": "aotc_acoshf",
    "atanh": "aotc_atanhf",
    "sinh": "aotc_sinhf",
    "cosh": "aotc_coshf",
}

_FN_ATTRS = "alwaysinline nounwind willreturn memory(none)"


# ------------------------------------------------------------------------------------------
# exp
# ------------------------------------------------------------------------------------------
_LOG2E = 1.4426950408889634
_LN2_HI = 0.693359375  # 9 significant bits: n*_LN2_HI is exact for |n| < 2^15
_LN2_LO = -2.12194440e-4  # ln 2 - _LN2_HI
_SHIFT_F = 12582912.0  # 1.5 * 2^23: x + SHIFT rounds x to an integer held in the low bits
_SHIFT_F_BITS = 0x4B400000
_EXP_BIAS = 64  # e^x for x <= 0 scales by 2^(n + 64) (a normal float), then by 2^-64
# Cephes expf: e^r = 1 + r + r^2 P(r), |r| <= ln2/2
_EXP_P = [
    1.9875691500e-4,
    1.3981999507e-3,
    8.3334519073e-3,
    4.1665795894e-2,
    1.6666665459e-1,
    5.0000001201e-1,
]


def _exp_body(b: Fn, x: str, nonpositive: bool = False) -> str:
    """e^x; `nonpositive`: the caller guarantees x <= 0 or NaN (sigmoid's and softplus's
    e^-|x|, erf's e^-x²), so the result cannot overflow and a shorter scaling suffices."""
    # e^-104 rounds to 0, e^89 to +inf; NaN passes
    xc = b.clamp(x, -104.0, None if nonpositive else 89.0)
    kd = b.fma(xc, b.c(_LOG2E), b.c(_SHIFT_F))
    nf = b.fsub(kd, b.c(_SHIFT_F))  # n = round(x / ln2), exactly
    r = b.fma(nf, b.c(-_LN2_HI), xc)  # exact (Sterbenz)
    r = b.fma(nf, b.c(-_LN2_LO), r)
    r2 = b.fmul(r, r)
    p = b.fma(r2, b.horner(r, _EXP_P), r)
    p = b.fadd(p, b.c(1.0))
    n = b.iop("sub", b.bitcast(kd, "float", "i32"), str(_SHIFT_F_BITS))
    # A NaN input went through the clamp and the polynomial as a NaN, which every scaling
    # below keeps (a NaN times any factor is a NaN).
    if b.scale_instruction:  # p * 2^n rounded once (denormals and overflow included)
        return b.emit(f"call float @llvm.ldexp.f32.i32(float {p}, i32 {n})")
    if nonpositive:
        # n in [-150, 0]: p * 2^(n + 64) is exact (a normal float), and the product with
        # 2^-64 rounds once into the denormals where the true value lies there
        s = b.bitcast(b.iop("shl", b.iop("add", n, str(127 + _EXP_BIAS)), "23"), "i32", "float")
        return b.fmul(b.fmul(p, s), b.c(2.0 ** -_EXP_BIAS))
    # 2^n as 2^n1 * 2^n2 (n in [-150, 128]) so that denormal results get a single rounding and
    # overflow happens exactly where the true value overflows.
    n1 = b.iop("ashr", n, "1")
    n2 = b.iop("sub", n, n1)
    s1 = b.bitcast(b.iop("shl", b.iop("add", n1, "127"), "23"), "i32", "float")
    s2 = b.bitcast(b.iop("shl", b.iop("add", n2, "127"), "23"), "i32", "float")
    return b.fmul(b.fmul(p, s1), s2)


def _exp_nonpositive_body(b: Fn, x: str) -> str:
    return _exp_body(b, x, nonpositive=True)


# ------------------------------------------------------------------------------------------
# log
# ------------------------------------------------------------------------------------------
# Cephes logf: log(1+f) = f - f^2/2 + f^3 P(f), f in [sqrt(1/2)-1, sqrt(2)-1]
_LOG_P = [
    7.0376836292e-2,
    -1.1514610310e-1,
    1.1676998740e-1,
    -1.2420140846e-1,
    1.4249322787e-1,
    -1.6668057665e-1,
    2.0000714765e-1,
    -2.4999993993e-1,
    3.3333331174e-1,
]


def _log_body(b: Fn, x: str) -> str:
    tiny = b.fcmp("olt", x, b.c(2.0**-126))
    xs = b.select(tiny, b.fmul(x, b.c(2.0**23)), x)  # denormals: exact scaling
    eadj = b.emit(f"select i1 {tiny}, i32 -23, i32 0")
    ix = b.bitcast(xs, "float", "i32")
    e = b.iop("ashr", b.iop("sub", ix, str(0x3F3504F3)), "23")  # 0x3F3504F3 = sqrt(1/2)
    m = b.bitcast(b.iop("sub", ix, b.iop("shl", e, "23")), "i32", "float")  # [sqrt.5, sqrt2)
    f = b.fsub(m, b.c(1.0))  # exact
    ef = b.cast("sitofp", b.iop("add", e, eadj), "i32", "float")
    z = b.fmul(f, f)
    y = b.fmul(b.fmul(f, z), b.horner(f, _LOG_P))
    y = b.fma(ef, b.c(_LN2_LO), y)
    y = b.fma(z, b.c(-0.5), y)
    r = b.fadd(f, y)
    r = b.fma(ef, b.c(_LN2_HI), r)  # ef*_LN2_HI is exact
    r = b.select(b.fcmp("oeq", x, b.c(INF)), b.c(INF), r)
    r = b.select(b.fcmp("oeq", x, b.c(0.0)), b.c(-INF), r)
    r = b.select(b.fcmp("olt", x, b.c(0.0)), NAN, r)
    return b.select(b.fcmp("uno", x, x), x, r)


def _log1p_body(b: Fn, a: str) -> str:
    """log(1+a): log(u) + (a - (u-1))/u with u = fl(1+a) (the compensation is exact for |a|<=1)."""
    u = b.fadd(b.c(1.0), a)
    c = b.fsub(a, b.fsub(u, b.c(1.0)))
    lu = b.call(MATH_FUNCTIONS["log"], "float", u)
    r = b.fadd(lu, b.fdiv(c, u))
    r = b.select(b.fcmp("oeq", c, b.c(0.0)), lu, r)  # a = -1 (0/0), exact sums
    r = b.select(b.fcmp("oeq", a, b.c(0.0)), a, r)  # keeps the sign of -0
    return b.select(b.fcmp("oeq", a, b.c(INF)), b.c(INF), r)


# ------------------------------------------------------------------------------------------
# tanh, sigmoid, softplus
# ------------------------------------------------------------------------------------------
# Cephes tanhf, |x| < 0.625: tanh x = x + x^3 P(x^2)
_TANH_P = [
    -5.70498872745e-3,
    2.06390887954e-2,
    -5.37397155531e-2,
    1.33314422036e-1,
    -3.33332819422e-1,
]


def _tanh_body(b: Fn, x: str) -> str:
    ax = b.fabs(x)
    z = b.fmul(x, x)
    small = b.fma(b.fmul(z, x), b.horner(z, _TANH_P), x)
    small = b.copysign(small, x)  # tanh(-0) = -0
    e = b.call(MATH_FUNCTIONS["exp"], "float", b.fadd(ax, ax))
    big = b.fsub(b.c(1.0), b.fdiv(b.c(2.0), b.fadd(e, b.c(1.0))))  # e=inf -> 1
    big = b.copysign(big, x)
    return b.select(b.fcmp("olt", ax, b.c(0.625)), small, big)  # NaN takes `big`: NaN


def _sigmoid_body(b: Fn, x: str) -> str:
    e = b.call(MATH_FUNCTIONS["exp_nonpositive"], "float", b.fneg(b.fabs(x)))  # in [0, 1]
    num = b.select(b.fcmp("oge", x, b.c(0.0)), b.c(1.0), e)
    return b.fdiv(num, b.fadd(b.c(1.0), e))


def _softplus_body(b: Fn, x: str) -> str:
    e = b.call(MATH_FUNCTIONS["exp_nonpositive"], "float", b.fneg(b.fabs(x)))
    lp = b.call(MATH_FUNCTIONS["log1p"], "float", e)
    mx = b.select(b.fcmp("ogt", x, b.c(0.0)), x, b.c(0.0))
    return b.fadd(mx, lp)


# ------------------------------------------------------------------------------------------
# erf
# ------------------------------------------------------------------------------------------
# erf x = x + x Q(x^2) on |x| < 1: minimax for erf(x)/x - 1 in relative error (1.2e-9; the Cephes
# erff polynomial with its constant term less 1, so the final x + x*Q rounds once)
_ERF_Q = [
    7.853861129895907e-05,
    -8.010193688293143e-04,
    5.188327711142857e-03,
    -2.6853811961516778e-02,
    1.1283585149717804e-01,
    -3.761262582441700e-01,
    1.283791657267959e-01,
]
# Cephes erfcf: erfc x = e^{-x^2} / x * P(1/x^2) on [1, 2), R(1/x^2) on [2, 14)
_ERFC_P = [
    2.326819970068386e-2,
    -1.387039388740657e-1,
    3.687424674597105e-1,
    -5.824733027278666e-1,
    6.210004621745983e-1,
    -4.944515323274145e-1,
    3.404879937665872e-1,
    -2.741127028184656e-1,
    5.638259427386472e-1,
]
_ERFC_R = [
    -1.047766399936249e1,
    1.297719955372516e1,
    -7.495518717768503e0,
    2.921019019210786e0,
    -1.015265279202700e0,
    4.218463358204948e-1,
    -2.820767439740514e-1,
    5.641895067754075e-1,
]


def _erf_body(b: Fn, x: str) -> str:
    ax = b.fabs(x)
    small = b.fma(x, b.horner(b.fmul(x, x), _ERF_Q), x)
    a = b.clamp(ax, 1.0, 4.0)  # erf rounds to 1 from 3.92 on
    q = b.fdiv(b.c(1.0), a)
    y = b.fmul(q, q)
    poly = b.select(b.fcmp("olt", a, b.c(2.0)), b.horner(y, _ERFC_P), b.horner(y, _ERFC_R))
    ez = b.call(MATH_FUNCTIONS["exp_nonpositive"], "float", b.fneg(b.fmul(a, a)))  # a >= 1
    erfc = b.fmul(b.fmul(ez, q), poly)
    big = b.copysign(b.fsub(b.c(1.0), erfc), x)
    return b.select(b.fcmp("olt", ax, b.c(1.0)), small, big)  # NaN takes `big`: NaN


# ------------------------------------------------------------------------------------------
# pow (in double)
# ------------------------------------------------------------------------------------------


def _pow_body(b: Fn, x: str, y: str) -> str:
    d = "double"
    ax = b.fabs(x)
    xd = b.cast("fpext", ax, "float", d)  # float denormals are normal doubles
    yd = b.cast("fpext", y, "float", d)
    lx = vecmath_double.log2_d(b, xd)
    lx = b.select(b.fcmp("oeq", ax, b.c(0.0)), b.c(-INF, d), lx, d)
    lx = b.select(b.fcmp("oeq", ax, b.c(INF)), b.c(INF, d), lx, d)
    lx = b.select(b.fcmp("uno", x, x), NAN, lx, d)
    t = b.fmul(yd, lx, d)  # exact-ish: |t| < 2^9 with ~2^-45 relative error
    res = b.cast("fptrunc", vecmath_double.exp2_d(b, t), d, "float")
    res = b.select(b.fcmp("uno", t, t, d), NAN, res)
    # parity of y
    ay = b.fabs(y)
    two23 = b.c(2.0**23)
    ybig = b.fcmp("oge", ay, two23)  # integer (or inf)
    ty = b.fadd(ay, two23)
    yint = b.bor(ybig, b.fcmp("oeq", b.fsub(ty, two23), ay))
    ybits = b.bitcast(b.select(ybig, ay, ty), "float", "i32")
    lowbit = b.emit(f"trunc i32 {ybits} to i1")
    yodd = b.band(b.band(yint, lowbit), b.fcmp("olt", ay, b.c(2.0**24)))
    xneg = b.emit(f"icmp slt i32 {b.bitcast(x, 'float', 'i32')}, 0")  # sign bit (-0 too)
    res = b.select(b.band(xneg, yodd), b.fneg(res), res)
    # negative finite x with non-integer y -> NaN
    xnegfin = b.band(b.fcmp("olt", x, b.c(0.0)), b.fcmp("one", x, b.c(-INF)))
    res = b.select(b.band(xnegfin, b.emit(f"xor i1 {yint}, true")), NAN, res)
    # pow(x, +-0) = 1, pow(1, y) = 1, pow(-1, +-inf) = 1 (even for NaN operands)
    one = b.bor(b.fcmp("oeq", y, b.c(0.0)), b.fcmp("oeq", x, b.c(1.0)))
    one = b.bor(one, b.band(b.fcmp("oeq", x, b.c(-1.0)), b.fcmp("oeq", ay, b.c(INF))))
    return b.select(one, b.c(1.0), res)


# ------------------------------------------------------------------------------------------
# assembly
# ------------------------------------------------------------------------------------------
_Body = Callable[..., str]
# name -> (builder, arity, names of the functions it calls)
_DEFS: dict[str, tuple[_Body, int, tuple[str, ...]]] = {
    "exp": (_exp_body, 1, ()),
    "exp_nonpositive": (_exp_nonpositive_body, 1, ()),
    "log": (_log_body, 1, ()),
    "log1p": (_log1p_body, 1, ("log",)),
    "tanh": (_tanh_body, 1, ("exp",)),
    "erf": (_erf_body, 1, ("exp_nonpositive",)),
    "sigmoid": (_sigmoid_body, 1, ("exp_nonpositive",)),
    "softplus": (_softplus_body, 1, ("exp_nonpositive", "log1p")),
    "pow": (_pow_body, 2, ()),
    "asin": (vecmath_inverse.asin_body, 1, ()),
    "acos": (vecmath_inverse.acos_body, 1, ()),
    "atan": (vecmath_inverse.atan_body, 1, ()),
    "asinh": (vecmath_inverse.asinh_body, 1, ()),
    "acosh": (vecmath_inverse.acosh_body, 1, ()),
    "atanh": (vecmath_inverse.atanh_body, 1, ()),
    "sinh": (vecmath_hyperbolic.sinh_body, 1, ()),
    "cosh": (vecmath_hyperbolic.cosh_body, 1, ()),
}


def _define(name: str, scale_instruction: bool) -> str:
    body, arity, _ = _DEFS[name]
    b = Fn(scale_instruction)
    args = ["%x", "%y"][:arity]
    res = body(b, *args)
    params = ", ".join(f"float {a}" for a in args)
    lines = [f"define internal float @{MATH_FUNCTIONS[name]}({params}) {_FN_ATTRS} {{", "entry:"]
    lines += b.lines
    lines += [f"  ret float {res}", "}"]
    return "\n".join(lines) + "\n"


def math_ir(names: Iterable[str], scale_instruction: bool = False) -> str:
    """LLVM IR text defining the functions for ``names`` (keys of ``MATH_FUNCTIONS``) and the
    functions they call, to append to a module. Intrinsics are not declared: the LLVM 22 parser
    declares the ones a module uses, so the text never clashes with the module's own
    declarations. Each function is defined once, in dependency order. `scale_instruction`:
    the target computes x * 2^n in one instruction (``CpuTarget.scales_by_instruction``), so
    exp scales its result by ``llvm.ldexp`` rather than by two exponent-built factors."""
    order: list[str] = []

    def visit(n: str) -> None:
        if n not in _DEFS:
            raise KeyError(f"no vector math function for {n!r}; known: {sorted(_DEFS)}")
        if n in order:
            return
        for dep in _DEFS[n][2]:
            visit(dep)
        order.append(n)

    for n in names:
        visit(n)
    return "\n".join(_define(n, scale_instruction) for n in order)
