"""MaxUnpool: zeros of the default shape ((in - 1)·stride - pads + kernel per spatial axis) with
each element of X written at the flat position its index in I names (MaxPool's Indices: n, c
and the spatial position, row-major), the last write winning where two name the same position;
a larger output_shape pads that with zeros at the end of each axis. This is ONNX's reference
and its node test; onnxruntime instead writes the flat indices into the output_shape layout
(so positions move) and fails that test. Both agree without output_shape.

te cannot write where data says, so the scatter is turned around (`shape/scatter.py`): each
output element looks at every element of X in its own (n, c) plane for an index equal to its
own flat position, which costs (input plane) x (output plane) compares per plane. An index
that leaves its element's plane, or the output, is dropped (onnxruntime writes the first and
refuses the second at run time); MaxPool's indices never do. The output shape comes from
inference: the default (in - 1)·stride - pads + kernel, or the output_shape input (given at run
time, pinned to the declared output shape and checked, pinned.py).
"""

from __future__ import annotations

import math

from lowering import te
from lowering.ops import OpContext, pinned, register_op
from lowering.ops.common import index_input
from lowering.ops.nn.geometry import int_list
from lowering.ops.shape.scatter import Index, scatter


@register_op("MaxUnpool")
def max_unpool(ctx: OpContext) -> list[te.Tensor]:
    x, indices = ctx.input(0), index_input(ctx, 1)
    if indices.shape != x.shape or len(x.shape) < 3:
        raise ctx.error(f"X {list(x.shape)} and I {list(indices.shape)} must have one shape "
                        "with N, C and spatial axes")
    out_shape = tuple(ctx.out_shapes[0])
    if pinned.run_time(ctx, 2) is not None:  # the output's shape, checked at run time
        pinned.values(ctx, 2, out_shape, "output_shape")
    elif ctx.has_input(2):
        ctx.const(2, "output_shape")  # it sets the output shape (inference read it)
    if len(out_shape) != len(x.shape) or out_shape[:2] != x.shape[:2]:
        raise ctx.error(f"output shape {list(out_shape)} for input {list(x.shape)}")
    rank = len(x.shape) - 2
    kernel = int_list(ctx, "kernel_shape", rank, 0)
    strides = int_list(ctx, "strides", rank, 1)
    pads = int_list(ctx, "pads", 2 * rank, 0)
    spatial = tuple((n - 1) * s - pads[d] - pads[rank + d] + k for d, (n, s, k) in
                    enumerate(zip(x.shape[2:], strides, kernel, strict=True)))
    if any(o < d for o, d in zip(out_shape[2:], spatial, strict=True)):
        raise ctx.error(f"output_shape {list(out_shape)} is smaller than the unpooled "
                        f"{list(x.shape[:2]) + list(spatial)} on some axis")
    plane = math.prod(spatial)
    zeros = te.compute(out_shape, lambda *p: te.Const(0, x.dtype), name="unpool_zero",
                       inline=True)

    def flat(p: Index) -> te.Expr:
        f: te.Expr = p[0] * x.shape[1] + p[1]
        f = f * plane if plane != 1 else f
        stride = plane
        for q, n in zip(p[2:], spatial, strict=True):
            stride //= n
            f = f + q * stride
        return f

    def hit(p: Index, u: Index) -> te.Expr:
        inside = te.all_of([te.lt(q, n) for q, n, o in zip(p[2:], spatial, out_shape[2:],
                                                              strict=True) if n < o])
        return te.logical_and(inside, te.eq(te.cast("int64", indices[(p[0], p[1], *u)]),
                                            flat(p)))

    def value(p: Index, u: Index) -> te.Expr:
        return x[(p[0], p[1], *u)]

    return [scatter(zeros, None, x.shape[2:], len(out_shape), hit, value, "max_unpool")]
