"""RoiAlign: per box, an output_height x output_width grid of bins, each the average (or max)
of sampling_ratio² bilinear samples of the box's image, as onnxruntime computes them.

Box corners are scaled by spatial_scale, less half a pixel with half_pixel coordinates
(output_half_pixel keeps them and makes a box at least 1x1). A sample beyond [-1, H] or
[-1, W] counts as 0; one inside is clamped to the image and interpolated between its four
neighbours. Max mode takes, per sample, the largest of the four weighted neighbours (not their
sum), then the largest over the samples, which is what onnxruntime and ONNX's reference do.
Per box, bin and sample, one small stage per axis holds the sample's low and high rows (or
columns) and its fraction (low = -1 marks a sample outside); the output reads them.

sampling_ratio 0 (adaptive: ceil(box size / bins) samples, depending on the box data) is
refused: te's reductions have fixed extents.
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.common import data_index, index_input
from lowering.ops.nn.geometry import str_attr

TRANSFORMS = ("half_pixel", "output_half_pixel")


def _attrs(ctx: OpContext) -> tuple[str, bool, int, int, int, float]:
    mode = str_attr(ctx, "mode", "avg")
    if mode not in ("avg", "max"):
        raise ctx.error(f"mode '{mode}' is not one of avg, max")
    transform = str_attr(ctx, "coordinate_transformation_mode", "half_pixel")
    if transform not in TRANSFORMS:
        raise ctx.error(f"coordinate_transformation_mode '{transform}' is not one of "
                        f"{', '.join(TRANSFORMS)}")
    oh, ow = int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1))
    ratio = int(ctx.attr("sampling_ratio", 0))
    if oh <= 0 or ow <= 0:
        raise ctx.error(f"output size {oh}x{ow} must be positive")
    if ratio < 0:
        raise ctx.error(f"sampling_ratio {ratio} is negative")
    if ratio == 0:
        raise ctx.error("sampling_ratio 0 (adaptive) is not supported: the number of samples "
                        "per bin would depend on each box's size at run time",
                        hint="export with a fixed sampling_ratio (torchvision's default is 2)")
    return mode, transform == "half_pixel", oh, ow, ratio, float(ctx.attr("spatial_scale",
                                                                          1.0))


@register_op("RoiAlign")
def roi_align(ctx: OpContext) -> list[te.Tensor]:
    x, rois, batch = ctx.input(0), ctx.input(1), index_input(ctx, 2)
    mode, half_pixel, oh, ow, ratio, scale = _attrs(ctx)
    if len(x.shape) != 4 or x.dtype not in te.FLOAT_DTYPES:
        raise ctx.error(f"RoiAlign needs a float (N, C, H, W) input, got {x.dtype}"
                        f"{list(x.shape)}")
    if len(rois.shape) != 2 or rois.shape[1] != 4 or batch.shape != (rois.shape[0],):
        raise ctx.error(f"rois {list(rois.shape)} and batch_indices {list(batch.shape)} must "
                        "be (R, 4) and (R,)")
    ct = "float64" if x.dtype == "float64" else "float32"
    boxes = rois.shape[0]
    n, c, h, w = x.shape

    def f(v: float) -> te.Expr:
        return te.Const(v, ct)

    def taps(axis: int, bins: int, length: int, part: str) -> te.Tensor:
        """Per (box, bin, sample) along one axis (0: y, 1: x): the low tap ('lo', -1 for a
        sample outside), the high tap ('hi') or the fraction ('frac')."""
        def body(r: te.Expr, b: te.Expr, s: te.Expr) -> te.Expr:
            offset = f(0.5 if half_pixel else 0.0)
            start = te.cast(ct, rois[r, te.Const(axis ^ 1, "int64")]) * f(scale) - offset
            end = te.cast(ct, rois[r, te.Const(2 + (axis ^ 1), "int64")]) * f(scale) - offset
            size = end - start if half_pixel else te.maximum(end - start, f(1.0))
            step = size / f(bins)
            pos = start + te.cast(ct, b) * step + (te.cast(ct, s) + f(0.5)) * step / f(ratio)
            outside = te.logical_or(te.lt(pos, f(-1.0)), te.gt(pos, f(length)))
            p = te.minimum(te.maximum(pos, f(0.0)), f(length))  # NaN-safe: max drops it
            lo = te.cast("int64", p)
            edge = te.ge(lo, length - 1)
            lo = te.minimum(lo, te.Const(length - 1, "int64"))
            if part == "lo":
                return te.select(outside, te.Const(-1, "int64"), lo)
            if part == "hi":
                return te.select(edge, lo, lo + 1)
            return te.select(edge, f(0.0), p - te.cast(ct, lo))

        dtype = ct if part == "frac" else "int64"
        return te.compute((boxes, bins, ratio), body, name=f"roi_{'yx'[axis]}{part}",
                          dtype=dtype)

    ylo, yhi, ly = (taps(0, oh, h, p) for p in ("lo", "hi", "frac"))
    xlo, xhi, lx = (taps(1, ow, w, p) for p in ("lo", "hi", "frac"))

    def pooled(r: te.Expr, ch: te.Expr, ph: te.Expr, pw: te.Expr) -> te.Expr:
        iy, ix = te.reduce_axis(ratio, "sy"), te.reduce_axis(ratio, "sx")
        img = data_index(batch[r], n)
        yl, xl = ylo[r, ph, iy.var], xlo[r, pw, ix.var]
        fy, fx = ly[r, ph, iy.var], lx[r, pw, ix.var]
        y0, x0 = te.maximum(yl, te.Const(0, "int64")), te.maximum(xl, te.Const(0, "int64"))
        y1, x1 = yhi[r, ph, iy.var], xhi[r, pw, ix.var]
        one = f(1.0)
        terms = [(one - fy) * (one - fx) * te.cast(ct, x[img, ch, y0, x0]),
                 (one - fy) * fx * te.cast(ct, x[img, ch, y0, x1]),
                 fy * (one - fx) * te.cast(ct, x[img, ch, y1, x0]),
                 fy * fx * te.cast(ct, x[img, ch, y1, x1])]
        inside = te.logical_and(te.ge(yl, 0), te.ge(xl, 0))
        if mode == "avg":
            value = terms[0] + terms[1] + terms[2] + terms[3]
            return te.reduce("sum", te.select(inside, value, f(0.0)), [iy, ix])
        value = te.maximum(te.maximum(terms[0], terms[1]), te.maximum(terms[2], terms[3]))
        return te.reduce("max", te.select(inside, value, f(0.0)), [iy, ix])

    total = te.compute((boxes, c, oh, ow), pooled, name="roi_align_sum")
    count = f(float(ratio * ratio))
    return [te.compute(total.shape, lambda *o: te.cast(
        x.dtype, total[o] / count if mode == "avg" else total[o]), name="roi_align")]
