"""Comparisons (Equal, Less, Greater, LessOrEqual, GreaterOrEqual) and logic (And, Or, Xor).

Both inputs have one type and broadcast together; the result is bool. Float comparisons are
ordered (any comparison with NaN is false), as IEEE and onnxruntime.
"""

from __future__ import annotations

from collections.abc import Callable

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.elementwise.operands import elementwise

NUMERIC = te.NUMERIC_DTYPES

COMPARE: dict[str, tuple[tuple[str, ...], Callable[[te.Expr, te.Expr], te.Expr]]] = {
    "Equal": (NUMERIC + ("bool",), te.eq),
    "Less": (NUMERIC, te.lt),
    "Greater": (NUMERIC, te.gt),
    "LessOrEqual": (NUMERIC, te.le),
    "GreaterOrEqual": (NUMERIC, te.ge),
    "And": (("bool",), te.logical_and),
    "Or": (("bool",), te.logical_or),
    "Xor": (("bool",), te.logical_xor),
}


def _define(name: str) -> None:
    dtypes, fn = COMPARE[name]

    @register_op(name)
    def _op(ctx: OpContext) -> list[te.Tensor]:
        a, b = ctx.input(0), ctx.input(1)
        if a.dtype != b.dtype or a.dtype not in dtypes:
            raise ctx.error(f"{name} of {a.dtype} and {b.dtype} is not supported "
                            f"(takes two inputs of one of {', '.join(dtypes)})")
        return [elementwise(ctx, fn, [0, 1])]


for _name in COMPARE:
    _define(_name)
