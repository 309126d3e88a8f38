"""GridSample against onnxruntime: every mode, padding mode and align_corners, on 4-D and 5-D
inputs, grids reaching well outside [-1, 1] (reflection folding several times), grid points
exactly on pixel centres and half-way between them (nearest's ties round half to even), odd
shapes (one-pixel axes, one output point), float64 and float16, and opset 16's mode names."""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from program_runner import compile_onnx, node_model, ort_outputs, run_program  # noqa: E402

from aotc.errors import AotcError  # noqa: E402

RNG = np.random.default_rng(16)
MODES = ["linear", "nearest", "cubic"]
PADDINGS = ["zeros", "border", "reflection"]


def grid_outputs(x: np.ndarray, grid: np.ndarray, opset: int = 22, **attrs):
    model, feeds = node_model("GridSample", [x, grid], opset=opset, **attrs)
    return run_program(compile_onnx(model), feeds)[0], ort_outputs(model, feeds)[0]


def assert_grid(x: np.ndarray, grid: np.ndarray, tol: float = 1e-5, opset: int = 22,
                **attrs) -> None:
    got, want = grid_outputs(x, grid, opset, **attrs)
    assert got.dtype == want.dtype and got.shape == want.shape
    scale = max(1.0, float(np.abs(want.astype(np.float64)).max(initial=0)))
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol,
                               atol=tol * scale)


def image_and_grid(spatial: tuple[int, ...], out: tuple[int, ...], reach: float,
                   dtype: type = np.float32) -> tuple[np.ndarray, np.ndarray]:
    x = RNG.standard_normal((2, 3, *spatial)).astype(dtype)
    grid = RNG.uniform(-reach, reach, size=(2, *out, len(spatial))).astype(dtype)
    return x, grid


@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", MODES)
def test_gridsample_2d_every_mode(mode: str, padding: str, align: int) -> None:
    x, grid = image_and_grid((5, 7), (4, 6), reach=3.2)  # up to three folds outside
    assert_grid(x, grid, mode=mode, padding_mode=padding, align_corners=align)


@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_gridsample_3d(mode: str, padding: str, align: int) -> None:
    x, grid = image_and_grid((3, 4, 5), (2, 3, 4), reach=2.2)
    assert_grid(x, grid, mode=mode, padding_mode=padding, align_corners=align)


@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("mode", MODES)
def test_gridsample_on_and_between_pixel_centres(mode: str, align: int) -> None:
    """Grid points on pixel centres and exactly half-way (nearest rounds half to even)."""
    h, w = 4, 6
    ys = np.arange(-1, h + 1, 0.5)
    xs = np.arange(-1, w + 1, 0.5)
    px = np.stack(np.meshgrid(xs, ys), axis=-1)  # pixel coordinates (x, y)
    size = np.array([w, h], np.float64)
    norm = px * 2 / (size - 1) - 1 if align else (2 * px + 1) / size - 1
    grid = norm[None].astype(np.float32)
    x = RNG.standard_normal((1, 2, h, w)).astype(np.float32)
    for padding in PADDINGS:
        assert_grid(x, grid, mode=mode, padding_mode=padding, align_corners=align)


@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", MODES)
def test_gridsample_odd_shapes(mode: str, padding: str) -> None:
    for spatial, out in (((1, 1), (3, 2)), ((7, 1), (1, 1))):
        x, grid = image_and_grid(spatial, out, reach=1.7)
        for align in (0, 1):
            assert_grid(x, grid, mode=mode, padding_mode=padding, align_corners=align)


@pytest.mark.parametrize("mode", MODES)
def test_gridsample_float64_and_float16(mode: str) -> None:
    x, grid = image_and_grid((6, 5), (3, 4), reach=1.5, dtype=np.float64)
    assert_grid(x, grid, tol=1e-12, mode=mode, padding_mode="reflection")
    x, grid = image_and_grid((6, 5), (3, 4), reach=1.5, dtype=np.float16)
    try:
        want = grid_outputs(x, grid, mode=mode)[1]
    except Exception:  # onnxruntime has no float16 kernel: compare with float32's result
        want = grid_outputs(x.astype(np.float32), grid.astype(np.float32), mode=mode)[1]
    model, feeds = node_model("GridSample", [x, grid], opset=22, mode=mode)
    got = run_program(compile_onnx(model), feeds)[0]
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-2,
                               atol=2e-2 * max(1.0, float(np.abs(want).max())))


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_gridsample_opset16_names(mode: str) -> None:
    x, grid = image_and_grid((5, 4), (3, 3), reach=1.2)
    assert_grid(x, grid, opset=16, mode=mode, padding_mode="border", align_corners=1)


def test_gridsample_bad_attributes_are_refused() -> None:
    from lowering import te
    from lowering.ops import OpContext, run_op

    x = te.placeholder((1, 1, 4, 4), "float32", "x")
    g = te.placeholder((1, 2, 2, 2), "float32", "g")
    for attrs in ({"mode": "area"}, {"padding_mode": "wrap"}):
        ctx = OpContext("n", "GridSample", attrs, [x, g], [None, None], [(1, 1, 2, 2)],
                        ["float32"])
        with pytest.raises(AotcError, match="GridSample"):
            run_op(ctx)
    bad = te.placeholder((1, 2, 2, 3), "float32", "g")
    ctx = OpContext("n", "GridSample", {}, [x, bad], [None, None], [(1, 1, 2, 2)], ["float32"])
    with pytest.raises(AotcError, match="grid"):
        run_op(ctx)


@pytest.mark.parametrize("padding", ["zeros", "reflection"])
# the 3-D case takes a minute in ONNX's reference evaluator
@pytest.mark.parametrize("spatial,out", [pytest.param((3, 4, 5), (2, 3, 2), marks=pytest.mark.slow),
                                         ((6,), (5,))])
def test_gridsample_other_ranks_as_the_onnx_reference(spatial, out, padding: str) -> None:
    """onnxruntime samples 4-D and 5-D inputs only, and cubic only 4-D; the opset-22 schema
    allows any rank, as ONNX's reference (whose border padding clamps the coordinate, not
    the taps, so it is left out here)."""
    from onnx.reference import ReferenceEvaluator

    x, grid = image_and_grid(spatial, out, reach=1.6)
    for mode in MODES:
        model, feeds = node_model("GridSample", [x, grid], opset=22, mode=mode,
                                  padding_mode=padding)
        got = run_program(compile_onnx(model), feeds)[0]
        (want,) = ReferenceEvaluator(model).run(None, {"x0": x, "x1": grid})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
