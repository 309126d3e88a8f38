"""Col2Im: column blocks (N, C·∏block, L) summed back into an image (N, C, *image_shape), the
adjoint of im2col (PyTorch's fold).

Column l holds one block position (row-major over the grid of L blocks), channel c·K + k its
tap k (row-major over the block). te cannot add into where the data says, so each image pixel
gathers instead: per axis, tap k reaches pixel p from block position
(p + pad_begin - k·dilation) / stride when that is a whole number inside the grid, and the
pixel is the sum of the taps that reach it. image_shape and block_shape must be constants
(they set the output's shape and the grid).
"""

from __future__ import annotations

import math

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.nn.geometry import int_list


def _shape_input(ctx: OpContext, i: int, name: str) -> tuple[int, ...]:
    value = ctx.const(i, name)
    if value.ndim != 1 or value.dtype.kind not in "iu":
        raise ctx.error(f"{name} must be a 1-D integer tensor, got {value.dtype}"
                        f"{list(value.shape)}")
    return tuple(int(v) for v in value)


@register_op("Col2Im")
def col2im(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    if x.dtype == "bool":
        raise ctx.error("Col2Im of bool data is not supported (it sums overlapping taps)")
    image = _shape_input(ctx, 1, "image_shape")
    block = _shape_input(ctx, 2, "block_shape")
    r = len(image)
    if len(block) != r or r == 0:
        raise ctx.error(f"image_shape {list(image)} and block_shape {list(block)} must name "
                        "the same number of axes (at least one)")
    if min(image) <= 0 or min(block) <= 0:
        raise ctx.error(f"image_shape {list(image)} and block_shape {list(block)} must be "
                        "positive")
    dil = int_list(ctx, "dilations", r, 1)
    strides = int_list(ctx, "strides", r, 1)
    pads = int_list(ctx, "pads", 2 * r, 0)
    if min(dil) <= 0 or min(strides) <= 0 or min(pads) < 0:
        raise ctx.error("dilations and strides must be positive, pads not negative")
    grid = tuple((image[d] + pads[d] + pads[r + d] - dil[d] * (block[d] - 1) - 1)
                 // strides[d] + 1 for d in range(r))
    taps = math.prod(block)
    if len(x.shape) != 3 or x.shape[1] % taps or min(grid) <= 0 or \
            x.shape[2] != math.prod(grid):
        raise ctx.error(f"input {list(x.shape)} does not hold blocks {list(block)} over a "
                        f"{'x'.join(map(str, grid))} grid (expected [N, C*{taps}, "
                        f"{math.prod(grid)}])")
    channels = x.shape[1] // taps

    def pixel(*o: te.Expr) -> te.Expr:
        n, c, p = o[0], o[1], o[2:]
        ks = [te.reduce_axis(b, "k") for b in block]
        inside: list[te.Expr] = []
        col: te.Expr = te.Const(0, "int64")
        tap: te.Expr = te.Const(0, "int64")
        for d in range(r):
            offset = p[d] + pads[d] - ks[d].var * dil[d]
            pos = offset // strides[d]
            inside += [te.ge(offset, 0), te.lt(pos, grid[d])]
            if strides[d] > 1:
                inside.append(te.eq(offset % strides[d], 0))
            # clamped so that taps that miss still load inside the input
            col = col * grid[d] + te.minimum(te.maximum(pos, te.Const(0, "int64")),
                                             te.Const(grid[d] - 1, "int64"))
            tap = tap * block[d] + ks[d].var
        value = x[n, c * taps + tap, col]
        return te.reduce("sum", te.select(te.all_of(inside), value,
                                          te.Const(0, x.dtype)), ks)

    return [te.compute((x.shape[0], channels, *image), pixel, name="col2im")]
