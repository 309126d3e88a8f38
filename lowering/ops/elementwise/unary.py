"""Unary element-wise operators without attributes, as one table: name → (dtypes, expression).

Special values follow onnxruntime: NaN propagates through Relu/Abs/Neg/Sign, Log(0) = -inf,
Sigmoid/Tanh/Softplus saturate at large |x| (vecmath computes their tails without overflow).
"""

from __future__ import annotations

from collections.abc import Callable

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.elementwise.operands import elementwise, require_dtype

FLOATS = te.FLOAT_DTYPES
SIGNED = te.SIGNED_DTYPES
NUMERIC = te.NUMERIC_DTYPES


def _relu(x: te.Expr) -> te.Expr:
    return te.select(te.lt(x, 0), te.as_expr(0, x.dtype), x)  # NaN stays NaN


def _abs(x: te.Expr) -> te.Expr:
    return x if x.dtype in te.UNSIGNED_DTYPES else te.unary("abs", x)


def _sign(x: te.Expr) -> te.Expr:
    if x.dtype in te.UNSIGNED_DTYPES:
        return te.select(te.gt(x, 0), te.as_expr(1, x.dtype), x)
    one, minus_one = te.as_expr(1, x.dtype), te.as_expr(-1, x.dtype)
    return te.select(te.lt(x, 0), minus_one, te.select(te.gt(x, 0), one, x))  # 0, NaN stay


def _u(op: str) -> Callable[[te.Expr], te.Expr]:
    return lambda x: te.unary(op, x)


UNARY: dict[str, tuple[tuple[str, ...], Callable[[te.Expr], te.Expr]]] = {
    "Relu": (SIGNED, _relu),
    "Abs": (NUMERIC, _abs),
    "Neg": (SIGNED, _u("neg")),
    "Sign": (NUMERIC, _sign),
    "Sigmoid": (FLOATS, _u("sigmoid")),
    "Tanh": (FLOATS, _u("tanh")),
    "Erf": (FLOATS, _u("erf")),
    "Softplus": (FLOATS, _u("softplus")),
    "Exp": (FLOATS, _u("exp")),
    "Log": (FLOATS, _u("log")),
    "Sqrt": (FLOATS, _u("sqrt")),
    "Reciprocal": (FLOATS, lambda x: 1.0 / x),
    "Floor": (FLOATS, _u("floor")),
    "Ceil": (FLOATS, _u("ceil")),
    "Round": (FLOATS, _u("round")),  # half to even, as ONNX
    "Sin": (FLOATS, _u("sin")),
    "Cos": (FLOATS, _u("cos")),
    "Tan": (FLOATS, _u("tan")),
    "Asin": (FLOATS, _u("asin")),  # NaN outside [-1, 1], as the inverse functions below
    "Acos": (FLOATS, _u("acos")),
    "Atan": (FLOATS, _u("atan")),
    "Asinh": (FLOATS, _u("asinh")),
    "Acosh": (FLOATS, _u("acosh")),
    "Atanh": (FLOATS, _u("atanh")),  # ±inf at ±1
    "Sinh": (FLOATS, _u("sinh")),
    "Cosh": (FLOATS, _u("cosh")),
    "Not": (("bool",), _u("not")),
}


def _define(name: str) -> None:
    dtypes, fn = UNARY[name]

    @register_op(name)
    def _op(ctx: OpContext) -> list[te.Tensor]:
        require_dtype(ctx, dtypes)
        return [elementwise(ctx, fn, [0])]


for _name in UNARY:
    _define(_name)
