"""Convolution, pooling, normalisation, Pad and Resize operators against onnxruntime."""

import pathlib
import sys

import numpy as np
import onnx
import pytest
from onnx import helper

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from program_runner import assert_close, check_model, compile_onnx, run_program  # noqa: E402

from aotc.errors import AotcError  # noqa: E402

ELEM = {np.dtype(np.float32): onnx.TensorProto.FLOAT, np.dtype(np.float64): onnx.TensorProto.DOUBLE,
        np.dtype(np.int8): onnx.TensorProto.INT8, np.dtype(np.uint8): onnx.TensorProto.UINT8,
        np.dtype(np.int64): onnx.TensorProto.INT64, np.dtype(np.int32): onnx.TensorProto.INT32}


def rand(*shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed + 7 * len(shape) + sum(shape))
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, int(info.max) + 1, size=shape, dtype=dtype)
    return rng.standard_normal(shape).astype(dtype)


def build(nodes, feeds, consts=None, opset=21):
    """A model over `nodes`: `feeds` (name → array) are graph inputs, `consts` initializers;
    every node output is a graph output, shapes by onnx inference."""
    consts = consts or {}
    inputs = [helper.make_tensor_value_info(n, ELEM[a.dtype], a.shape) for n, a in feeds.items()]
    outs = [o for nd in nodes for o in nd.output if o]
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None)
                             for o in outs],
        initializer=[onnx.numpy_helper.from_array(np.asarray(a), n) for n, a in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=10)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def check_op(op, feeds, consts=None, inputs=None, n_out=1, tol=1e-4, opset=21, **attrs):
    """One `op` node; `inputs` lists input names in order ('' for omitted)."""
    consts = consts or {}
    names = inputs if inputs is not None else [*feeds, *consts]
    node = helper.make_node(op, names, [f"y{i}" for i in range(n_out)], **attrs)
    check_model(build([node], feeds, consts, opset), list(feeds.values()), tol)


# Conv ----------------------------------------------------------------------------------------
CONV_CASES = [
    # x shape, w shape, attrs
    ((1, 3, 8, 8), (4, 3, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((2, 4, 9, 11), (6, 2, 3, 3), dict(group=2, pads=[1, 0, 2, 1], strides=[2, 1],
                                        dilations=[1, 2])),
    ((1, 8, 10, 13), (8, 1, 3, 3), dict(group=8, pads=[1, 1, 1, 1])),  # depthwise
    ((1, 4, 12, 12), (8, 1, 5, 5), dict(group=4, strides=[2, 2], pads=[2, 1, 2, 1])),  # ×2
    ((1, 6, 7, 9), (5, 6, 1, 1), {}),  # 1×1
    ((1, 3, 17, 19), (4, 3, 3, 3), dict(strides=[3, 3])),
    ((1, 3, 17, 19), (4, 3, 3, 2), dict(strides=[2, 3], dilations=[2, 1], pads=[0, 2, 1, 0])),
    ((1, 2, 30, 40), (3, 2, 7, 7), dict(pads=[3, 3, 3, 3], strides=[2, 2])),
    ((1, 3, 8, 8), (4, 3, 3, 3), dict(kernel_shape=[3, 3], pads=[0, 0, 0, 0])),
    ((1, 16, 5, 24), (32, 16, 3, 3), dict(pads=[1, 1, 1, 1])),  # wide: vectorised
]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("xs,ws,attrs", CONV_CASES)
def test_conv(xs, ws, attrs, bias):
    consts = {"w": rand(*ws, seed=1)}
    if bias:
        consts["b"] = rand(ws[0], seed=2)
    check_op("Conv", {"x": rand(*xs)}, consts, **attrs)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID", "NOTSET"])
@pytest.mark.parametrize("stride,kernel", [(1, 4), (2, 3), (3, 2)])
def test_conv_auto_pad(auto_pad, stride, kernel):
    consts = {"w": rand(3, 2, kernel, kernel, seed=1), "b": rand(3, seed=2)}
    check_op("Conv", {"x": rand(1, 2, 11, 10)}, consts, auto_pad=auto_pad,
             strides=[stride, stride])


@pytest.mark.parametrize("xs,ws,attrs", [
    ((2, 3, 20), (4, 3, 5), dict(pads=[2, 1], strides=[2])),  # 1-D
    ((1, 4, 50), (4, 1, 3), dict(group=4, dilations=[3], pads=[3, 2])),
    ((1, 2, 5, 6, 7), (3, 2, 3, 3, 3), dict(pads=[1, 0, 1, 1, 0, 1])),  # 3-D
    ((1, 4, 5, 6, 7), (4, 2, 2, 3, 2), dict(group=2, strides=[2, 1, 2])),
])
def test_conv_1d_3d(xs, ws, attrs):
    check_op("Conv", {"x": rand(*xs)}, {"w": rand(*ws, seed=1), "b": rand(ws[0], seed=2)},
             **attrs)


def test_conv_weights_at_run_time():
    check_op("Conv", {"x": rand(1, 4, 9, 9), "w": rand(6, 2, 3, 3, seed=1)}, group=2,
             pads=[1, 1, 1, 1])


# ConvTranspose ------------------------------------------------------------------------------
CONVT_CASES = [
    ((1, 3, 5, 6), (3, 4, 3, 3), dict(strides=[2, 2], output_padding=[1, 1])),
    ((1, 3, 5, 6), (3, 4, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1],
                                      output_padding=[1, 0])),
    ((1, 4, 4, 5), (4, 3, 4, 4), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ((2, 4, 6, 5), (4, 2, 3, 3), dict(group=2, dilations=[2, 1], pads=[0, 2, 1, 0])),
    ((1, 6, 5, 5), (6, 1, 3, 3), dict(group=6, strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 2, 4, 7), (2, 3, 2, 3), dict(strides=[3, 2])),
    ((1, 3, 5, 6), (3, 2, 3, 3), dict(strides=[2, 2], output_shape=[10, 12])),
    ((1, 3, 5, 6), (3, 2, 3, 3), dict(strides=[2, 2], output_shape=[9, 11])),
    ((1, 3, 5, 6), (3, 2, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 3, 5, 6), (3, 2, 3, 3), dict(strides=[2, 2], auto_pad="SAME_LOWER")),
    ((1, 3, 5, 6), (3, 2, 4, 4), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 3, 5, 6), (3, 2, 3, 3), dict(strides=[2, 1], auto_pad="VALID")),
    ((1, 3, 9), (3, 2, 4), dict(strides=[2], pads=[1, 2], output_padding=[1])),  # 1-D
    ((1, 2, 3, 4, 3), (2, 2, 2, 3, 2), dict(strides=[2, 1, 2])),  # 3-D
]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("xs,ws,attrs", CONVT_CASES)
def test_conv_transpose(xs, ws, attrs, bias):
    group = attrs.get("group", 1)
    consts = {"w": rand(*ws, seed=1)}
    if bias:
        consts["b"] = rand(ws[1] * group, seed=2)
    check_op("ConvTranspose", {"x": rand(*xs)}, consts, **attrs)


# pools -------------------------------------------------------------------------------------
POOL_CASES = [
    ((1, 3, 8, 8), dict(kernel_shape=[2, 2], strides=[2, 2])),
    ((2, 3, 9, 11), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 2, 10, 9), dict(kernel_shape=[3, 2], strides=[2, 3], pads=[0, 1, 2, 0])),
    ((1, 2, 9, 11), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ((1, 2, 10, 11), dict(kernel_shape=[3, 3], strides=[3, 2], pads=[1, 0, 1, 1], ceil_mode=1)),
    ((1, 2, 9, 9), dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
    ((1, 2, 11, 12), dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 2, 11, 12), dict(kernel_shape=[4, 4], strides=[3, 3], auto_pad="SAME_LOWER")),
    ((1, 2, 11, 12), dict(kernel_shape=[3, 2], strides=[2, 2], auto_pad="VALID")),
    ((1, 4, 20), dict(kernel_shape=[4], strides=[3], pads=[1, 2])),  # 1-D
    ((1, 2, 5, 6, 7), dict(kernel_shape=[2, 3, 2], strides=[2, 1, 2], pads=[0, 1, 1, 1, 1, 0])),
]


@pytest.mark.parametrize("xs,attrs", POOL_CASES)
def test_max_pool(xs, attrs):
    check_op("MaxPool", {"x": rand(*xs)}, **attrs)


@pytest.mark.parametrize("xs,attrs", [
    ((1, 2, 12, 13), dict(kernel_shape=[3, 3], dilations=[2, 2], pads=[1, 2, 1, 0])),
    ((1, 2, 12, 13), dict(kernel_shape=[2, 3], dilations=[3, 2], strides=[2, 2], ceil_mode=1)),
])
def test_max_pool_dilations(xs, attrs):
    check_op("MaxPool", {"x": rand(*xs)}, **attrs)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.float64])
def test_max_pool_dtypes(dtype):
    check_op("MaxPool", {"x": rand(1, 3, 9, 10, dtype=dtype)}, kernel_shape=[3, 3],
             strides=[2, 2], pads=[1, 1, 1, 1])


def test_max_pool_indices():  # the forms are tested in test_ops_misc_nodes.py
    check_op("MaxPool", {"x": rand(1, 1, 4, 4)}, n_out=2, kernel_shape=[2, 2])


@pytest.mark.parametrize("include_pad", [0, 1])
@pytest.mark.parametrize("xs,attrs", POOL_CASES)
def test_average_pool(xs, attrs, include_pad):
    check_op("AveragePool", {"x": rand(*xs)}, count_include_pad=include_pad, **attrs)


@pytest.mark.parametrize("include_pad", [0, 1])
def test_average_pool_dilations(include_pad):
    check_op("AveragePool", {"x": rand(1, 2, 12, 13)}, count_include_pad=include_pad,
             kernel_shape=[3, 2], dilations=[2, 3], pads=[1, 1, 2, 1], strides=[2, 1])


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_2d_pools_take_the_window_template(op):
    """2-D float pooling is a window reduction without weights: the depthwise template reads
    the unpadded input with the out-of-bounds taps dropped per border run (the padding is the
    combiner's identity: -inf for max, 0 for a sum), rather than padding a copy first and
    gathering strided columns from it. Other ranks and integer inputs keep the default."""
    from lowering import te
    from lowering.ops import OPS, OpContext
    from lowering.search.select import space_for
    from lowering.templates.depthwise import DepthwiseSpace
    from targets.cpu.target import host_target

    def space(shape, out_shape, dtype="float32", **attrs):
        x = te.placeholder(shape, dtype, "x")
        ctx = OpContext(node="n", op_type=op, attrs=attrs, inputs=[x], consts=[None],
                        out_shapes=[out_shape], out_dtypes=[dtype])
        return space_for([x], OPS[op](ctx), [None], host_target())

    attrs = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])
    assert isinstance(space((1, 8, 20, 112), (1, 8, 10, 56), **attrs), DepthwiseSpace)
    # narrow outputs take the template's narrow-pool forms (the planes split by stride phase
    # here, test_templates_rows.py); 1-D and integer pools keep the default
    assert isinstance(space((1, 8, 20, 20), (1, 8, 10, 10), **attrs), DepthwiseSpace)
    assert not isinstance(space((1, 8, 200), (1, 8, 100), kernel_shape=[3], pads=[1, 1],
                                strides=[2]), DepthwiseSpace)
    if op == "MaxPool":
        assert not isinstance(space((1, 8, 20, 112), (1, 8, 10, 56), "int8", **attrs),
                              DepthwiseSpace)
    # border-heavy: rows and columns near the edges see different tap sets
    check_op(op, {"x": rand(2, 3, 7, 101) - 1.0}, kernel_shape=[4, 3], pads=[2, 1, 1, 2],
             strides=[1, 2])


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("xs", [(2, 3, 7, 9), (1, 5, 11), (1, 2, 3, 4, 5), (1, 64, 1, 1)])
def test_global_pool(op, xs):
    check_op(op, {"x": rand(*xs)})


# normalisation -----------------------------------------------------------------------------
@pytest.mark.parametrize("xs", [(2, 3, 5, 7), (4, 6), (2, 3, 9), (1, 2, 3, 4, 5)])
def test_batch_normalization(xs):
    c = xs[1]
    consts = {"scale": rand(c, seed=1), "B": rand(c, seed=2), "mean": rand(c, seed=3),
              "var": np.abs(rand(c, seed=4)) + 0.1}
    check_op("BatchNormalization", {"x": rand(*xs)}, consts, epsilon=1e-3)


def test_batch_normalization_run_time_parameters():
    c = 4
    feeds = {"x": rand(2, c, 3, 5), "scale": rand(c, seed=1), "B": rand(c, seed=2),
             "mean": rand(c, seed=3), "var": np.abs(rand(c, seed=4)) + 0.1}
    check_op("BatchNormalization", feeds)


def test_batch_normalization_training_mode():  # more forms in test_ops_misc_nodes.py
    c = 3
    consts = {"scale": rand(c, seed=1), "B": rand(c, seed=2), "mean": rand(c, seed=3),
              "var": np.abs(rand(c, seed=4)) + 0.1}
    check_op("BatchNormalization", {"x": rand(2, c, 4, 4)}, consts, n_out=3, training_mode=1)


@pytest.mark.parametrize("xs", [(2, 3, 5, 7), (1, 4, 9), (1, 2, 3, 4, 5)])
def test_instance_normalization(xs):
    c = xs[1]
    check_op("InstanceNormalization", {"x": rand(*xs)},
             {"scale": rand(c, seed=1), "B": rand(c, seed=2)}, epsilon=1e-4)


@pytest.mark.parametrize("size", [1, 3, 5])
@pytest.mark.parametrize("xs", [(1, 7, 4, 5), (2, 3, 6, 1)])
def test_lrn(size, xs):
    check_op("LRN", {"x": rand(*xs)}, size=size, alpha=0.01, beta=0.6, bias=1.5)


def lrn_reference(x, size, alpha, beta, bias):
    """The ONNX spec's formula (onnx.reference's LRN loops over the batch axis by mistake)."""
    sq = np.zeros_like(x, dtype=np.float64)
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
    for c in range(x.shape[1]):
        sq[:, c] = (x[:, max(0, c - lo):c + hi + 1].astype(np.float64) ** 2).sum(axis=1)
    return (x / (bias + alpha / size * sq) ** beta).astype(x.dtype)


@pytest.mark.parametrize("size,xs", [(2, (1, 5, 3, 4)), (4, (2, 6, 7)), (3, (1, 4, 2, 3, 2))])
def test_lrn_even_size_and_other_ranks(size, xs):
    """onnxruntime only runs odd sizes on 4-D inputs: compare with the spec's formula."""
    x = rand(*xs)
    node = helper.make_node("LRN", ["x"], ["y0"], size=size, alpha=0.02, beta=0.75, bias=1.0)
    got = run_program(compile_onnx(build([node], {"x": x})), [x])[0]
    assert_close(got, lrn_reference(x, size, 0.02, 0.75, 1.0))


# Pad ---------------------------------------------------------------------------------------
PAD_CASES = [
    ((3, 4), [1, 2, 2, 1]),
    ((2, 3, 4, 5), [0, 0, 1, 2, 0, 0, 2, 1]),
    ((2, 3, 6, 5), [0, 1, -1, 2, 0, 0, 2, -2]),  # crop and pad
    ((5, 7), [-1, -2, -2, -1]),  # crop only
    ((1, 2, 7), [0, 0, 3, 0, 1, 2]),
]


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("xs,pads", PAD_CASES)
def test_pad(mode, xs, pads):
    consts = {"pads": np.array(pads, np.int64)}
    if mode == "constant":
        consts["value"] = np.array(1.5, np.float32)
    check_op("Pad", {"x": rand(*xs)}, consts, mode=mode)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_axes(mode):
    consts = {"pads": np.array([2, 1, 1, 3], np.int64), "axes": np.array([-1, 1], np.int64)}
    check_op("Pad", {"x": rand(2, 4, 5)}, consts, inputs=["x", "pads", "", "axes"], mode=mode)


def test_pad_run_time_constant_value():
    check_op("Pad", {"x": rand(3, 4), "v": np.array(-2.0, np.float32)},
             {"pads": np.array([1, 0, 0, 2], np.int64)}, inputs=["x", "pads", "v"])


@pytest.mark.parametrize("dtype", [np.int64, np.uint8])
def test_pad_integer(dtype):
    check_op("Pad", {"x": rand(3, 4, dtype=dtype)}, {"pads": np.array([1, 2, 0, 1], np.int64)},
             mode="constant")


def test_pad_opset_10_attributes():
    check_op("Pad", {"x": rand(3, 4)}, pads=[1, 0, 2, 1], value=0.5, mode="constant",
             opset=10)


# Resize ------------------------------------------------------------------------------------
TRANSFORMS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
              "half_pixel_symmetric"]
NEAREST = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
# (0.6 on 7 columns is avoided: half_pixel_symmetric lands 2 ulp from a tie there, and
# onnxruntime's nearest and linear paths disagree about it)
SCALES = [[1, 1, 2, 2], [1, 1, 0.5, 0.5], [1, 1, 1.5, 0.75], [1, 1, 3, 0.7]]


def resize_nodes(mode, transform, nearest_modes, scales_list, prefix):
    nodes, consts = [], {}
    for i, sc in enumerate(scales_list):
        consts[f"{prefix}s{i}"] = np.array(sc, np.float32)
        for m in nearest_modes:
            nodes.append(helper.make_node(
                "Resize", ["x", "", f"{prefix}s{i}"], [f"{prefix}{i}_{m}"], mode=mode,
                coordinate_transformation_mode=transform, nearest_mode=m))
    return nodes, consts


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_resize_nearest(transform):
    """Every nearest_mode × up/down/mixed scales in one model per transform."""
    x = rand(1, 2, 5, 7)
    nodes, consts = resize_nodes("nearest", transform, NEAREST, SCALES, "n")
    check_model(build(nodes, {"x": x}, consts), [x])


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_resize_linear(transform):
    x = rand(2, 3, 5, 7)
    nodes, consts = resize_nodes("linear", transform, ["floor"], SCALES, "l")
    check_model(build(nodes, {"x": x}, consts), [x])


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("xs,sizes", [
    ((1, 2, 5, 7), [1, 2, 9, 4]),
    ((1, 1, 1, 4), [1, 1, 3, 8]),
    ((3, 8), [3, 12]),  # 2-D: last axis only
    ((2, 9), [5, 4]),  # 2-D bilinear
    ((1, 2, 3, 4, 5), [1, 2, 6, 2, 7]),  # trilinear
    ((1, 6, 4), [1, 6, 9]),  # 1-D
])
def test_resize_sizes(mode, xs, sizes):
    check_op("Resize", {"x": rand(*xs)}, {"sizes": np.array(sizes, np.int64)},
             inputs=["x", "", "", "sizes"], mode=mode, coordinate_transformation_mode="half_pixel")


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_axes_and_policy(policy, mode):
    check_op("Resize", {"x": rand(1, 2, 6, 8)}, {"sizes": np.array([9, 10], np.int64)},
             inputs=["x", "", "", "sizes"], mode=mode, axes=[2, 3],
             keep_aspect_ratio_policy=policy)


@pytest.mark.parametrize("dtype", [np.uint8, np.int32])
def test_resize_nearest_integer(dtype):
    check_op("Resize", {"x": rand(1, 2, 4, 5, dtype=dtype)},
             {"scales": np.array([1, 1, 2.5, 1.5], np.float32)}, inputs=["x", "", "scales"],
             mode="nearest")


def test_resize_non_trailing_axes():
    """Nearest resampling of N and C as well (onnxruntime supports it for nearest)."""
    check_op("Resize", {"x": rand(2, 3, 4, 5)},
             {"scales": np.array([2, 0.5, 1, 2], np.float32)}, inputs=["x", "", "scales"],
             mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_older_opsets(opset, mode):
    """Resize-11 (empty roi tensor) and Resize-13 (omitted roi), converted by the frontend."""
    consts = {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 1.5, 0.5], np.float32)}
    check_op("Resize", {"x": rand(1, 2, 6, 8)}, consts, inputs=["x", "roi", "scales"],
             opset=opset, mode=mode, coordinate_transformation_mode="pytorch_half_pixel")


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("a,exclude", [(-0.75, 0), (-0.5, 1)])
def test_resize_cubic(transform, a, exclude):
    """Keys' cubic over up/down/mixed scales (taps past the edge read it, or weigh 0 with
    exclude_outside)."""
    x = rand(1, 2, 6, 7)
    for scales in SCALES:
        check_op("Resize", {"x": x}, {"scales": np.array(scales, np.float32)},
                 inputs=["x", "", "scales"], mode="cubic", cubic_coeff_a=a,
                 exclude_outside=exclude, coordinate_transformation_mode=transform)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("scales", [[1, 1, 0.5, 0.6], [1, 1, 0.25, 0.3], [1, 1, 0.3, 1.7]])
def test_resize_antialias(mode, scales):
    """Filters widened by 1/scale when downsampling (up to 16 taps per axis here)."""
    check_op("Resize", {"x": rand(2, 2, 16, 20)}, {"scales": np.array(scales, np.float32)},
             inputs=["x", "", "scales"], mode=mode, antialias=1)


def test_resize_cubic_sizes():
    check_op("Resize", {"x": rand(2, 3, 5, 6)}, {"sizes": np.array([2, 3, 9, 4], np.int64)},
             inputs=["x", "", "", "sizes"], mode="cubic")


def test_resize_cubic_3d_float64():
    """Against ONNX's reference: onnxruntime's cubic takes float32 images of two resized
    axes only. The filter weights are float32 for every type, as onnxruntime's coordinate
    arithmetic (the reference's are float64): a few ulp of float32 in the taps."""
    from onnx.reference import ReferenceEvaluator

    x = rand(1, 2, 4, 5, 6).astype(np.float64)
    sizes = np.array([1, 2, 7, 3, 9], np.int64)
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y0"], mode="cubic")
    model = build([node], {"x": x}, {"sizes": sizes}, 21)
    got = run_program(compile_onnx(model), [x])[0]
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("roi,axes", [
    ([0, 0, 0.2, 0.1, 1, 1, 0.9, 1.2], None),  # past the right edge: extrapolated
    ([-0.3, 0.4, 0.6, 0.8], [2, 3]),
    ([0.4, 0.6, 0.8, 0.9], [3, 2]),
])
def test_resize_tf_crop_and_resize(mode, roi, axes):
    attrs = {} if axes is None else {"axes": axes}
    sizes = [1, 2, 5, 4] if axes is None else [5, 4]
    check_op("Resize", {"x": rand(1, 2, 8, 9)},
             {"roi": np.array(roi, np.float32), "sizes": np.array(sizes, np.int64)},
             inputs=["x", "roi", "", "sizes"], mode=mode,
             coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=3.5,
             **attrs)


def test_resize_rejects_unknown_mode():
    with pytest.raises(AotcError, match="mode"):
        check_op("Resize", {"x": rand(1, 1, 4, 4)},
                 {"scales": np.array([1, 1, 2, 2], np.float32)}, inputs=["x", "", "scales"],
                 mode="area")
