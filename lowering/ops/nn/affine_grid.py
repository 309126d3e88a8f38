"""AffineGrid: the sampling grid of a batch of affine transforms, as GridSample reads it.
grid[n, (d,) h, w] = theta[n] · (x_w, y_h, (z_d,) 1), the base coordinates spread over
[-1, 1]: pixel centres (2i + 1)/L - 1 without align_corners, ends 2i/(L - 1) - 1 with it (-1
for an axis of one pixel, as ONNX's reference and PyTorch's linspace(-1, 1, 1); onnxruntime
gives +1 there, Eigen's LinSpaced of one point).

Registered natively: ONNX's function body for it cannot be shape-inferred with the size folded
(Range of a one-element slice, ConstantOfShape after a Split), so expanding it fails. size sets
the output shape: given at run time, it is pinned to the output's (its channel count, which
the grid does not use, may be anything; pinned.py).
"""

from __future__ import annotations

import numpy as np

from lowering import te
from lowering.ops import OpContext, pinned, register_op


def base_coordinate(i: te.Expr, length: int, align_corners: bool, dtype: str) -> te.Expr:
    """Coordinate of position i on an axis of `length` pixels, in [-1, 1] (float64, cast)."""
    f = te.cast("float64", i)
    if align_corners:
        v = f * (2.0 / (length - 1)) - 1.0 if length > 1 else te.Const(-1.0, "float64")
    else:
        v = (f * 2.0 + 1.0) / float(length) - 1.0
    return te.cast(dtype, v)


@register_op("AffineGrid")
def affine_grid(ctx: OpContext) -> list[te.Tensor]:
    theta = ctx.input(0)
    if pinned.run_time(ctx, 1) is not None:
        size = _pinned_size(ctx)
    else:
        size = [int(v) for v in np.asarray(ctx.const(1, "size")).reshape(-1)]
    if len(size) not in (4, 5):
        raise ctx.error(f"size {size}: expected (N, C, H, W) or (N, C, D, H, W)")
    spatial = size[2:]
    dims = len(spatial)
    if theta.shape != (size[0], dims, dims + 1):
        raise ctx.error(f"theta of shape {list(theta.shape)} for size {size}, expected "
                        f"[{size[0]}, {dims}, {dims + 1}]")
    if theta.dtype not in te.FLOAT_DTYPES:
        raise ctx.error(f"AffineGrid of {theta.dtype} is not supported (floats only)")
    align = bool(int(ctx.attr("align_corners", 0)))
    shape = (size[0], *spatial, dims)
    if tuple(ctx.out_shapes[0]) != shape:
        raise ctx.error(f"output shape {list(shape)} differs from the inferred "
                        f"{list(ctx.out_shapes[0])}")

    def body(n: te.Var, *o: te.Var) -> te.Expr:
        pos, k = o[:-1], o[-1]
        # (x, y, z): the last spatial axis first
        coords = [base_coordinate(p, length, align, theta.dtype)
                  for p, length in zip(reversed(pos), reversed(spatial), strict=True)]
        total: te.Expr = theta[n, k, dims]
        for j, c in enumerate(coords):
            total = total + theta[n, k, j] * c
        return total

    return [te.compute(shape, body, name="affine_grid")]


def _pinned_size(ctx: OpContext) -> list[int]:
    """size given at run time: (N, C, *spatial) with N and spatial the output's, checked."""
    out = ctx.out_shapes[0]
    loads = pinned.elements(ctx.input(1))
    if len(loads) != len(out) or len(out) not in (4, 5):
        raise pinned.ambiguous(ctx, 1, "size", f"{len(out)} values, it holds {len(loads)}")
    spatial = list(out[1:-1])
    pinned.require(ctx, pinned.equal_to([loads[0], *loads[2:]], [out[0], *spatial]),
                   f"size must be {[out[0], 'C', *spatial]}")
    return [out[0], 1, *spatial]
