"""Col2Im against onnxruntime (2-D images: strides, dilations, pads, overlapping and sparse
blocks, several channels) and the backend node cases (2-D and 5-D) with image_shape and
block_shape frozen to constants; shapes given at run time are refused."""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from backend_cases import backend_cases, frozen  # noqa: E402
from program_runner import compile_onnx, node_model, ort_outputs, run_program  # noqa: E402

from aotc.errors import AotcError  # noqa: E402

RNG = np.random.default_rng(18)


def grid_of(image, block, strides, dilations, pads) -> list[int]:
    r = len(image)
    return [(image[d] + pads[d] + pads[r + d] - dilations[d] * (block[d] - 1) - 1)
            // strides[d] + 1 for d in range(r)]


@pytest.mark.parametrize("image,block,strides,dilations,pads", [
    ((5, 5), (2, 2), (1, 1), (1, 1), (0, 0, 0, 0)),   # overlapping blocks
    ((6, 7), (3, 2), (2, 3), (1, 1), (0, 0, 0, 0)),   # strided
    ((7, 6), (2, 3), (1, 1), (2, 2), (0, 0, 0, 0)),   # dilated
    ((5, 6), (3, 3), (2, 1), (1, 2), (1, 2, 0, 1)),   # everything, uneven pads
    ((4, 4), (1, 1), (3, 3), (1, 1), (0, 0, 0, 0)),   # sparse: pixels no block reaches
    ((3, 1), (2, 1), (1, 1), (1, 1), (1, 0, 1, 0)),
])
def test_col2im_against_onnxruntime(image, block, strides, dilations, pads) -> None:
    grid = grid_of(image, block, strides, dilations, pads)
    x = RNG.standard_normal((2, 3 * int(np.prod(block)), int(np.prod(grid)))).astype(
        np.float32)
    model, feeds = node_model(
        "Col2Im", [x, np.array(image, np.int64), np.array(block, np.int64)], consts=(1, 2),
        opset=18, strides=list(strides), dilations=list(dilations), pads=list(pads))
    got = run_program(compile_onnx(model), feeds)[0]
    want = ort_outputs(model, feeds)[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("case", backend_cases("test_col2im"), ids=lambda c: c.name)
def test_col2im_backend_cases_with_shapes_frozen(case) -> None:
    model, feeds, want = frozen(case, [1, 2])
    (got,) = run_program(compile_onnx(model), feeds)
    np.testing.assert_allclose(got, want[0], rtol=1e-6, atol=1e-6)


def test_col2im_shapes_at_run_time_are_refused() -> None:
    x = RNG.standard_normal((1, 4, 16)).astype(np.float32)
    model, _ = node_model("Col2Im", [x, np.array([5, 5], np.int64),
                                     np.array([2, 2], np.int64)], consts=(2,), opset=18)
    with pytest.raises(AotcError, match="Col2Im"):
        compile_onnx(model)


def test_col2im_blocks_that_do_not_fit_are_refused() -> None:
    x = RNG.standard_normal((1, 4, 15)).astype(np.float32)  # 16 blocks expected
    model, _ = node_model("Col2Im", [x, np.array([5, 5], np.int64),
                                     np.array([2, 2], np.int64)], consts=(1, 2), opset=18)
    with pytest.raises(AotcError):
        compile_onnx(model)
