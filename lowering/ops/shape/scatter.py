"""What ScatterElements and ScatterND share: the output as a function of the updates that hit
each of its elements.

A tensor expression cannot write where the data says, so the scatter is turned around: each
output element looks at every update that could land on it (the update coordinates u, a small
domain: one axis of the indices for ScatterElements, the index tuples for ScatterND) and asks
whether it hits. With a reduction the output is `data[p]` combined with every hit's update, in
the updates' row-major order (add, mul, max, min; max/min ignore a NaN update, where
onnxruntime's result depends on where the NaN falls). Without one the last hit in row-major
order wins, as in onnxruntime and the ONNX reference: a first stage finds, for each position the
hits depend on, the last u that hits it (-1 for none), and the output reads that update or
`data[p]`. Index values come through `common.data_index`: negative ones count from the end, and
out-of-range ones (undefined in ONNX) land on the nearest edge, so nothing is ever written
outside the output.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from lowering import te
from lowering.ops import OpContext
from lowering.ops.elementwise.operands import string_attr

COMBINERS = {"add": "sum", "mul": "prod", "max": "max", "min": "min"}

Index = tuple[te.Expr, ...]
Hit = Callable[[Index, Index], te.Expr]  # (position key, update coordinates) -> bool
Value = Callable[[Index, Index], te.Expr]  # (output position, update coordinates) -> update


def reduction(ctx: OpContext, dtype: str) -> str | None:
    """The te combiner the `reduction` attribute names; None for "none"."""
    name = string_attr(ctx, "reduction", "none")
    if name == "none":
        return None
    if name not in COMBINERS:
        raise ctx.error(f"unknown reduction '{name}' (none, {', '.join(COMBINERS)})")
    if dtype == "bool":
        raise ctx.error(f"reduction '{name}' of bool data is not supported")
    return COMBINERS[name]


def scatter(data: te.Tensor, combiner: str | None, domain: Sequence[int], key_rank: int,
            hit: Hit, value: Value, name: str) -> te.Tensor:
    """The scattered output: `hit(p[:key_rank], u)` says whether update u lands on output
    position p (it may only depend on p's first `key_rank` axes), `value(p, u)` is its element
    for p; u runs over `domain`."""
    extents = tuple(domain) or (1,)

    def coords(axes: Sequence[te.IterVar]) -> Index:
        return tuple(a.var for a in axes) if domain else ()

    if combiner is not None:
        def combined(*p: te.Expr) -> te.Expr:
            axes = [te.reduce_axis(n, "u") for n in extents]
            u = coords(axes)
            skip = te.reduce_identity(combiner, data.dtype)
            return te.reduce(combiner, te.select(hit(p[:key_rank], u), value(p, u), skip), axes,
                             init=data[p])

        return te.compute(data.shape, combined, name=name)

    def last_hit(*key: te.Expr) -> te.Expr:
        axes = [te.reduce_axis(n, "u") for n in extents]
        flat: te.Expr = te.Const(0, "int64")
        for a in axes:
            flat = flat * a.extent + a.var
        return te.reduce("max", te.select(hit(key, coords(axes)), flat, -1), axes, init=-1)

    last = te.compute(data.shape[:key_rank], last_hit, name=name + "_last")

    def out(*p: te.Expr) -> te.Expr:
        w = last[p[:key_rank]]
        # clamped, so that the update's load is in bounds even where no update hits
        flat = te.minimum(te.maximum(w, te.Const(0, "int64")),
                          te.Const(math.prod(extents) - 1, "int64"))
        u, stride = [], math.prod(domain)
        for n in domain:
            stride //= n
            u.append((flat // stride) % n)
        return te.select(te.ge(w, 0), value(p, tuple(u)), data[p])

    return te.compute(data.shape, out, name=name)
