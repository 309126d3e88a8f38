"""Sliding-window geometry shared by Conv, ConvTranspose and the pools.

Attributes (kernel_shape, strides, dilations, pads, auto_pad) become a `Window` with explicit
begin/end pads; `padded_input` builds the explicit (non-inline) padded copy of an NC… input that
the window reductions read, so that their inner loops carry no bounds conditions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from lowering import te
from lowering.ops import OpContext

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def str_attr(ctx: OpContext, name: str, default: str) -> str:
    """A string attribute, whether the frontend kept it as str or bytes."""
    v = ctx.attr(name, default)
    return v.decode() if isinstance(v, bytes) else str(v)


def int_list(ctx: OpContext, name: str, n: int, default: int) -> tuple[int, ...]:
    """An ints attribute of length `n` (one per spatial axis), `default` everywhere if absent."""
    v = ctx.attr(name)
    if v is None:
        return (default,) * n
    out = tuple(int(x) for x in v)
    if len(out) != n:
        raise ctx.error(f"attribute '{name}' has {len(out)} values, expected {n}")
    return out


@dataclass(frozen=True)
class Window:
    """One sliding window per spatial axis: output o reads padded positions o*s + r*d."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    begin: tuple[int, ...]
    end: tuple[int, ...]

    def extent(self, d: int) -> int:
        """How many padded positions one window spans along spatial axis d."""
        return (self.kernel[d] - 1) * self.dilations[d] + 1

    def span(self, d: int, out: int) -> int:
        """Padded positions that `out` outputs along axis d read: [0, span)."""
        return (out - 1) * self.strides[d] + self.extent(d)


def same_pads(total: int, mode: str) -> tuple[int, int]:
    """(begin, end) for auto_pad SAME_UPPER (extra at the end) or SAME_LOWER (at the start)."""
    small = total // 2
    return (small, total - small) if mode == "SAME_UPPER" else (total - small, small)


def window(ctx: OpContext, in_sizes: Sequence[int], kernel: Sequence[int]) -> Window:
    """Read strides, dilations, pads and auto_pad for a forward window (Conv, pools)."""
    n = len(in_sizes)
    strides = int_list(ctx, "strides", n, 1)
    dilations = int_list(ctx, "dilations", n, 1)
    if min(strides + dilations, default=1) < 1:
        raise ctx.error("strides and dilations must be positive")
    mode = str_attr(ctx, "auto_pad", "NOTSET")
    if mode not in AUTO_PADS:
        raise ctx.error(f"auto_pad '{mode}' is not one of {', '.join(AUTO_PADS)}")
    kernel = tuple(int(k) for k in kernel)
    begin, end = (0,) * n, (0,) * n
    if mode == "NOTSET":
        pads = int_list(ctx, "pads", 2 * n, 0)
        begin, end = pads[:n], pads[n:]
        if min(pads, default=0) < 0:
            raise ctx.error(f"negative pads {list(pads)} are not supported")
    elif mode in ("SAME_UPPER", "SAME_LOWER"):
        b, e = [], []
        for d in range(n):
            out = math.ceil(in_sizes[d] / strides[d])
            ext = (kernel[d] - 1) * dilations[d] + 1
            lo, hi = same_pads(max(0, (out - 1) * strides[d] + ext - in_sizes[d]), mode)
            b.append(lo)
            e.append(hi)
        begin, end = tuple(b), tuple(e)
    return Window(kernel, strides, dilations, begin, end)


def padded_input(
    x: te.Tensor,
    offsets: Sequence[int],
    sizes: Sequence[int],
    fill: te.ExprLike,
    *,
    stride: Sequence[int] | None = None,
    name: str = "padded",
) -> te.Tensor:
    """`P[n, c, p…] = x[n, c, (p - off) / stride]` where that is an input element, else `fill`.

    The spatial axes of P have `sizes`; `offsets` are the begin pads (negative crops). With
    `stride` (ConvTranspose), input elements land every stride-th position, zeros between.
    Conditions are emitted only on the sides that can actually fall outside the input.
    """
    spatial = x.shape[2:]
    stride = tuple(stride) if stride is not None else (1,) * len(spatial)
    fill_e = te.as_expr(fill, x.dtype)

    def body(n: te.Var, c: te.Var, *p: te.Var) -> te.Expr:
        conds: list[te.Expr] = []
        src: list[te.Expr] = []
        for pd, off, size, n_in, s in zip(p, offsets, sizes, spatial, stride, strict=True):
            j = pd - off
            last = (n_in - 1) * s  # last position that holds an input element
            below, above = off > 0, size - 1 - off > last
            if below:
                conds.append(te.ge(j, 0))
            if above:
                conds.append(te.le(j, last))
            if s > 1:
                conds.append(te.eq(j % s, 0))
                j = j // s
            # clamped, the load is in bounds even where the fill is chosen: the code
            # generator then evaluates both sides and the copy loop vectorises
            if below:
                j = te.maximum(j, 0)
            if above:
                j = te.minimum(j, n_in - 1)
            src.append(j)
        value = x[(n, c, *src)]
        return te.select(te.all_of(conds), value, fill_e) if conds else value

    return te.compute((*x.shape[:2], *sizes), body, name=name)


def needs_padding(win: Window, in_sizes: Sequence[int], out_sizes: Sequence[int]) -> bool:
    """Whether some window reads outside the input (so a padded copy is needed)."""
    return any(
        win.begin[d] > 0 or win.span(d, out_sizes[d]) - win.begin[d] > in_sizes[d]
        for d in range(len(in_sizes))
    )


def window_source(
    x: te.Tensor, win: Window, in_sizes: Sequence[int], out_sizes: Sequence[int],
    fill: te.ExprLike,
) -> te.Tensor:
    """The tensor a window reduction reads at o*s + r*d: `x` itself or its padded copy."""
    if not needs_padding(win, in_sizes, out_sizes):
        return x
    sizes = [win.span(d, o) for d, o in enumerate(out_sizes)]
    return padded_input(x, win.begin, sizes, fill)


def window_index(
    out_idx: Sequence[te.Expr], red: Sequence[te.Expr], win: Window
) -> list[te.Expr]:
    """Positions in the window source read by outputs `out_idx` at window offsets `red`."""
    return [
        o * s + r * d
        for o, r, s, d in zip(out_idx, red, win.strides, win.dilations, strict=True)
    ]
