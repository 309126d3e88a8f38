"""GridSample: each output position reads the input image at a point the grid gives.

X is (N, C, D1..Dr), the grid (N, O1..Or, r) holds normalised coordinates in [-1, 1], last
axis first (x, y[, z]); the output is (N, C, O1..Or). Per output point and spatial axis the
coordinate is denormalised (`align_corners`), and with reflection padding mirrored into the
image; then the mode's taps around it (nearest: 1, linear: 2, cubic: 4 per axis) are read, a
tap outside the image reading 0 (zeros), the nearest edge (border) or its mirror (reflection).
Border padding clamps the taps, not the coordinate, as onnxruntime does (ONNX's reference
clamps the coordinate first: the same for nearest and linear, not for cubic near an edge).

Stages: per spatial axis the adjusted coordinate, then its taps' positions and weights (all
per output point, shared by the C channels), then the output as the weighted sum over the
taps' combinations. Opset 16's mode names (bilinear, bicubic) are accepted too.
"""

from __future__ import annotations

import itertools

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.nn.geometry import str_attr
from lowering.ops.nn.grid_sample_taps import Axis, first_tap, tap_count, weight

MODES = {"linear": "linear", "bilinear": "linear", "nearest": "nearest", "cubic": "cubic",
         "bicubic": "cubic"}
PADDINGS = ("zeros", "border", "reflection")
MAX_SPATIAL = 3

Index = tuple[te.Expr, ...]


def _attrs(ctx: OpContext) -> tuple[str, str, bool]:
    mode = str_attr(ctx, "mode", "linear")
    if mode not in MODES:
        raise ctx.error(f"mode '{mode}' is not one of {', '.join(MODES)}")
    padding = str_attr(ctx, "padding_mode", "zeros")
    if padding not in PADDINGS:
        raise ctx.error(f"padding_mode '{padding}' is not one of {', '.join(PADDINGS)}")
    return MODES[mode], padding, bool(int(ctx.attr("align_corners", 0)))


@register_op("GridSample")
def grid_sample(ctx: OpContext) -> list[te.Tensor]:
    x, grid = ctx.input(0), ctx.input(1)
    mode, padding, align = _attrs(ctx)
    r = len(x.shape) - 2
    if not 1 <= r <= MAX_SPATIAL:
        raise ctx.error(f"GridSample of a rank-{len(x.shape)} input is not supported "
                        f"(3 to {MAX_SPATIAL + 2})")
    if x.dtype not in te.FLOAT_DTYPES or grid.dtype not in te.FLOAT_DTYPES:
        raise ctx.error(f"GridSample of {x.dtype} data on a {grid.dtype} grid is not "
                        "supported (float types)")
    if len(grid.shape) != r + 2 or grid.shape[0] != x.shape[0] or grid.shape[-1] != r:
        raise ctx.error(f"grid {list(grid.shape)} does not fit input {list(x.shape)} "
                        f"(expected [N, ..., {r}] with {r} output axes)")
    if min(x.shape[2:]) == 0:
        raise ctx.error("GridSample of an empty image is not supported")
    ct = "float64" if x.dtype == "float64" else "float32"
    axes = [Axis(n, align, ct) for n in x.shape[2:]]
    points = grid.shape[:-1]  # (N, O1..Or)

    def raw(p: Index, s: int) -> te.Expr:
        """Axis s's denormalised coordinate at point p (the grid lists axes last first)."""
        return axes[s].denormalize(te.cast(ct, grid[(*p, te.Const(r - 1 - s, "int64"))]))

    def coordinate(s: int) -> te.Tensor:
        def body(*p: te.Expr) -> te.Expr:
            c = raw(p, s)
            if mode == "nearest":
                c = te.unary("round", c)  # half to even, as nearbyint
            return axes[s].reflect(c) if padding == "reflection" else c

        return te.compute(points, body, name=f"grid_coord{s}")

    taps = tap_count(mode)
    coords = [coordinate(s) for s in range(r)]
    positions = [te.compute((*points, taps), lambda *pt, s=s: axes[s].tap(
        first_tap(mode, coords[s][pt[:-1]], axes[s]) + pt[-1], padding),
        name=f"grid_tap{s}") for s in range(r)]

    def weights(s: int) -> te.Tensor:
        def body(*pt: te.Expr) -> te.Expr:
            c = coords[s][pt[:-1]]
            w = weight(mode, taps - 1, c, axes[s])
            for t in reversed(range(taps - 1)):
                w = te.select(te.eq(pt[-1], t), weight(mode, t, c, axes[s]), w)
            return w

        return te.compute((*points, taps), body, name=f"grid_weight{s}")

    ws = [weights(s) for s in range(r)] if mode != "nearest" else []
    zero = te.Const(0.0, ct)

    def sample(*o: te.Expr) -> te.Expr:
        p = (o[0], *o[2:])
        total: te.Expr | None = None
        for combo in itertools.product(range(taps), repeat=r):
            at = [positions[s][(*p, te.Const(t, "int64"))] for s, t in enumerate(combo)]
            value = te.cast(ct, x[(o[0], o[1], *(te.maximum(i, te.Const(0, "int64"))
                                                 for i in at))])
            if padding == "zeros":
                inside = te.all_of([te.ge(i, 0) for i in at])
                value = te.select(inside, value, zero)
            for s, t in enumerate(combo) if ws else ():
                value = ws[s][(*p, te.Const(t, "int64"))] * value
            total = value if total is None else total + value
        assert total is not None
        return te.cast(x.dtype, total)

    return [te.compute((x.shape[0], x.shape[1], *points[1:]), sample, name="grid_sample")]
