"""Max, Min, Sum, Mean: one or more inputs, broadcast together (numpy rules).

Float Max/Min propagate NaN like onnxruntime. Mean is the sum divided by n, in the
input type.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.elementwise.operands import elementwise, fmax, fmin, require_dtype

NUMERIC = te.NUMERIC_DTYPES


def _mean(*xs: te.Expr) -> te.Expr:
    total = reduce(lambda a, b: a + b, xs)
    return total if len(xs) == 1 else total / float(len(xs))


VARIADIC: dict[str, tuple[tuple[str, ...], Callable[..., te.Expr]]] = {
    "Max": (NUMERIC, lambda *xs: reduce(fmax, xs)),
    "Min": (NUMERIC, lambda *xs: reduce(fmin, xs)),
    "Sum": (te.FLOAT_DTYPES, lambda *xs: reduce(lambda a, b: a + b, xs)),
    "Mean": (te.FLOAT_DTYPES, _mean),
}


def _define(name: str) -> None:
    dtypes, fn = VARIADIC[name]

    @register_op(name)
    def _op(ctx: OpContext) -> list[te.Tensor]:
        present = [i for i in range(len(ctx.inputs)) if ctx.has_input(i)]
        if not present:
            raise ctx.error(f"{name} needs at least one input")
        dtype = require_dtype(ctx, dtypes, present[0])
        for i in present:
            if ctx.input(i).dtype != dtype:
                raise ctx.error(f"{name} inputs differ in type ({dtype}, {ctx.input(i).dtype})")
        return [elementwise(ctx, fn, present)]


for _name in VARIADIC:
    _define(_name)
