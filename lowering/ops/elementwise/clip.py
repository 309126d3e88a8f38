"""Clip: min and max as optional inputs (opset ≥ 11), float and integer types.

A constant bound is folded into the expression; a bound computed at run time is read as a
scalar. For floats a NaN input stays NaN; when min > max every element becomes max (as
onnxruntime: max is applied last).
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.elementwise.operands import fmax, fmin, loader, require_dtype


@register_op("Clip")
def clip(ctx: OpContext) -> list[te.Tensor]:
    require_dtype(ctx, te.DTYPES[:-1])
    x = ctx.input(0)
    bounds = []
    for i, name in ((1, "min"), (2, "max")):
        if not ctx.has_input(i):
            bounds.append(None)
            continue
        t = ctx.input(i)
        if t.size != 1:
            raise ctx.error(f"Clip {name} must be a scalar, got shape {list(t.shape)}")
        if t.dtype != x.dtype:
            raise ctx.error(f"Clip {name} is {t.dtype}, the input is {x.dtype}")
        bounds.append(loader(ctx, i))
    lo, hi = bounds
    zeros = (te.Const(0, "int64"),) * len(x.shape)

    def fn(*idx: te.Expr) -> te.Expr:
        v: te.Expr = x[idx]
        if lo is not None:
            v = fmax(v, lo(zeros))
        if hi is not None:
            v = fmin(v, hi(zeros))
        return v

    return [te.compute(ctx.out_shapes[0], fn, name="clip")]
