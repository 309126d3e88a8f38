"""Pad: constant / reflect / edge / wrap padding; negative pads crop.

pads (and axes) are constants, or run-time values whose total per axis the output's shape fixes
(checked, pinned.py) and whose begin pads the kernel reads; constant_value may be a constant or
a run-time scalar.
As in onnxruntime, negative pads crop first and the positive ones pad what is left: along each
axis the kept range is [lo, lo + m), and output o reads kept position j = o - max(begin, 0),
mapped into [0, m) per mode: constant fills outside, reflect mirrors without repeating the border
(periodically, for pads beyond m - 1), edge clamps, wrap takes j modulo m. Only constant mode
needs a condition.
"""

from __future__ import annotations

import numpy as np

from lowering import te
from lowering.ops import OpContext, pinned, register_op
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


def _run_time_begin(ctx: OpContext, x: te.Tensor, out: tuple[int, ...], mode: str
                    ) -> list[te.Expr]:
    """Pads (and axes) given at run time: each axis's begin pad as an expression over them
    (the end pad is the output's growth minus it), and a check that the pads give the
    output's shape and, but for constant mode, leave something to pad from."""
    rank = len(x.shape)
    pads = pinned.elements(ctx.input(1))
    if ctx.has_input(3):
        if pinned.run_time(ctx, 3) is None:
            ctx.const(3, "axes")
        named = [[pinned.axis_fits(a, d, rank) for d in range(rank)]
                 for a in pinned.elements(ctx.input(3))]
    else:
        named = [[te.const(d == k, "bool") for d in range(rank)] for k in range(rank)]
    if len(pads) != 2 * len(named):
        raise ctx.error(f"{len(pads)} pads for {len(named)} axes (expected {2 * len(named)})")
    zero = te.const(0, "int64")
    begin: list[te.Expr] = []
    conds: list[te.Expr] = []
    for d in range(rank):
        b: te.Expr = zero
        e: te.Expr = zero
        for k, row in enumerate(named):  # (repeated axes: the pads add up, checked below)
            b = b + te.select(row[d], te.cast("int64", pads[k]), zero)
            e = e + te.select(row[d], te.cast("int64", pads[len(named) + k]), zero)
        conds.append(te.eq(b + e, te.const(out[d] - x.shape[d], "int64")))
        if mode != "constant":
            kept = te.const(x.shape[d], "int64") - te.maximum(zero - b, zero) - te.maximum(
                zero - e, zero)
            conds.append(te.logical_or(te.gt(kept, zero), te.logical_and(te.le(b, zero),
                                                                         te.le(e, zero))))
        begin.append(b)
    for d in range(rank):  # every axis named at most once
        conds.append(te.le(pinned.count_true([row[d] for row in named]), te.const(1, "int64")))
    pinned.require(ctx, te.all_of(conds), f"pads must give the output {list(out)}")
    return begin


def _run_time_source(mode: str, o: te.Expr, b: te.Expr, size: int, out_len: int
                     ) -> tuple[te.Expr, te.Expr | None]:
    """Input position (clamped into the axis) and, in constant mode, whether it is inside,
    for output position `o` of an axis whose begin pad `b` is known at run time."""
    zero = te.const(0, "int64")
    e = te.const(out_len - size, "int64") - b
    lo = te.maximum(zero - b, zero)
    kept = te.const(size, "int64") - lo - te.maximum(zero - e, zero)
    j = o - te.maximum(b, zero)
    inside = None
    if mode == "constant":
        inside = te.logical_and(te.ge(j, zero), te.lt(j, kept))
    elif mode == "edge":
        j = te.minimum(te.maximum(j, zero), kept - 1)
    elif mode == "wrap":
        j = ((j % kept) + kept) % kept
    else:  # reflect, periodically; a single kept element repeats
        period = te.maximum(2 * (kept - 1), te.const(1, "int64"))
        m = ((j % period) + period) % period
        j = te.select(te.lt(m, kept), m, period - m)
    return te.minimum(te.maximum(j + lo, zero), te.const(size - 1, "int64")), inside


@register_op("Pad")
def pad(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    rank = len(x.shape)
    mode = str_attr(ctx, "mode", "constant")
    if mode not in MODES:
        raise ctx.error(f"pad mode '{mode}' is not one of {', '.join(MODES)}")
    if pinned.run_time(ctx, 1) is not None and min(x.shape, default=1) > 0:
        return [_pad_at_run_time(ctx, x, mode)]
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
    fill = _fill(ctx, x, mode)

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


def _fill(ctx: OpContext, x: te.Tensor, mode: str) -> te.Expr:
    fill: te.Expr = te.const(0, x.dtype)
    if mode == "constant" and ctx.has_input(2):
        cv = ctx.input(2)
        if cv.size != 1:
            raise ctx.error(f"constant_value has {cv.size} elements, expected one")
        fill = te.cast(x.dtype, cv[(0,) * len(cv.shape)])
    return fill


def _pad_at_run_time(ctx: OpContext, x: te.Tensor, mode: str) -> te.Tensor:
    """Pad whose pads are run-time values: the output's shape fixes each axis's total, the
    begin pads are read when the kernel runs (a stage of one value per axis)."""
    out = tuple(ctx.out_shapes[0])
    begins = _run_time_begin(ctx, x, out, mode)
    table = te.compute((len(begins),), lambda d: pinned.pick(begins, d), name="pad_begin",
                       dtype="int64")
    fill = _fill(ctx, x, mode)

    def body(*o: te.Var) -> te.Expr:
        src, inside = [], []
        for d, od in enumerate(o):
            j, ok = _run_time_source(mode, od, table[te.const(d, "int64")], x.shape[d], out[d])
            src.append(j)
            if ok is not None:
                inside.append(ok)
        value = x[tuple(src)]
        return te.select(te.all_of(inside), value, fill) if inside else value

    return te.compute(out, body, name=f"pad_{mode}")
