"""Pow: float base with a broadcast exponent of any numeric type; constant exponents as products.

A uniform constant exponent of 0, 1, 2, 3, -1 or 0.5 becomes 1, x, x·x, x·x·x, 1/x or sqrt(x)
(exact and vectorisable; sqrt(-inf) is patched to +inf as pow gives). Other exponents call the
target's pow. An integer base with a constant non-negative integer exponent is repeated
multiplication (wrapping like C); with any other exponent (computed at run time, negative,
fractional) it is onnxruntime's `static_cast<T>(std::pow(double(x), double(y)))`: libm's pow
in float64, truncated toward zero (2^-1 = 0), a result out of the type's range as Cast
converts it.
"""

from __future__ import annotations

import math

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.elementwise.operands import elementwise, loader, uniform_value


def _int_power(x: te.Expr, n: int) -> te.Expr:
    """x**n by binary powering (n ≥ 0)."""
    result: te.Expr | None = None
    square = x
    while n:
        if n & 1:
            result = square if result is None else result * square
        n >>= 1
        if n:
            square = square * square
    return result if result is not None else te.as_expr(1, x.dtype)


def _float_const_power(x: te.Expr, e: float) -> te.Expr:
    if e in (0.0, 1.0, 2.0, 3.0):
        return _int_power(x, int(e))
    if e == -1.0:
        return 1.0 / x
    if e == 0.5:
        inf = te.as_expr(math.inf, x.dtype)
        return te.select(te.eq(x, -inf), inf, te.unary("sqrt", x))
    return te.power(x, te.as_expr(e, x.dtype))


@register_op("Pow")
def pow_(ctx: OpContext) -> list[te.Tensor]:
    base, expo = ctx.input(0), ctx.input(1)
    e = uniform_value(ctx, 1)
    if base.dtype in te.FLOAT_DTYPES:
        if e is not None:
            return [elementwise(ctx, lambda x: _float_const_power(x, float(e)), [0])]
        read = loader(ctx, 1)
        x = loader(ctx, 0)
        return [te.compute(
            ctx.out_shapes[0],
            lambda *i: te.power(x(i), te.cast(base.dtype, read(i))),
            name="pow",
        )]
    if base.dtype not in ("int64", "int32"):
        raise ctx.error(f"Pow of a {base.dtype} base is not supported")
    if e is not None and math.isfinite(e) and e == int(e) and 0 <= e <= 1 << 16:
        return [elementwise(ctx, lambda x: _int_power(x, int(e)), [0])]
    if expo.dtype not in te.NUMERIC_DTYPES:
        raise ctx.error(f"Pow of an integer base by a {expo.dtype} exponent is not supported")
    return [elementwise(ctx, lambda x, y: te.cast(base.dtype, te.power(
        te.cast("float64", x), te.cast("float64", y))), [0, 1])]
