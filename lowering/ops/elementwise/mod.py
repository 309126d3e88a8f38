"""Mod with numpy broadcasting: fmod=0 takes the divisor's sign (`a - floor(a/b)*b`, Python's
%), fmod=1 the dividend's (`a - trunc(a/b)*b`, C's fmod).

Integers: the two are LLVM's floor and truncating remainders. Division by zero is undefined in
ONNX (a trap in C); here x mod 0 is 0, as numpy gives, and never traps.

float32, exactly as C's fmod: fmod(|a|, |b|) is computed in float64 by reducing x = |a|
modulo y = |b|·2^(28j) for j = J..0, then given a's sign. Each step's quotient is below 2^29,
so n = floor(x / y) is exact or one too large (never too small, integers being
representable), n·y is exact in 53 bits and x - n·y is the exact remainder (or it minus y,
fixed by one add); the last step, y = |b|, leaves fmod(|a|, |b|), which float32 holds
exactly. J covers the whole float32 range (|a| < 2^128, |b| ≥ 2^-149: J = 9), fewer when b is
a known constant. Each step is a stage of its own (an expression reading the previous one
several times would otherwise double in size per step). fmod=0
then adds b when the remainder's sign differs from b's (the float32 add numpy and the ONNX
reference use). The special values follow C and ONNX (opset 28 defines float fmod=0): x mod ±0
and ±inf mod y are NaN, x mod ±inf is x (fmod=0: x if the signs agree, else ±inf), a zero
remainder carries a's sign (fmod=1) or b's (fmod=0).

float64 is C's fmod itself (te's "fmod", LLVM's frem: a libm call per element, as float64's
other math functions are): the same reduction would need a 106-bit product per step. The
sign fix-up and special values after it are float32's.
"""

from __future__ import annotations

import math

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.elementwise.operands import elementwise, loaders, uniform_value

INTS = te.INT_DTYPES
STEP_BITS = 28  # quotient bits per float64 step: n < 2^29 keeps n·B (24 + 29 bits) exact
F32_MAX_EXP, F32_MIN_EXP = 128, -149  # |a| < 2^128, smallest |b| = 2^-149


def _safe_divisor(b: te.Expr) -> te.Expr:
    """b, with 0 (undefined) and -1 (INT_MIN rem -1 overflows, and traps) replaced by 1: the
    remainder by 1 is 0, which is also the right one for -1."""
    one = te.as_expr(1, b.dtype)
    if isinstance(b, te.Const):
        return one if int(b.value) in (0, -1) else b
    bad = te.eq(b, 0) if b.dtype in te.UNSIGNED_DTYPES else te.logical_or(te.eq(b, 0), te.eq(b, -1))
    return te.select(bad, one, b)


def _int_mod(a: te.Expr, b: te.Expr) -> te.Expr:
    return a % _safe_divisor(b)  # te's integer mod is the floor remainder


def _int_fmod(a: te.Expr, b: te.Expr) -> te.Expr:
    d = _safe_divisor(b)
    return a - (a / d) * d  # te's integer div truncates toward zero, as C


def _reduce_step(x: te.Expr, y: te.Expr) -> te.Expr:
    """x modulo y for x ≥ 0 (or NaN, inf) and y > 0 (or 0, NaN, inf) when x / y < 2^29: x
    itself when x < y (also for y = inf, where the division would give 0·inf = NaN)."""
    t = x - te.unary("floor", x / y) * y
    return te.select(te.lt(x, y), x, te.select(te.lt(t, 0), t + y, t))


def _steps(ctx: OpContext) -> int:
    """The largest j the float32 reduction needs: |b|·2^(28j + 29) must pass every |a|."""
    b = uniform_value(ctx, 1)
    if b is None:
        return math.ceil((F32_MAX_EXP - F32_MIN_EXP - STEP_BITS - 1) / STEP_BITS)
    if b == 0 or not math.isfinite(b):
        return 0
    top = F32_MAX_EXP - math.floor(math.log2(abs(b))) - STEP_BITS - 1
    return max(0, math.ceil(top / STEP_BITS))


def _float_mod(ctx: OpContext, fmod: bool) -> te.Tensor:
    read_a, read_b = loaders(ctx, [0, 1])
    shape = ctx.out_shapes[0]
    r = te.compute(shape, lambda *i: te.cast("float64", te.unary("abs", read_a(i))),
                   name="mod_a")
    for j in range(_steps(ctx), -1, -1):
        scale = float(2 ** (STEP_BITS * j))
        r = te.compute(shape, lambda *i, r=r, s=scale: _reduce_step(
            r[i], te.cast("float64", te.unary("abs", read_b(i))) * s), name="mod_step")

    def finish(*i: te.Expr) -> te.Expr:
        a, b = read_a(i), read_b(i)
        rem = te.cast("float32", r[i])  # fmod(|a|, |b|)
        return _signed(a, b, te.select(te.lt(a, 0), -rem, rem), fmod)

    return te.compute(shape, finish, name="mod")


def _signed(a: te.Expr, b: te.Expr, rem: te.Expr, fmod: bool) -> te.Expr:
    """The result from C's fmod(a, b) `rem` (a's sign, or NaN): for fmod=1 a zero carries a's
    sign, for fmod=0 a nonzero remainder takes b's (adding b) and a zero is b's signed zero."""
    zero = te.Const(0.0, a.dtype)
    if fmod:  # a is finite where the remainder is 0
        return te.select(te.eq(rem, 0), a * zero, rem)
    differ = te.logical_and(te.ne(rem, 0), te.ne(te.lt(rem, 0), te.lt(b, 0)))
    signed_zero = te.select(te.lt(b, 0), te.Const(-0.0, a.dtype), zero)
    return te.select(te.eq(rem, 0), signed_zero, te.select(differ, rem + b, rem))


@register_op("Mod")
def mod(ctx: OpContext) -> list[te.Tensor]:
    a, b = ctx.input(0), ctx.input(1)
    if a.dtype != b.dtype:
        raise ctx.error(f"Mod of {a.dtype} and {b.dtype}: the types must be equal")
    fmod = int(ctx.attr("fmod", 0))
    if fmod not in (0, 1):
        raise ctx.error(f"fmod must be 0 or 1, got {fmod}")
    if a.dtype in INTS:
        return [elementwise(ctx, _int_fmod if fmod else _int_mod, [0, 1])]
    if a.dtype == "float64":
        return [elementwise(ctx, lambda x, y: _signed(x, y, te.binary("fmod", x, y),
                                                      bool(fmod)), [0, 1])]
    if a.dtype != "float32":  # float16 and bfloat16 reach definitions as float32 (run_op)
        raise ctx.error(f"Mod of {a.dtype} is not supported (integers, floats)")
    return [_float_mod(ctx, bool(fmod))]
