"""DeformConv (2-D): a convolution whose every kernel tap reads the input at its regular
position plus a learned offset, bilinearly interpolated (corners outside the image count 0),
optionally scaled by a mask; groups, offset groups, strides, pads, dilations, bias.

Two stages: the sampled columns [N, C, kH, kW, oH, oW] (per input channel, tap and output
pixel: the offset of the channel's offset group, the four corners' weights and values, the
mask), then the grouped product with the weights summed over channel and tap, started from the
bias. The per-axis interpolation reuses GridSample's arithmetic (grid_sample_taps.py) with
align_corners coordinates, which are pixel coordinates, as ONNX's reference samples them.
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.nn.geometry import int_list
from lowering.ops.nn.grid_sample_taps import Axis, first_tap, weight


@register_op("DeformConv")
def deform_conv(ctx: OpContext) -> list[te.Tensor]:
    x, w, offset = ctx.input(0), ctx.input(1), ctx.input(2)
    bias = ctx.input(3) if ctx.has_input(3) else None
    mask = ctx.input(4) if ctx.has_input(4) else None
    if len(x.shape) != 4:
        raise ctx.error(f"input of rank {len(x.shape)}: only 2-D DeformConv (rank 4) is "
                        "supported")
    if x.dtype not in te.FLOAT_DTYPES:
        raise ctx.error(f"DeformConv of {x.dtype} is not supported (floats only)")
    n, c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    group = int(ctx.attr("group", 1))
    offset_group = int(ctx.attr("offset_group", 1))
    kernel = int_list(ctx, "kernel_shape", 2, 0)
    if kernel != (0, 0) and kernel != (kh, kw):
        raise ctx.error(f"kernel_shape {list(kernel)} differs from the weights' {[kh, kw]}")
    strides = int_list(ctx, "strides", 2, 1)
    dilations = int_list(ctx, "dilations", 2, 1)
    pads = int_list(ctx, "pads", 4, 0)
    if group <= 0 or offset_group <= 0 or c != cg * group or oc % group or c % offset_group:
        raise ctx.error(f"channels {c} in, {oc} out, {cg} per group do not fit group {group} "
                        f"and offset_group {offset_group}")
    taps = kh * kw
    oh, ow = offset.shape[2:]
    if offset.shape != (n, offset_group * 2 * taps, oh, ow):
        raise ctx.error(f"offset of shape {list(offset.shape)}, expected "
                        f"[{n}, {offset_group * 2 * taps}, oH, oW]")
    if mask is not None and mask.shape != (n, offset_group * taps, oh, ow):
        raise ctx.error(f"mask of shape {list(mask.shape)}, expected "
                        f"[{n}, {offset_group * taps}, {oh}, {ow}]")
    if tuple(ctx.out_shapes[0]) != (n, oc, oh, ow):
        raise ctx.error(f"output shape {list(ctx.out_shapes[0])}, expected {[n, oc, oh, ow]}")
    dtype = x.dtype
    rows, cols = Axis(h, True, dtype), Axis(wd, True, dtype)
    per_offset_group = c // offset_group

    def sample(b: te.Var, ch: te.Var, i: te.Var, j: te.Var, y: te.Var, z: te.Var) -> te.Expr:
        og = ch // per_offset_group
        k = i * kw + j
        dy = offset[b, og * (2 * taps) + k * 2, y, z]
        dx = offset[b, og * (2 * taps) + k * 2 + 1, y, z]
        py = te.cast(dtype, y * strides[0] - pads[0] + i * dilations[0]) + dy
        px = te.cast(dtype, z * strides[1] - pads[1] + j * dilations[1]) + dx
        y0, x0 = first_tap("linear", py, rows), first_tap("linear", px, cols)
        total: te.Expr | None = None
        for ty in (0, 1):
            for tx in (0, 1):
                iy, ix = y0 + ty, x0 + tx
                inside = te.all_of([te.ge(iy, 0), te.lt(iy, h), te.ge(ix, 0), te.lt(ix, wd)])
                value = x[b, ch, te.minimum(te.maximum(iy, 0), h - 1),
                          te.minimum(te.maximum(ix, 0), wd - 1)]
                term = te.select(inside, value, te.Const(0, dtype)) * (
                    weight("linear", ty, py, rows) * weight("linear", tx, px, cols))
                total = term if total is None else total + term
        assert total is not None
        return total if mask is None else total * mask[b, og * taps + k, y, z]

    columns = te.compute((n, c, kh, kw, oh, ow), sample, name="deform_columns")
    per_group_out = oc // group

    def convolve(b: te.Var, o: te.Var, y: te.Var, z: te.Var) -> te.Expr:
        ci, i, j = te.reduce_axis(cg, "ci"), te.reduce_axis(kh, "i"), te.reduce_axis(kw, "j")
        ch = (o // per_group_out) * cg + ci.var
        init = te.Const(0, dtype) if bias is None else bias[o]
        return te.reduce("sum", w[o, ci.var, i.var, j.var] * columns[b, ch, i.var, j.var, y, z],
                         [ci, i, j], init=init)

    return [te.compute((n, oc, oh, ow), convolve, name="deform_conv")]
