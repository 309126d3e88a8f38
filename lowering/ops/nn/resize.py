"""Resize: nearest and (n-)linear resampling over any axes, from scales or sizes.

Per resized axis (scale ≠ 1, as onnxruntime decides) a small table stage holds what each output
position reads: the nearest input index, or the two linear taps and their weights. The main
stage gathers through the tables: nearest copies one element, linear sums the 2^k corners of
the k resized axes weighted by the product of per-axis weights. Axes with scale 1 read straight
through. cubic, antialias and tf_crop_and_resize take the separable filtered passes of
`resize_filter.py`. Scales, a region of interest, or sizes under a kept aspect ratio given at
run time are loaded by the tables (a check asks that they give the output's shape, pinned.py).
"""

from __future__ import annotations

import itertools

import numpy as np

from lowering import te
from lowering.ops import OpContext, pinned, register_op
from lowering.ops.common import normalize_axis
from lowering.ops.nn.geometry import str_attr
from lowering.ops.nn.resize_coords import (
    NEAREST_MODES,
    TRANSFORMS,
    linear_taps,
    nearest_index,
    original_coordinate,
)
from lowering.ops.nn.resize_filter import Filter, Roi, filtered_resize

POLICIES = ("stretch", "not_larger", "not_smaller")
MAX_LINEAR_AXES = 4


def _axes(ctx: OpContext, rank: int) -> list[int]:
    raw = ctx.attr("axes")
    if raw is None:
        return list(range(rank))
    try:
        axes = [normalize_axis(int(a), rank) for a in raw]
    except ValueError as e:
        raise ctx.error(str(e)) from None
    if len(set(axes)) != len(axes):
        raise ctx.error(f"repeated axes {list(raw)}")
    return axes


Scale = np.float32 | te.Expr


def resize_scales(ctx: OpContext, in_shape: tuple[int, ...]) -> list[Scale]:
    """The float32 scale per axis that the coordinate transform divides by: a constant, or
    a load of a scale given at run time (`_run_time_scales`)."""
    rank = len(in_shape)
    axes = _axes(ctx, rank)
    scales: list[Scale] = [np.float32(1.0)] * rank
    given_at_run_time = pinned.run_time(ctx, 2)
    if given_at_run_time is not None and given_at_run_time.size > 0:
        return _run_time_scales(ctx, given_at_run_time, in_shape, axes, str_attr(
            ctx, "coordinate_transformation_mode", "half_pixel") == "align_corners")
    given = ctx.const(2, "scales") if ctx.has_input(2) else None
    if given is not None and given.size > 0:
        vals = np.asarray(given, dtype=np.float32).reshape(-1)
        if vals.size != len(axes):
            raise ctx.error(f"{vals.size} scales for {len(axes)} axes")
        if (vals <= 0).any():
            raise ctx.error(f"scales must be positive, got {vals.tolist()}")
        for a, v in zip(axes, vals, strict=True):
            scales[a] = np.float32(v)
        return scales
    if not ctx.has_input(3):
        raise ctx.error("Resize needs either scales or sizes")
    policy = str_attr(ctx, "keep_aspect_ratio_policy", "stretch")
    if policy not in POLICIES:
        raise ctx.error(f"keep_aspect_ratio_policy '{policy}' is not one of {POLICIES}")
    sizes_at_run_time = pinned.run_time(ctx, 3)
    if policy != "stretch" and sizes_at_run_time is not None:
        return _run_time_policy_scales(ctx, sizes_at_run_time, in_shape, axes, policy)
    if sizes_at_run_time is not None:
        # stretched, the sizes are the output's: pinned, checked at run time (pinned.py)
        out = ctx.out_shapes[0]
        sizes = pinned.values(ctx, 3, [out[a] for a in axes], "sizes").reshape(-1)
    else:
        sizes = np.asarray(ctx.const(3, "sizes"), dtype=np.int64).reshape(-1)
    if sizes.size != len(axes):
        raise ctx.error(f"{sizes.size} sizes for {len(axes)} axes")
    ratios = [np.float32(s) / np.float32(in_shape[a]) for a, s in zip(axes, sizes, strict=True)]
    if policy != "stretch":
        common = min(ratios) if policy == "not_larger" else max(ratios)
        ratios = [common] * len(axes)
    for a, r in zip(axes, ratios, strict=True):
        scales[a] = np.float32(r)
    return scales


def _run_time_scales(ctx: OpContext, t: te.Tensor, in_shape: tuple[int, ...],
                     axes: list[int], align_corners: bool) -> list[Scale]:
    """Scales given at run time: the coordinate tables read them (they divide the output
    position, so the output shape cannot stand for them), and a check asks that each gives
    the output's length (`int(scale * length)` in float32, as onnxruntime sizes the output)
    and that an axis the output keeps has scale 1. align_corners divides by the resized
    length: onnxruntime takes the output's, ONNX's reference scale * length (aotc follows
    onnxruntime from constant scales); at run time the check asks that the two agree, scale *
    length exactly the output's length."""
    out = ctx.out_shapes[0]
    loads = pinned.elements(t)
    if len(loads) != len(axes) or t.dtype != "float32":
        raise ctx.error(f"{len(loads)} {t.dtype} scales for {len(axes)} axes")
    scales: list[Scale] = [np.float32(1.0)] * len(in_shape)
    conds = []
    for a, s in zip(axes, loads, strict=True):
        if in_shape[a] == out[a]:
            conds.append(te.eq(s, te.const(1.0, "float32")))
            continue
        length = s * te.const(float(in_shape[a]), "float32")
        conds += [te.gt(s, te.const(0.0, "float32")),
                  te.eq(te.cast("int64", length), te.const(out[a], "int64"))]
        if align_corners:
            conds.append(te.eq(length, te.const(float(out[a]), "float32")))
        scales[a] = s
    pinned.require(ctx, te.all_of(conds), f"scales must give the output {list(out)} (scale 1 "
                   "on the axes it keeps)")
    return scales


def _run_time_policy_scales(ctx: OpContext, t: te.Tensor, in_shape: tuple[int, ...],
                            axes: list[int], policy: str) -> list[Scale]:
    """Sizes given at run time under keep_aspect_ratio_policy: the common scale (the least or
    greatest of sizes / input length, in float32) is computed when the kernel runs and the
    coordinate tables read it; a check asks that it gives the output's length on each axis
    (rounded, as the output is sized)."""
    out = ctx.out_shapes[0]
    loads = pinned.elements(t)
    if len(loads) != len(axes):
        raise ctx.error(f"{len(loads)} sizes for {len(axes)} axes")
    ratios = [te.cast("float32", s) / te.const(float(in_shape[a]), "float32")
              for a, s in zip(axes, loads, strict=True)]
    common = ratios[0]
    for r in ratios[1:]:
        common = te.minimum(common, r) if policy == "not_larger" else te.maximum(common, r)
    conds = [te.gt(common, te.const(0.0, "float32"))]
    conds += [te.eq(te.cast("int64", te.unary("round", common * te.const(
        float(in_shape[a]), "float32"))), te.const(out[a], "int64")) for a in axes]
    pinned.require(ctx, te.all_of(conds), f"sizes must give the output {list(out)} under "
                   f"keep_aspect_ratio_policy {policy}")
    scales: list[Scale] = [np.float32(1.0)] * len(in_shape)
    for a in axes:
        scales[a] = common
    return scales


def _check_attrs(ctx: OpContext, dtype: str) -> tuple[str, str, str]:
    mode = str_attr(ctx, "mode", "nearest")
    transform = str_attr(ctx, "coordinate_transformation_mode", "half_pixel")
    nearest = str_attr(ctx, "nearest_mode", "round_prefer_floor")
    if mode not in ("nearest", "linear", "cubic"):
        raise ctx.error(f"Resize mode '{mode}' is not one of nearest, linear, cubic")
    if transform not in TRANSFORMS and transform != "tf_crop_and_resize":
        raise ctx.error(f"unknown coordinate_transformation_mode '{transform}'")
    if mode == "nearest" and nearest not in NEAREST_MODES:
        raise ctx.error(f"nearest_mode '{nearest}' is not one of {', '.join(NEAREST_MODES)}")
    if mode != "nearest" and dtype not in te.FLOAT_DTYPES:
        raise ctx.error(f"{mode} Resize of {dtype} tensors is not supported")
    return mode, transform, nearest


def _filtered(ctx: OpContext, x: te.Tensor, mode: str, transform: str, nearest: str,
              scales: list[Scale], out_shape: tuple[int, ...]) -> te.Tensor:
    """cubic, antialias or tf_crop_and_resize: resize_filter's separable passes (their tap
    tables read scales and a region of interest given at run time)."""
    f = Filter(mode, transform, nearest, float(ctx.attr("cubic_coeff_a", -0.75)),
               bool(int(ctx.attr("exclude_outside", 0))),
               bool(int(ctx.attr("antialias", 0))) and mode != "nearest",
               float(ctx.attr("extrapolation_value", 0.0)))
    rank = len(x.shape)
    rois: dict[int, Roi] = {}
    if transform == "tf_crop_and_resize":
        axes = _axes(ctx, rank)
        given = pinned.run_time(ctx, 1)
        if given is not None:  # read when the kernel runs: every named axis is resized
            loads = [te.cast("float32", v) for v in pinned.elements(given)]
            if len(loads) != 2 * len(axes):
                raise ctx.error(f"roi has {len(loads)} values for {len(axes)} axes")
            rois = {a: (loads[i], loads[len(axes) + i]) for i, a in enumerate(axes)}
        else:
            roi = np.asarray(ctx.const(1, "roi"), dtype=np.float64).reshape(-1)
            if roi.size != 2 * len(axes):
                raise ctx.error(f"roi has {roi.size} values for {len(axes)} axes")
            constant = {a: (float(roi[i]), float(roi[len(axes) + i]))
                        for i, a in enumerate(axes)}
            rois = {a: r for a, r in constant.items()
                    if r != (0.0, 1.0) or isinstance(scales[a], te.Expr) or scales[a] != 1.0}
    resized = [a for a in range(rank)
               if isinstance(scales[a], te.Expr) or scales[a] != 1.0 or a in rois]
    for a in range(rank):
        if a not in resized and x.shape[a] != out_shape[a]:
            raise ctx.error(f"axis {a} changes size ({x.shape[a]} → {out_shape[a]}) with "
                            "scale 1")
    if not resized:
        return te.compute(out_shape, lambda *o: x[o], name="resize_copy")
    return filtered_resize(x, f, scales, out_shape, resized, rois)


@register_op("Resize")
def resize(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    mode, transform, nearest = _check_attrs(ctx, x.dtype)
    out_shape = ctx.out_shapes[0]
    if len(out_shape) != len(x.shape):
        raise ctx.error(f"inferred output shape {list(out_shape)} for input {list(x.shape)}")
    scales = resize_scales(ctx, x.shape)
    if min(x.shape, default=1) == 0 or min(out_shape, default=1) == 0:
        raise ctx.error("Resize of an empty tensor is not supported")
    if mode == "cubic" or transform == "tf_crop_and_resize" or (
            int(ctx.attr("antialias", 0)) and mode == "linear"):
        return [_filtered(ctx, x, mode, transform, nearest, scales, out_shape)]
    resized = [a for a, s in enumerate(scales) if isinstance(s, te.Expr) or s != 1.0]
    for a, (i, o) in enumerate(zip(x.shape, out_shape, strict=True)):
        if a not in resized and i != o:
            raise ctx.error(f"axis {a} changes size ({i} → {o}) with scale 1")
    if min(x.shape, default=1) == 0 or min(out_shape, default=1) == 0:
        raise ctx.error("Resize of an empty tensor is not supported")

    def table(a: int, pick: int, dtype: str, name: str) -> te.Tensor:
        def body(i: te.Var) -> te.Expr:
            scale = scales[a]
            coord = original_coordinate(transform, i, scale if isinstance(scale, te.Expr)
                                        else float(scale), out_shape[a], x.shape[a])
            if mode == "nearest":
                return nearest_index(nearest, coord, x.shape[a])
            return linear_taps(coord, x.shape[a])[pick]

        return te.compute((out_shape[a],), body, name=name, dtype=dtype)

    if mode == "nearest":
        index = {a: table(a, 0, "int64", "resize_idx") for a in resized}

        def gather(*o: te.Var) -> te.Expr:
            return x[tuple(index[a][od] if a in index else od for a, od in enumerate(o))]

        return [te.compute(out_shape, gather, name="resize_nearest")]

    if len(resized) > MAX_LINEAR_AXES:
        raise ctx.error(f"linear Resize over {len(resized)} axes (at most {MAX_LINEAR_AXES})")
    taps = {
        a: [table(a, k, dt, f"resize_{nm}") for k, (dt, nm) in
            enumerate((("int64", "lo"), ("int64", "hi"), ("float32", "wlo"), ("float32", "whi")))]
        for a in resized
    }

    def interpolate(*o: te.Var) -> te.Expr:
        total: te.Expr | None = None
        for corner in itertools.product((0, 1), repeat=len(resized)):
            side = dict(zip(resized, corner, strict=True))
            idx = tuple(taps[a][side[a]][od] if a in side else od for a, od in enumerate(o))
            w: te.Expr | None = None
            for a in resized:
                wa = taps[a][2 + side[a]][o[a]]
                w = wa if w is None else w * wa
            term = x[idx] if w is None else te.cast(x.dtype, w) * x[idx]
            total = term if total is None else total + term
        assert total is not None
        return total

    return [te.compute(out_shape, interpolate, name="resize_linear")]
