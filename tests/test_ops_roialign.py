"""RoiAlign against onnxruntime: avg and max, both coordinate transforms, spatial scales,
sampling ratios, boxes inside, across and beyond the image edge, degenerate (zero-size and
reversed) boxes, several images in the batch, float64; adaptive sampling refused. Models are
opset 16 (onnxruntime has no RoiAlign-22 kernel; aotc converts them up to its opset)."""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from program_runner import compile_onnx, node_model, ort_outputs, run_program  # noqa: E402

from aotc.errors import AotcError  # noqa: E402

RNG = np.random.default_rng(19)


def boxes(count: int, h: int, w: int, scale: float) -> np.ndarray:
    """Boxes in input coordinates (x1, y1, x2, y2): random ones reaching past every edge,
    then a zero-size one, a reversed one and one wholly outside."""
    lo = RNG.uniform(-0.3, 0.9, size=(count, 2)) * np.array([w, h]) / scale
    size = RNG.uniform(0.05, 0.8, size=(count, 2)) * np.array([w, h]) / scale
    special = np.array([[2, 2, 2, 2], [5, 4, 1, 1], [-9, -9, -4, -3]], np.float64) / scale
    return np.concatenate([np.concatenate([lo, lo + size], 1), special])


@pytest.mark.parametrize("transform", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("scale,ratio", [(1.0, 2), (0.25, 1), (0.5, 3)])
def test_roialign_against_onnxruntime(mode: str, transform: str, scale: float,
                                      ratio: int) -> None:
    h, w = 9, 11
    x = RNG.standard_normal((3, 4, h, w)).astype(np.float32)
    rois = boxes(7, h, w, scale).astype(np.float32)
    batch = RNG.integers(0, 3, size=len(rois)).astype(np.int64)
    model, feeds = node_model("RoiAlign", [x, rois, batch], opset=16, mode=mode,
                              coordinate_transformation_mode=transform, output_height=3,
                              output_width=4, sampling_ratio=ratio, spatial_scale=scale)
    got = run_program(compile_onnx(model), feeds)[0]
    want = ort_outputs(model, feeds)[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_roialign_float64() -> None:
    x = RNG.standard_normal((1, 2, 6, 5))
    rois = boxes(4, 6, 5, 1.0)
    batch = np.zeros(len(rois), np.int64)
    model, feeds = node_model("RoiAlign", [x, rois, batch], opset=16, output_height=2,
                              output_width=2, sampling_ratio=2)
    got = run_program(compile_onnx(model), feeds)[0]
    np.testing.assert_allclose(got, ort_outputs(model, feeds)[0], rtol=1e-12, atol=1e-12)


def test_roialign_adaptive_sampling_is_refused() -> None:
    x = RNG.standard_normal((1, 2, 6, 5)).astype(np.float32)
    rois = boxes(2, 6, 5, 1.0).astype(np.float32)
    model, _ = node_model("RoiAlign", [x, rois, np.zeros(len(rois), np.int64)], opset=16,
                          sampling_ratio=0)
    with pytest.raises(AotcError, match="sampling_ratio"):
        compile_onnx(model)
