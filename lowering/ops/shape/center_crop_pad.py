"""CenterCropPad: each named axis cropped or zero-padded to its target length around its centre,
as ONNX's reference does it (the odd element goes to the end: a crop starts at
(length - target) // 2, a pad puts the input (target - length) // 2 in).

Registered natively rather than expanded from its schema function: the body computes Slice's
starts and Pad's pads from the shape input, so with that input given at run time no shape in it
can be inferred. The shape sets the output's, so given at run time it is pinned to the
output's lengths and checked (pinned.py).
"""

from __future__ import annotations

import numpy as np

from lowering import te
from lowering.ops import OpContext, pinned, register_op
from lowering.ops.common import axis_of


@register_op("CenterCropPad")
def center_crop_pad(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    rank = len(x.shape)
    raw_axes = ctx.attr("axes")
    axes = list(range(rank)) if raw_axes is None else [axis_of(ctx, a, rank) for a in raw_axes]
    if len(set(axes)) != len(axes):
        raise ctx.error(f"repeated axes {list(raw_axes or [])}")
    out = tuple(ctx.out_shapes[0])
    if len(out) != rank:
        raise ctx.error(f"output shape {list(out)} for an input of rank {rank}")
    if pinned.run_time(ctx, 1) is not None:
        targets = [int(v) for v in pinned.values(ctx, 1, [out[a] for a in axes], "shape")]
    else:
        targets = [int(v) for v in np.asarray(ctx.const(1, "shape")).reshape(-1)]
    if len(targets) != len(axes) or min(targets, default=1) < 0:
        raise ctx.error(f"shape {targets} for axes {axes}")
    shape = list(x.shape)
    offset = [0] * rank  # input position = output position + offset
    for a, target in zip(axes, targets, strict=True):
        shape[a] = target
        n = x.shape[a]
        offset[a] = (n - target) // 2 if target < n else -((target - n) // 2)
    if tuple(shape) != out:
        raise ctx.error(f"output shape {shape} differs from the inferred {list(out)}")
    if min(x.shape, default=1) == 0:  # nothing to crop: all padding
        return [te.compute(out, lambda *o: te.const(0, x.dtype), name="center_crop_pad")]

    def body(*o: te.Var) -> te.Expr:
        src, inside = [], []
        for a, od in enumerate(o):
            j = od + offset[a] if offset[a] else od
            if out[a] > x.shape[a]:  # padded: positions before and after the input are zeros
                inside += [te.ge(j, 0), te.lt(j, x.shape[a])]
                j = te.minimum(te.maximum(j, te.const(0, "int64")),
                               te.const(x.shape[a] - 1, "int64"))
            src.append(j)
        value = x[tuple(src)]
        return te.select(te.all_of(inside), value, te.const(0, x.dtype)) if inside else value

    return [te.compute(out, body, name="center_crop_pad")]
