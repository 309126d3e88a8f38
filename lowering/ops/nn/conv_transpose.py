"""ConvTranspose: N-d transposed convolution with groups, dilations, strides and output padding.

Written as a direct convolution over the zero-stuffed input: input elements land every s-th
position of a padded copy P (offset L = (k-1)·d - pad_begin), and
`Y[n, k, o…] = B[k] + Σ_{c, r…} P[n, g·Cg + c, o + r·d] · W[g·Cg + c, k mod Kg, (K-1) - r…]`.
The reduction sits outside the innermost output axis, as for Conv.
With auto_pad SAME_* or an explicit output_shape the total padding is split as the ONNX spec (and
onnxruntime) say: the odd element goes to the end for SAME_UPPER, to the begin otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.nn.conv import conv_weights_check
from lowering.ops.nn.geometry import AUTO_PADS, int_list, padded_input, str_attr


def _pads_and_out(
    ctx: OpContext, in_sizes: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
    dilations: Sequence[int], out_pad: Sequence[int],
) -> tuple[list[int], list[int]]:
    """(begin pads, output sizes) per spatial axis."""
    n = len(in_sizes)
    mode = str_attr(ctx, "auto_pad", "NOTSET")
    if mode not in AUTO_PADS:
        raise ctx.error(f"auto_pad '{mode}' is not one of {', '.join(AUTO_PADS)}")
    full = [
        s * (i - 1) + op + (k - 1) * d + 1
        for i, k, s, d, op in zip(in_sizes, kernel, strides, dilations, out_pad, strict=True)
    ]
    out_shape = ctx.attr("output_shape")
    if out_shape is not None:
        outs = [int(v) for v in out_shape][-n:]
        if len(outs) != n:
            raise ctx.error(f"output_shape {list(out_shape)} has fewer than {n} spatial sizes")
    elif mode in ("SAME_UPPER", "SAME_LOWER"):
        outs = [i * s for i, s in zip(in_sizes, strides, strict=True)]
    else:
        pads = int_list(ctx, "pads", 2 * n, 0) if mode == "NOTSET" else (0,) * (2 * n)
        return list(pads[:n]), [f - pads[d] - pads[n + d] for d, f in enumerate(full)]
    begin = []
    for f, o in zip(full, outs, strict=True):
        total = max(0, f - o)
        begin.append(total // 2 if mode == "SAME_UPPER" else total - total // 2)
    return begin, outs


@register_op("ConvTranspose")
def conv_transpose(ctx: OpContext) -> list[te.Tensor]:
    x, w = ctx.input(0), ctx.input(1)
    bias = ctx.inputs[2] if ctx.has_input(2) else None
    group = int(ctx.attr("group", 1))
    conv_weights_check(ctx, x, w, group)
    n, c, *spatial = x.shape
    nsp = len(spatial)
    kernel = tuple(w.shape[2:])
    given = ctx.attr("kernel_shape")
    if given is not None and tuple(int(k) for k in given) != kernel:
        raise ctx.error(f"kernel_shape {list(given)} does not match the weights {list(kernel)}")
    if w.shape[0] != c:
        raise ctx.error(f"weights {list(w.shape)} do not fit {c} input channels")
    cg, kg = c // group, w.shape[1]
    k_out = kg * group
    if bias is not None and bias.shape != (k_out,):
        raise ctx.error(f"bias of shape {list(bias.shape)}, expected [{k_out}]")
    strides = int_list(ctx, "strides", nsp, 1)
    dilations = int_list(ctx, "dilations", nsp, 1)
    out_pad = int_list(ctx, "output_padding", nsp, 0)
    if min(strides + dilations) < 1:
        raise ctx.error("strides and dilations must be positive")
    begin, outs = _pads_and_out(ctx, spatial, kernel, strides, dilations, out_pad)
    out_shape = (n, k_out, *outs)
    if out_shape != ctx.out_shapes[0]:
        raise ctx.error(f"computed output shape {list(out_shape)}, inferred "
                        f"{list(ctx.out_shapes[0])}")
    ext = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    offsets = [e - 1 - b for e, b in zip(ext, begin, strict=True)]
    sizes = [o - 1 + e for o, e in zip(outs, ext, strict=True)]
    src = padded_input(x, offsets, sizes, 0.0, stride=strides, name="stuffed")
    red = [te.reduce_axis(k, "r") for k in kernel]
    rc = te.reduce_axis(cg, "rc") if cg > 1 else None

    def body(nn: te.Var, k: te.Var, *o: te.Var) -> te.Expr:
        chan: te.Expr = k // kg if group > 1 else te.Const(0, "int64")
        if rc is not None:
            chan = chan * cg + rc.var if group > 1 else rc.var
        pos = [od + r.var * d for od, r, d in zip(o, red, dilations, strict=True)]
        flipped = [(kk - 1) - r.var for kk, r in zip(kernel, red, strict=True)]
        prod = src[(nn, chan, *pos)] * w[(chan, k % kg if group > 1 else k, *flipped)]
        axes = red if rc is None else [rc, *red]
        return te.reduce("sum", prod, axes, bias[k] if bias is not None else None)

    return [te.compute(out_shape, body, name="conv_transpose")]
