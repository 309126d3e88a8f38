"""Add, Sub, Mul, Div with numpy broadcasting, float and integer.

Integer Div truncates toward zero (C, onnxruntime). Integer division by zero and INT_MIN / -1
are undefined in ONNX; here they give x and -x (wrapping) instead of a trap.
"""

from __future__ import annotations

from collections.abc import Callable

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.elementwise.operands import elementwise

NUMERIC = te.NUMERIC_DTYPES


def _int_div(a: te.Expr, b: te.Expr) -> te.Expr:
    one = te.as_expr(1, b.dtype)
    if isinstance(b, te.Const) and b.value not in (0, -1):
        return a / b
    if b.dtype in te.UNSIGNED_DTYPES:
        return a / te.select(te.eq(b, 0), one, b)
    minus_one = te.as_expr(-1, b.dtype)
    safe = te.select(te.logical_or(te.eq(b, 0), te.eq(b, minus_one)), one, b)
    return te.select(te.eq(b, minus_one), -a, a / safe)


def _div(a: te.Expr, b: te.Expr) -> te.Expr:
    return a / b if a.dtype in te.FLOAT_DTYPES else _int_div(a, b)


BINARY: dict[str, Callable[[te.Expr, te.Expr], te.Expr]] = {
    "Add": lambda a, b: a + b,
    "Sub": lambda a, b: a - b,
    "Mul": lambda a, b: a * b,
    "Div": _div,
}


def _define(name: str) -> None:
    fn = BINARY[name]

    @register_op(name)
    def _op(ctx: OpContext) -> list[te.Tensor]:
        a, b = ctx.input(0), ctx.input(1)
        if a.dtype != b.dtype or a.dtype not in NUMERIC:
            raise ctx.error(f"{name} of {a.dtype} and {b.dtype} is not supported")
        return [elementwise(ctx, fn, [0, 1])]


for _name in BINARY:
    _define(_name)
