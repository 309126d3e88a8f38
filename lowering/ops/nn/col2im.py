"""Col2Im: column blocks (N, C·∏block, L) summed back into an image (N, C, *image_shape), the
adjoint of im2col (PyTorch's fold).

Column l holds one block position (row-major over the grid of L blocks), channel c·K + k its
tap k (row-major over the block). te cannot add into where the data says, so each image pixel
gathers instead: per axis, tap k reaches pixel p from block position
(p + pad_begin - k·dilation) / stride when that is a whole number inside the grid, and the
pixel is the sum of the taps that reach it. image_shape and block_shape set the output's
shape and the grid: given at run time, image_shape is pinned to the output's spatial shape, and
block_shape to the blocks that fit the input's shape (each such block built, the run-time value
selecting among them where several fit, pinned.py).
"""

from __future__ import annotations

import math

from lowering import te
from lowering.ops import OpContext, pinned, register_op
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
    if pinned.run_time(ctx, 1) is not None:
        image = tuple(int(v) for v in pinned.values(ctx, 1, ctx.out_shapes[0][2:], "image_shape"))
    else:
        image = _shape_input(ctx, 1, "image_shape")
    if pinned.run_time(ctx, 2) is None:
        return [_col2im(ctx, x, image, _shape_input(ctx, 2, "block_shape"))]
    blocks = _fitting_blocks(ctx, x, image)
    if not blocks or len(blocks) > pinned.MAX_MEANINGS:
        raise pinned.ambiguous(ctx, 2, "block_shape", " or ".join(map(str, map(list, blocks)))
                               if blocks else "no block")
    loads = pinned.elements(ctx.input(2))
    fits = [pinned.equal_to(loads, block) for block in blocks]
    pinned.require(ctx, te.any_of(fits), "block_shape must be " +
                   " or ".join(str(list(b)) for b in blocks))
    return [pinned.by_meaning(fits, [_col2im(ctx, x, image, b) for b in blocks], "col2im")]


def _fitting_blocks(ctx: OpContext, x: te.Tensor, image: tuple[int, ...]
                    ) -> list[tuple[int, ...]]:
    """The block shapes that read the input's shape as [N, C·∏block, L] over `image`, C the
    output's channels."""
    r = len(image)
    channels = ctx.out_shapes[0][1]
    if len(x.shape) != 3 or channels <= 0 or x.shape[1] % channels or ctx.input(2).size != r:
        return []
    taps = x.shape[1] // channels
    dil = int_list(ctx, "dilations", r, 1)
    strides = int_list(ctx, "strides", r, 1)
    pads = int_list(ctx, "pads", 2 * r, 0)

    def splits(n: int, k: int) -> list[tuple[int, ...]]:  # k factors whose product is n
        if k == 1:
            return [(n,)]
        return [(f, *rest) for f in range(1, n + 1) if n % f == 0 for rest in splits(n // f, k - 1)]

    def grid(block: tuple[int, ...]) -> list[int]:
        return [(image[d] + pads[d] + pads[r + d] - dil[d] * (block[d] - 1) - 1) // strides[d] + 1
                for d in range(r)]

    return [b for b in splits(taps, r) if min(grid(b)) > 0 and math.prod(grid(b)) == x.shape[2]]


def _col2im(ctx: OpContext, x: te.Tensor, image: tuple[int, ...], block: tuple[int, ...]
            ) -> te.Tensor:
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

    return te.compute((x.shape[0], channels, *image), pixel, name="col2im")
