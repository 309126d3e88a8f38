"""How element-wise operators read their inputs: broadcast loads, constants folded to scalars.

`loaders(ctx, indices)` gives one function per input mapping an output index to the input's
value there (right-aligned numpy broadcasting). A constant input whose elements are all equal is
folded into a `te.Const`, so `Pow(x, 2)`, `Clip(x, 0, 6)` or `Add(x, bias_scalar)` compile to
straight arithmetic without a load. `elementwise(ctx, fn)` builds the usual single compute.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from lowering import te
from lowering.ops import OpContext
from lowering.ops.common import broadcast_load

Loader = Callable[[Sequence[te.Expr]], te.Expr]


def uniform_value(ctx: OpContext, i: int) -> float | int | bool | None:
    """The single value of constant input `i` when all its elements are equal (NaN never is)."""
    v = ctx.consts[i] if i < len(ctx.consts) else None
    if v is None or v.size == 0:
        return None
    flat = np.asarray(v).reshape(-1)
    first = flat[0]
    if not bool(np.all(flat == first)):
        return None
    return first.item()


def loader(ctx: OpContext, i: int) -> Loader:
    t = ctx.input(i)
    value = uniform_value(ctx, i)
    if value is not None:
        c = te.Const(value, t.dtype)
        return lambda idx: c
    return lambda idx: broadcast_load(t, idx)


def loaders(ctx: OpContext, indices: Sequence[int]) -> list[Loader]:
    return [loader(ctx, i) for i in indices]


def elementwise(
    ctx: OpContext,
    fn: Callable[..., te.Expr],
    indices: Sequence[int] | None = None,
    out: int = 0,
) -> te.Tensor:
    """`fn` applied to the inputs `indices` (default: all present ones) at every output index."""
    if indices is None:
        indices = [i for i in range(len(ctx.inputs)) if ctx.has_input(i)]
    reads = loaders(ctx, indices)
    return te.compute(
        ctx.out_shapes[out],
        lambda *idx: fn(*[r(idx) for r in reads]),
        name=ctx.op_type.lower(),
    )


def require_dtype(ctx: OpContext, dtypes: Sequence[str], i: int = 0) -> str:
    dtype = ctx.input(i).dtype
    if dtype not in dtypes:
        raise ctx.error(f"input {i} has element type {dtype}; {ctx.op_type} takes "
                        + ", ".join(dtypes))
    return dtype


def is_float(e: te.Expr) -> bool:
    return e.dtype in te.FLOAT_DTYPES


def fmax(a: te.Expr, b: te.Expr) -> te.Expr:
    """max(a, b); for floats a NaN operand gives NaN (as onnxruntime), not the other one."""
    if not is_float(a):
        return te.maximum(a, b)
    if isinstance(a, te.Const):
        a, b = b, a
    if isinstance(b, te.Const) and b.value == b.value:  # x < c is false for a NaN x
        return te.select(te.lt(a, b), b, a)
    return te.select(te.lt(a, b), b, te.select(te.ne(b, b), b, a))


def fmin(a: te.Expr, b: te.Expr) -> te.Expr:
    """min(a, b); for floats a NaN operand gives NaN."""
    if not is_float(a):
        return te.minimum(a, b)
    if isinstance(a, te.Const):
        a, b = b, a
    if isinstance(b, te.Const) and b.value == b.value:
        return te.select(te.gt(a, b), b, a)
    return te.select(te.gt(a, b), b, te.select(te.ne(b, b), b, a))


def string_attr(ctx: OpContext, name: str, default: str) -> str:
    v = ctx.attr(name, default)
    return v.decode() if isinstance(v, bytes) else str(v)
