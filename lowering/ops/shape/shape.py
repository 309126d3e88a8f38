"""Shape, Size, ConstantOfShape, Range: outputs whose shape is known at compile time.

The frontend usually folds these to initializers; when it does not (their input is a run-time
value with a static shape), each becomes a compute whose body is made of constants. A Range
whose start, limit or delta is given at run time computes its values from them, for the
declared length, which a check requires them to give (pinned.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import ml_dtypes  # noqa: F401 (numpy's dtype "bfloat16")
import numpy as np

from lowering import te
from lowering.ops import OpContext, pinned, register_op

_NP_TO_DTYPE = {np.dtype(t): t for t in te.DTYPES}  # te's names are numpy's


def constant_vector(values: Sequence[int | float], dtype: str, name: str) -> te.Tensor:
    """A 1-D tensor of `values`: a balanced tree of selects on the index (for short vectors)."""

    def pick(i: te.Expr, lo: int, hi: int) -> te.Expr:
        if hi - lo == 1:
            return te.Const(values[lo], dtype)
        mid = (lo + hi) // 2
        return te.select(te.lt(i, mid), pick(i, lo, mid), pick(i, mid, hi))

    if not values:
        return te.compute((0,), lambda i: te.Const(0, dtype), name=name)
    return te.compute((len(values),), lambda i: pick(i, 0, len(values)), name=name)


@register_op("Shape")
def shape(ctx: OpContext) -> list[te.Tensor]:
    dims = ctx.input(0).shape
    rank = len(dims)

    def bound(v: int | None, default: int) -> int:
        if v is None:
            return default
        v = int(v)
        return min(max(v + rank if v < 0 else v, 0), rank)

    start, end = bound(ctx.attr("start"), 0), bound(ctx.attr("end"), rank)
    return [constant_vector(list(dims[start:end]), "int64", "shape")]


@register_op("Size")
def size(ctx: OpContext) -> list[te.Tensor]:
    n = math.prod(ctx.input(0).shape)
    return [te.compute((), lambda: te.Const(n, "int64"), name="size")]


@register_op("ConstantOfShape")
def constant_of_shape(ctx: OpContext) -> list[te.Tensor]:
    if pinned.run_time(ctx, 0) is not None:  # the output's shape pins it (pinned.py)
        dims = [int(d) for d in pinned.values(ctx, 0, list(ctx.out_shapes[0]), "shape")]
    else:
        dims = [int(d) for d in np.asarray(ctx.const(0, "shape")).reshape(-1)]
    value = ctx.attr("value")
    arr = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    if arr.size != 1:
        raise ctx.error("value must hold exactly one element")
    dtype = _NP_TO_DTYPE.get(arr.dtype)
    if dtype is None:
        raise ctx.error(f"value of element type {arr.dtype} is not supported")
    if tuple(dims) != tuple(ctx.out_shapes[0]) or dtype != ctx.out_dtypes[0]:
        raise ctx.error(f"output {dtype}{dims} disagrees with the inferred "
                        f"{ctx.out_dtypes[0]}{list(ctx.out_shapes[0])}")
    fill = arr[0].item()
    return [te.compute(tuple(dims), lambda *i: te.Const(fill, dtype), name="constant_of_shape")]


@register_op("Range")
def range_(ctx: OpContext) -> list[te.Tensor]:
    if any(pinned.run_time(ctx, k) is not None for k in range(3)):
        return [_range_at_run_time(ctx)]
    start, limit, delta = (np.asarray(ctx.const(k, w)).reshape(-1) for k, w in
                           enumerate(("start", "limit", "delta")))
    dtype = ctx.out_dtypes[0]
    if any(v.size != 1 for v in (start, limit, delta)):
        raise ctx.error("start, limit and delta must be scalars")
    s, lim, d = start[0].item(), limit[0].item(), delta[0].item()
    if d == 0:
        raise ctx.error("delta cannot be 0")
    n = max(math.ceil((lim - s) / d), 0)
    if (n,) != tuple(ctx.out_shapes[0]):
        raise ctx.error(f"range has {n} elements, the inferred shape is "
                        f"{list(ctx.out_shapes[0])}")
    return [_range_values(dtype, n, te.Const(s, _wide(dtype)), te.Const(d, _wide(dtype)))]


def _wide(dtype: str) -> str:
    """The type a range is computed in: float64 for floats, so that start + i * delta is the
    exact value rounded once."""
    return "float64" if dtype in te.FLOAT_DTYPES else dtype


def _range_values(dtype: str, n: int, start: te.Expr, delta: te.Expr) -> te.Tensor:
    def body(i: te.Expr) -> te.Expr:
        return te.cast(dtype, start + te.cast(start.dtype, i) * delta)

    return te.compute((n,), body, name="range")


def _range_at_run_time(ctx: OpContext) -> te.Tensor:
    """Range whose start, limit or delta is read when the kernel runs: the declared output
    length is what was compiled, and a check requires the values to give it."""
    dtype = ctx.out_dtypes[0]
    wide = _wide(dtype)
    scalars = []
    for k in range(3):
        t = ctx.input(k)
        if t.size != 1:
            raise ctx.error("start, limit and delta must be scalars")
        scalars.append(te.cast(wide, pinned.elements(t)[0]))
    start, limit, delta = scalars
    (n,) = ctx.out_shapes[0]
    zero = te.const(0, wide)
    if wide == "float64":
        count = te.unary("ceil", (limit - start) / delta)
    else:  # ceil(a / b) with floor division, for either sign of b; b = 0 is caught below
        count = zero - (zero - (limit - start)) // te.select(te.eq(delta, zero),
                                                              te.const(1, wide), delta)
    ok = te.logical_and(te.ne(delta, zero), te.eq(te.maximum(count, zero), te.const(n, wide)))
    pinned.require(ctx, ok, f"start, limit and delta must give {n} elements")
    return _range_values(dtype, n, start, delta)
