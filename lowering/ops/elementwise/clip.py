"""Clip: min and max as optional inputs (opset ≥ 11), float and integer types.

A constant bound is folded into the expression; a bound computed at run time is read as a
scalar. An omitted float bound is the type's lowest/highest finite value (the ONNX default), so
±inf inputs become ∓FLT_MAX there, as in onnxruntime. A NaN input stays NaN; when min > max
every element becomes max (max is applied last).
"""

from __future__ import annotations

import numpy as np

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.elementwise.operands import Loader, fmax, fmin, loader, require_dtype


@register_op("Clip")
def clip(ctx: OpContext) -> list[te.Tensor]:
    require_dtype(ctx, te.DTYPES[:-1])
    x = ctx.input(0)
    bounds = []
    for i, name in ((1, "min"), (2, "max")):
        if not ctx.has_input(i):
            bounds.append(_float_limit(x.dtype, name))
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


def _float_limit(dtype: str, name: str) -> Loader | None:
    """The default bound of an omitted min/max: finite limits for floats, none for integers."""
    if dtype not in te.FLOAT_DTYPES:
        return None
    info = np.finfo(np.dtype(dtype))
    c = te.Const(float(info.min if name == "min" else info.max), dtype)
    return lambda idx: c
