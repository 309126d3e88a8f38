"""Operators of issue 17 part 3 that belong to no larger family: BitCast, Det, MaxPool's
Indices and MaxUnpool, TensorScatter, BatchNormalization in training mode, Compress,
DeformConv, CenterCropPad, AffineGrid. Against onnxruntime; where it has no kernel, against
ONNX's reference (each test says so)."""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from backend_cases import backend_cases, frozen  # noqa: E402
from program_runner import (  # noqa: E402
    assert_close,
    compile_onnx,
    node_model,
    ort_outputs,
    run_program,
)

from aotc.errors import AotcError  # noqa: E402

RNG = np.random.default_rng(31)


def reference_outputs(model: onnx.ModelProto, feeds: list[np.ndarray]) -> list[np.ndarray]:
    names = [i.name for i in model.graph.input]
    return ReferenceEvaluator(model).run(None, dict(zip(names, feeds, strict=True)))


def check(model: onnx.ModelProto, feeds: list[np.ndarray], tol: float = 1e-5,
          reference: bool = False) -> list[np.ndarray]:
    got = run_program(compile_onnx(model), feeds)
    want = reference_outputs(model, feeds) if reference else ort_outputs(model, feeds)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        assert_close(g, w, tol)
    return got


# -- BitCast ---------------------------------------------------------------------------------

BITCASTS = [(np.float32, np.int32), (np.int32, np.float32), (np.float64, np.int64),
            (np.int64, np.float64), (np.uint32, np.int32), (np.int8, np.uint8),
            (np.uint16, np.int16), (np.bool_, np.uint8), (np.float16, np.uint16),
            (np.uint64, np.float64), (np.int16, np.float16)]


@pytest.mark.parametrize("src,dst", BITCASTS)
def test_bitcast(src, dst) -> None:
    """Bit for bit numpy's view (onnxruntime 1.32 has no BitCast-26 kernel)."""
    raw = RNG.integers(0, 256, size=(3, 4, np.dtype(src).itemsize), dtype=np.uint8)
    x = raw.view(src).reshape(3, 4) if src is not np.bool_ else (raw[..., 0] & 1).astype(bool)
    to = helper.np_dtype_to_tensor_dtype(np.dtype(dst))
    model, feeds = node_model("BitCast", [x], opset=26, to=to)
    got = run_program(compile_onnx(model), feeds)[0]
    assert got.dtype == dst
    np.testing.assert_array_equal(got.view(np.uint8), x.view(np.uint8))


def test_bitcast_between_computations_and_of_a_constant() -> None:
    """x + 1 viewed as int32, plus a constant's bits: the view sits between two kernels."""
    x = RNG.standard_normal((5, 6)).astype(np.float32)
    w = RNG.standard_normal((5, 6)).astype(np.float32)
    nodes = [helper.make_node("Add", ["x", "one"], ["a"]),
             helper.make_node("BitCast", ["a"], ["b"], to=onnx.TensorProto.INT32),
             helper.make_node("BitCast", ["w"], ["wb"], to=onnx.TensorProto.INT32),
             helper.make_node("Add", ["b", "wb"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.INT32, x.shape)],
        initializer=[onnx.numpy_helper.from_array(np.ones((1,), np.float32), "one"),
                     onnx.numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)],
                              ir_version=10)
    got = run_program(compile_onnx(model), [x])[0]
    want = (x + np.float32(1)).view(np.int32) + w.view(np.int32)
    np.testing.assert_array_equal(got, want)


def test_bitcast_width_change_is_refused() -> None:
    x = np.zeros((4,), np.float32)
    model, _ = node_model("BitCast", [x], opset=26, to=onnx.TensorProto.INT32)
    model.graph.node[0].attribute[0].i = onnx.TensorProto.INT64
    with pytest.raises(AotcError):
        compile_onnx(model)


# -- Det -------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (3, 3), (4, 4), (7, 7), (5, 3, 3), (2, 3, 2, 2),
                                   (6, 12, 12)])
def test_det(dtype, shape: tuple[int, ...]) -> None:
    """float64 against ONNX's reference (numpy's LU): onnxruntime has only a float32 kernel."""
    x = RNG.standard_normal(shape).astype(dtype)
    wide = dtype == np.float64
    check(node_model("Det", [x])[0], [x], 1e-12 if wide else 1e-5, reference=wide)


def test_det_special_matrices() -> None:
    """Singular (repeated row, zero column), permutations (swaps flip the sign), a zero leading
    element (needs the pivot), diagonal, ill-conditioned."""
    mats = np.stack([
        [[1, 2, 3], [2, 4, 6], [0, 1, 5]],
        [[0, 2, 3], [0, 4, 6], [0, 1, 5]],
        [[0, 1, 0], [0, 0, 1], [1, 0, 0]],
        [[0, 1, 0], [1, 0, 0], [0, 0, 1]],
        [[0, 2, 1], [3, 1, 4], [1, 5, 9]],
        [[2, 0, 0], [0, -3, 0], [0, 0, 0.5]],
        [[1, 1, 1], [1, 1 + 1e-4, 1], [1, 1, 1 + 1e-4]],
    ]).astype(np.float32)
    check(node_model("Det", [mats])[0], [mats], 1e-5)


@pytest.mark.parametrize("shape", [(0, 3, 3), (2, 0, 0)])
def test_det_zero_size(shape: tuple[int, ...]) -> None:
    """No matrices, and empty matrices (determinant 1, as onnxruntime)."""
    x = np.zeros(shape, np.float32)
    check(node_model("Det", [x])[0], [x])


def test_det_nan_column() -> None:
    x = RNG.standard_normal((2, 4, 4)).astype(np.float32)
    x[0, :, 1] = np.nan
    got = run_program(compile_onnx(node_model("Det", [x])[0]), [x])[0]
    assert np.isnan(got[0])
    np.testing.assert_allclose(got[1], np.linalg.det(x[1].astype(np.float64)), rtol=1e-5)


# -- MaxPool's Indices -------------------------------------------------------------------------

POOLS = [
    ((1, 2, 9), dict(kernel_shape=[3])),
    ((1, 2, 9), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    ((2, 3, 7, 8), dict(kernel_shape=[3, 3])),
    ((2, 3, 7, 8), dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1])),
    ((1, 2, 7, 8), dict(kernel_shape=[2, 2], dilations=[2, 2])),
    ((1, 2, 7, 8), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ((1, 2, 7, 8), dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER")),
    ((1, 2, 5, 6, 7), dict(kernel_shape=[2, 3, 2], strides=[1, 2, 2], pads=[1, 1, 0, 0, 1, 1])),
]


@pytest.mark.parametrize("order", [0, 1])
@pytest.mark.parametrize("shape,attrs", POOLS)
def test_maxpool_indices(shape: tuple[int, ...], attrs: dict, order: int) -> None:
    x = RNG.standard_normal(shape).astype(np.float32)
    model, feeds = node_model("MaxPool", [x], outputs=(True, True), storage_order=order, **attrs)
    check(model, feeds)


@pytest.mark.parametrize("dtype", [np.float64, np.int8, np.uint8])
def test_maxpool_indices_ties_and_types(dtype) -> None:
    """Few distinct values: windows hold ties, the first in row-major order wins."""
    x = RNG.integers(0, 3, size=(2, 2, 6, 7)).astype(dtype)
    model, feeds = node_model("MaxPool", [x], outputs=(True, True), kernel_shape=[3, 3],
                              strides=[1, 2], pads=[1, 1, 1, 1])
    check(model, feeds)


# -- MaxUnpool -------------------------------------------------------------------------------

def pool_unpool_model(shape: tuple[int, ...], pool: dict, unpool: dict,
                      output_shape: list[int] | None = None, dtype=np.float32):
    """MaxPool's values and indices fed to MaxUnpool, as a model does to undo a pooling."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inits, ins = [], ["v", "i"]
    if output_shape is not None:
        inits.append(onnx.numpy_helper.from_array(np.array(output_shape, np.int64), "shape"))
        ins.append("shape")
    nodes = [helper.make_node("MaxPool", ["x"], ["v", "i"], **pool),
             helper.make_node("MaxUnpool", ins, ["y"], **unpool)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", elem, shape)],
                              [helper.make_tensor_value_info("y", elem, output_shape)],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)],
                              ir_version=10)
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.parametrize("shape,attrs,output_shape", [
    ((1, 2, 8), dict(kernel_shape=[2], strides=[2]), None),
    ((2, 3, 6, 8), dict(kernel_shape=[2, 2], strides=[2, 2]), None),
    ((1, 2, 7, 7), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), None),
    ((1, 2, 4, 6, 6), dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2]), None),
])
def test_max_unpool_after_max_pool(shape, attrs, output_shape) -> None:
    x = RNG.standard_normal(shape).astype(np.float32)
    check(pool_unpool_model(shape, attrs, attrs, output_shape), [x])


@pytest.mark.parametrize("output_shape", [[2, 3, 7, 9], [2, 3, 6, 10]])
def test_max_unpool_larger_output_shape(output_shape: list[int]) -> None:
    """The unpooled tensor padded with zeros at the end, as ONNX's reference and node test
    (onnxruntime writes the flat indices into the larger layout and fails that test)."""
    x = RNG.standard_normal((2, 3, 6, 8)).astype(np.float32)
    attrs = dict(kernel_shape=[2, 2], strides=[2, 2])
    check(pool_unpool_model(x.shape, attrs, attrs, output_shape), [x], reference=True)


def test_max_unpool_overlapping_windows_last_write_wins() -> None:
    """Stride 1 windows share their maxima: several elements name one position (all with the
    same value, as onnxruntime's last write leaves it)."""
    x = RNG.integers(0, 4, size=(1, 2, 6, 6)).astype(np.float32)
    attrs = dict(kernel_shape=[3, 3], strides=[1, 1])
    check(pool_unpool_model(x.shape, attrs, attrs, [1, 2, 6, 6]), [x])


def test_max_unpool_float64() -> None:
    """Against ONNX's reference: onnxruntime has only a float32 kernel."""
    x = RNG.standard_normal((2, 2, 3, 3))
    idx = (np.arange(36).reshape(4, 9) // 9 * 36 + np.array([0, 2, 5, 7, 8, 12, 17, 20, 35])
           ).reshape(x.shape)  # one distinct position per element in its own 6x6 plane
    model, feeds = node_model("MaxUnpool", [x, idx], opset=22, kernel_shape=[2, 2],
                              strides=[2, 2])
    check(model, feeds, 1e-12, reference=True)


def test_max_unpool_given_indices() -> None:
    """Indices given directly, two of them the same position (the later element wins)."""
    x = RNG.standard_normal((1, 1, 2, 2)).astype(np.float32)
    idx = np.array([[[[5, 7], [13, 5]]]], np.int64)
    model, feeds = node_model("MaxUnpool", [x, idx], opset=22, kernel_shape=[2, 2],
                              strides=[2, 2])
    check(model, feeds)


# -- backend cases whose shape parameters are graph inputs, frozen to constants ---------------

FROZEN = {
    "test_maxunpool_export_with_output_shape": [2],
    # Resize's filtered modes (the operator's own tests are in test_ops_nn.py)
    "test_resize_upsample_scales_cubic": [2],
    "test_resize_downsample_sizes_cubic": [3],
    "test_resize_upsample_scales_cubic_A_n0p5_exclude_outside": [2],
    "test_resize_downsample_scales_cubic_A_n0p5_exclude_outside": [2],
    "test_resize_upsample_scales_cubic_asymmetric": [2],
    "test_resize_downsample_scales_cubic_antialias": [2],
    "test_resize_downsample_sizes_cubic_antialias": [3],
    "test_resize_downsample_scales_linear_antialias": [2],
    "test_resize_downsample_sizes_linear_antialias": [3],
    "test_resize_tf_crop_and_resize": [1, 3],
    "test_resize_tf_crop_and_resize_axes_3_2": [1, 3],
    "test_resize_tf_crop_and_resize_extrapolation_value": [1, 3],
    "test_upsample_nearest": [1],
}


@functools.cache
def _cases() -> dict:
    return {c.name: c for c in backend_cases("test_") if c.name in FROZEN}


@pytest.mark.parametrize("name", sorted(FROZEN))
def test_backend_cases_with_parameters_frozen(name: str) -> None:
    case = _cases()[name]
    model, feeds, want = frozen(case, FROZEN[name])
    got = run_program(compile_onnx(model), feeds)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=case.rtol, atol=case.atol)


# -- TensorScatter ---------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("shape,update_len,axis,starts", [
    ((2, 3, 8, 4), 1, -2, [0, 7]),
    ((2, 3, 8, 4), 3, 2, [2, 5]),
    ((3, 6, 5), 2, 1, [1, 4, 0]),
    ((2, 4, 6, 5), 2, 1, [3, 2]),
    ((2, 3, 8, 4), 8, -2, [0, 0]),
])
def test_tensor_scatter(mode: str, shape, update_len: int, axis: int, starts) -> None:
    """Starts near the end wrap around in circular mode (linear starts keep the update
    inside)."""
    past = RNG.standard_normal(shape).astype(np.float32)
    ushape = list(shape)
    ushape[axis] = update_len
    update = RNG.standard_normal(ushape).astype(np.float32)
    length = shape[axis]
    if mode == "linear":
        starts = [min(s, length - update_len) for s in starts]
    idx = np.array(starts, np.int64)
    model, feeds = node_model("TensorScatter", [past, update, idx], opset=24, mode=mode,
                              axis=axis)
    check(model, feeds, 0)


def test_tensor_scatter_without_indices_and_int_cache() -> None:
    past = RNG.integers(-9, 9, size=(2, 5, 3)).astype(np.int32)
    update = RNG.integers(-9, 9, size=(2, 2, 3)).astype(np.int32)
    model, feeds = node_model("TensorScatter", [past, update], opset=24, axis=1)
    check(model, feeds)


# -- BatchNormalization in training mode ------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (4, 6), (3, 2, 7), (1, 4, 2, 3, 2)])
def test_batchnorm_training(dtype, shape: tuple[int, ...]) -> None:
    c = shape[1]
    x = (RNG.standard_normal(shape) * 3 + 1).astype(dtype)
    params = [RNG.standard_normal(c).astype(dtype), RNG.standard_normal(c).astype(dtype),
              RNG.standard_normal(c).astype(dtype), RNG.uniform(0.5, 2, c).astype(dtype)]
    model, feeds = node_model("BatchNormalization", [x, *params], consts=(1, 2, 3, 4),
                              outputs=(True,) * 3, opset=15, training_mode=1,
                              momentum=0.8, epsilon=1e-3)
    check(model, feeds, 1e-5 if dtype == np.float32 else 1e-12)


def test_batchnorm_training_runtime_statistics() -> None:
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    params = [RNG.standard_normal(4).astype(np.float32) for _ in range(3)]
    params.append(RNG.uniform(0.5, 2, 4).astype(np.float32))
    model, feeds = node_model("BatchNormalization", [x, *params], outputs=(True,) * 3,
                              opset=15, training_mode=1)
    check(model, feeds)


# -- Compress --------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,axis,cond", [
    ((3, 2), 0, [False, True, True]),
    ((3, 2), 1, [False, True]),
    ((3, 2), None, [False, True, False, False, True]),
    ((3, 2), -1, [True]),
    ((4, 5, 6), 1, [True, False, True, True, False]),
    ((4, 5, 6), 2, [False, False, True]),
    ((4, 5, 6), None, [i % 7 == 3 for i in range(120)]),
    ((4, 5), 0, [False, False, False, False]),
])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.float16])
def test_compress_constant_condition(shape, axis, cond, dtype) -> None:
    x = (RNG.standard_normal(shape) * 10).astype(dtype)
    attrs = {} if axis is None else {"axis": axis}
    model, feeds = node_model("Compress", [x, np.array(cond)], consts=(1,), **attrs)
    check(model, feeds, 0)


def test_compress_runtime_condition_read_by_a_node_is_refused() -> None:
    """A run-time condition decides the output's length: compiled as a graph output only
    (tests/test_computed_lengths.py), a node reading it is named."""
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3, 2])
    c = onnx.helper.make_tensor_value_info("c", onnx.TensorProto.BOOL, [3])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [None, 2])
    graph = onnx.helper.make_graph([
        onnx.helper.make_node("Compress", ["x", "c"], ["kept"], axis=0, name="keep"),
        onnx.helper.make_node("Relu", ["kept"], ["y"], name="relu")], "g", [x, c], [y])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 21)])
    with pytest.raises(AotcError, match="'relu' \\(Relu\\) reads 'kept', whose length depends"):
        compile_onnx(model)


# -- CenterCropPad and AffineGrid with constant shapes ----------------------------------------

@pytest.mark.parametrize("shape,target,axes", [
    ((20, 8, 3), [10, 10, 3], None), ((10, 7, 3), [20, 10, 3], None),
    ((20, 8, 3), [10, 9], [0, 1]), ((3, 20, 8), [10, 9], [1, 2]), ((20, 8, 3), [10, 9], [-3, -2]),
    ((5, 6), [5, 6], None)])
def test_center_crop_pad_constant_shape(shape, target, axes) -> None:
    """CenterCropPad compiles through its ONNX function body once the shape is a constant."""
    x = RNG.standard_normal(shape).astype(np.float32)
    attrs = {} if axes is None else {"axes": axes}
    model, feeds = node_model("CenterCropPad", [x, np.array(target, np.int64)], consts=(1,),
                              opset=18, **attrs)
    check(model, feeds, 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("size", [[2, 3, 5, 6], [1, 1, 1, 4], [2, 3, 4, 5, 6], [1, 2, 1, 3, 1]])
def test_affine_grid(dtype, align: int, size: list[int]) -> None:
    """A one-pixel axis with align_corners sits at -1 as in ONNX's reference and PyTorch
    (onnxruntime puts it at +1): those cases are checked against the reference, which
    computes in float32 whatever the type."""
    dims = len(size) - 2
    theta = RNG.standard_normal((size[0], dims, dims + 1)).astype(dtype)
    model, feeds = node_model("AffineGrid", [theta, np.array(size, np.int64)], consts=(1,),
                              opset=20, align_corners=align)
    if align and 1 in size[2:]:
        got = run_program(compile_onnx(model), feeds)[0]
        assert got.dtype == dtype
        assert_close(got, reference_outputs(model, feeds)[0], 1e-6)
    else:
        check(model, feeds, 1e-6 if dtype == np.float32 else 1e-12)


# -- DeformConv ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("with_mask,with_bias", [(False, False), (True, True)])
@pytest.mark.parametrize("cfg", [
    dict(n=1, c=2, oc=3, hw=(5, 6), k=(3, 3)),
    dict(n=2, c=4, oc=4, hw=(7, 6), k=(3, 2), group=2, strides=[2, 1], pads=[1, 0, 1, 1]),
    dict(n=1, c=4, oc=2, hw=(6, 6), k=(2, 2), offset_group=2, dilations=[2, 2]),
    dict(n=1, c=6, oc=6, hw=(5, 5), k=(3, 3), group=3, offset_group=3, pads=[1, 1, 1, 1]),
])
def test_deform_conv(cfg: dict, with_mask: bool, with_bias: bool, dtype) -> None:
    """Offsets up to ±3 pixels, so taps reach outside the image (zeros) and between pixels.
    float64 against ONNX's reference (onnxruntime has only a float32 kernel), to 1e-5: the
    reference's GridSample holds sampling coordinates in float32."""
    n, c, oc, (h, w), (kh, kw) = cfg["n"], cfg["c"], cfg["oc"], cfg["hw"], cfg["k"]
    group, og = cfg.get("group", 1), cfg.get("offset_group", 1)
    strides, pads = cfg.get("strides", [1, 1]), cfg.get("pads", [0, 0, 0, 0])
    dil = cfg.get("dilations", [1, 1])
    oh = (h + pads[0] + pads[2] - (kh - 1) * dil[0] - 1) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - (kw - 1) * dil[1] - 1) // strides[1] + 1
    x = RNG.standard_normal((n, c, h, w)).astype(dtype)
    weights = RNG.standard_normal((oc, c // group, kh, kw)).astype(dtype)
    offset = RNG.uniform(-3, 3, (n, og * 2 * kh * kw, oh, ow)).astype(dtype)
    bias = RNG.standard_normal(oc).astype(dtype) if with_bias else None
    mask = RNG.uniform(0, 1, (n, og * kh * kw, oh, ow)).astype(dtype) if with_mask else None
    attrs = {k: v for k, v in cfg.items() if k in ("group", "offset_group", "strides", "pads",
                                                  "dilations")}
    model, feeds = node_model("DeformConv", [x, weights, offset, bias, mask], consts=(1, 3),
                              opset=22, kernel_shape=[kh, kw], **attrs)
    wide = dtype == np.float64
    check(model, feeds, 1e-5, reference=wide)


def test_deform_conv_integer_offsets_equal_shifted_conv() -> None:
    """Zero offsets: the plain convolution (against onnxruntime's Conv)."""
    x = RNG.standard_normal((1, 3, 6, 7)).astype(np.float32)
    weights = RNG.standard_normal((2, 3, 3, 3)).astype(np.float32)
    offset = np.zeros((1, 18, 4, 5), np.float32)
    model, feeds = node_model("DeformConv", [x, weights, offset], consts=(1,), opset=22,
                              kernel_shape=[3, 3])
    got = run_program(compile_onnx(model), feeds)[0]
    conv, conv_feeds = node_model("Conv", [x, weights], consts=(1,), kernel_shape=[3, 3])
    assert_close(got, ort_outputs(conv, conv_feeds)[0], 1e-5)
