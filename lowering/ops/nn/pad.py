"""Pad: constant / reflect / edge / wrap padding; negative pads crop.

pads (and axes) must be constants; constant_value may be a constant or a run-time scalar.
As in onnxruntime, negative pads crop first and the positive ones pad what is left: along each
axis the kept range is [lo, lo + m), and output o reads kept position j = o - max(begin, 0),
mapped into [0, m) per mode: constant fills outside, reflect mirrors without repeating the border
(periodically, for pads beyond m - 1), edge clamps, wrap takes j modulo m. Only constant mode
needs a condition.
"""

from __future__ import annotations

import numpy as np

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.common import normalize_axis
from lowering.ops.nn.geometry import str_attr

MODES = ("constant", "reflect", "edge", "wrap")


def _begin_end(ctx: OpContext, rank: int) -> tuple[list[int], list[int]]:
    pads = np.asarray(ctx.const(1, "pads"), dtype=np.int64).reshape(-1)
    if ctx.has_input(3):
        raw = np.asarray(ctx.const(3, "axes"), dtype=np.int64).reshape(-1)
        try:
            axes = [normalize_axis(int(a), rank) for a in raw]
        except ValueError as e:
            raise ctx.error(str(e)) from None
        if len(set(axes)) != len(axes):
            raise ctx.error(f"repeated axes {raw.tolist()}")
    else:
        axes = list(range(rank))
    if pads.size != 2 * len(axes):
        raise ctx.error(f"{pads.size} pads for {len(axes)} axes (expected {2 * len(axes)})")
    begin, end = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        begin[a], end[a] = int(pads[i]), int(pads[len(axes) + i])
    return begin, end


def _source(mode: str, j: te.Expr, size: int) -> te.Expr:
    """Input position for output position j (already shifted by the begin pad)."""
    if mode == "edge":
        return te.minimum(te.maximum(j, 0), size - 1)
    if mode == "wrap":
        return j % size
    if size == 1:  # reflect of a single element repeats it
        return te.Const(0, "int64")
    period = 2 * (size - 1)
    m = j % period
    return te.select(te.lt(m, size), m, period - m)


@register_op("Pad")
def pad(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    rank = len(x.shape)
    mode = str_attr(ctx, "mode", "constant")
    if mode not in MODES:
        raise ctx.error(f"pad mode '{mode}' is not one of {', '.join(MODES)}")
    begin, end = _begin_end(ctx, rank)
    out_shape = tuple(n + b + e for n, b, e in zip(x.shape, begin, end, strict=True))
    if out_shape != ctx.out_shapes[0]:
        raise ctx.error(f"computed output shape {list(out_shape)}, inferred "
                        f"{list(ctx.out_shapes[0])}")
    if min(out_shape, default=1) < 0:
        raise ctx.error(f"pads crop more than the input has: {list(out_shape)}")
    if mode != "constant" and any(
        n - max(-b, 0) - max(-e, 0) <= 0 and max(b, e) > 0
        for n, b, e in zip(x.shape, begin, end, strict=True)
    ):
        raise ctx.error(f"cannot {mode}-pad an axis with nothing left after cropping")
    fill: te.Expr = te.const(0, x.dtype)
    if mode == "constant" and ctx.has_input(2):
        cv = ctx.input(2)
        if cv.size != 1:
            raise ctx.error(f"constant_value has {cv.size} elements, expected one")
        fill = te.cast(x.dtype, cv[(0,) * len(cv.shape)])

    def body(*o: te.Var) -> te.Expr:
        conds: list[te.Expr] = []
        src: list[te.Expr] = []
        for od, b, e, size in zip(o, begin, end, x.shape, strict=True):
            lo = max(-b, 0)
            kept = size - lo - max(-e, 0)
            j = od - max(b, 0)
            if b <= 0 and e <= 0:  # untouched or cropped only: always inside
                src.append(j + lo)
                continue
            if mode == "constant":
                if b > 0:
                    conds.append(te.ge(j, 0))
                if e > 0:
                    conds.append(te.lt(j, kept))
            else:
                j = _source(mode, j, kept)
            src.append(j + lo)
        value = x[tuple(src)]
        return te.select(te.all_of(conds), value, fill) if conds else value

    return [te.compute(out_shape, body, name=f"pad_{mode}")]
