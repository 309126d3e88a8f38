"""Conv: N-d convolution (NC… layout) with groups, dilations, strides, pads/auto_pad and bias.

`Y[n, k, o…] = B[k] + Σ_{c, r…} P[n, g(k)·Cg + c, o·s + r·d] · W[k, c, r…]` over the padded
input P. The reduction (c, r…) comes before the innermost output axis, so the default schedule
runs n-k-oh-[c,kh,kw]-ow with ow vectorised. Depthwise convolutions (one input channel per group)
get their own compute with no channel reduction.
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.nn.geometry import Window, window, window_index, window_source


def conv_weights_check(ctx: OpContext, x: te.Tensor, w: te.Tensor, group: int,
                       dtypes: tuple[str, ...] = te.FLOAT_DTYPES) -> None:
    if len(x.shape) < 3:
        raise ctx.error(f"input of rank {len(x.shape)}: Conv needs N, C and spatial axes")
    if len(w.shape) != len(x.shape):
        raise ctx.error(f"weights of rank {len(w.shape)} for an input of rank {len(x.shape)}")
    if x.dtype not in dtypes:
        raise ctx.error(f"{x.dtype} convolution is not supported (float only)")
    if group < 1 or x.shape[1] % group:
        raise ctx.error(f"group {group} does not divide the {x.shape[1]} input channels")


def _kernel(ctx: OpContext, w: te.Tensor) -> tuple[int, ...]:
    ks = tuple(w.shape[2:])
    given = ctx.attr("kernel_shape")
    if given is not None and tuple(int(k) for k in given) != ks:
        raise ctx.error(f"kernel_shape {list(given)} does not match the weights {list(ks)}")
    return ks


def conv_compute(
    src: te.Tensor, w: te.Tensor, bias: te.Tensor | None, win: Window,
    out_shape: tuple[int, ...], group: int, name: str = "conv",
) -> te.Tensor:
    """Direct convolution over a window source (the input or its padded copy)."""
    k_out, cg = w.shape[0], w.shape[1]
    kg = k_out // group
    nsp = len(win.kernel)
    red = [te.reduce_axis(k, "r") for k in win.kernel]
    depthwise = cg == 1 and group > 1
    rc = None if depthwise else te.reduce_axis(cg, "rc")

    def body(n: te.Var, k: te.Var, *o: te.Var) -> te.Expr:
        pos = window_index(o, [r.var for r in red], win)
        if depthwise:
            chan: te.Expr = k // kg
            wc: te.Expr = te.Const(0, "int64")
        else:
            assert rc is not None
            chan = rc.var if group == 1 else (k // kg) * cg + rc.var
            wc = rc.var
        prod = src[(n, chan, *pos)] * w[(k, wc, *[r.var for r in red])]
        axes = red if rc is None else [rc, *red]
        init = bias[k] if bias is not None else None
        return te.reduce("sum", prod, axes, init)

    assert len(out_shape) == nsp + 2
    return te.compute(out_shape, body, name=name + ("_dw" if depthwise else ""))


@register_op("Conv")
def conv(ctx: OpContext) -> list[te.Tensor]:
    bias = ctx.inputs[2] if ctx.has_input(2) else None
    return [conv_of(ctx, ctx.input(0), ctx.input(1), bias)]


def conv_of(ctx: OpContext, x: te.Tensor, w: te.Tensor, bias: te.Tensor | None,
            dtypes: tuple[str, ...] = te.FLOAT_DTYPES) -> te.Tensor:
    """The node's convolution of `x` by `w` (its attributes and output shape): Conv's
    placeholders, or the int32 views ConvInteger and QLinearConv take (`dtypes`)."""
    group = int(ctx.attr("group", 1))
    conv_weights_check(ctx, x, w, group, dtypes)
    n, c, *spatial = x.shape
    k_out, cg = w.shape[0], w.shape[1]
    if cg * group != c or k_out % group:
        raise ctx.error(
            f"weights {list(w.shape)} do not fit {c} input channels in {group} groups"
        )
    if bias is not None and bias.shape != (k_out,):
        raise ctx.error(f"bias of shape {list(bias.shape)}, expected [{k_out}]")
    win = window(ctx, spatial, _kernel(ctx, w))
    out_shape = ctx.out_shapes[0]
    if out_shape[:2] != (n, k_out):
        raise ctx.error(f"inferred output shape {list(out_shape)} does not start with "
                        f"[{n}, {k_out}]")
    src = window_source(x, win, spatial, out_shape[2:], 0.0)
    return conv_compute(src, w, bias, win, out_shape, group)
