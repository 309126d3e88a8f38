"""Quantized operators against onnxruntime: QuantizeLinear/DequantizeLinear (per tensor, per
axis, blocked; rounding of ties, saturation), DynamicQuantizeLinear, MatMulInteger,
ConvInteger, QLinearMatMul, QLinearConv; integer outputs compared exactly."""

import pathlib
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from program_runner import check_model, compile_onnx, node_model, run_program  # noqa: E402
from program_runner import check_node as run_node  # noqa: E402

from aotc.errors import AotcError  # noqa: E402

RNG = np.random.default_rng(0)


def q(shape, dtype):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, size=shape).astype(dtype)


def f(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16])
def test_quantize_ties_and_saturation(dtype):
    # x / 0.5 lands on every tie from -300.5 to 300.5 and beyond the types' ranges
    x = np.concatenate([np.arange(-601, 602, dtype=np.float32) / 4, [1e9, -1e9, 7e4]])
    x = x.astype(np.float32)
    zp = np.array(3 if dtype in (np.int8, np.int16) else 100, dtype)
    run_node("QuantizeLinear", [x, np.array(0.5, np.float32), zp], consts=(1, 2))


def test_quantize_default_uint8_and_runtime_scale():
    run_node("QuantizeLinear", [f(3, 8) * 40, np.array(0.3, np.float32)])


def test_quantize_per_axis():
    x = f(2, 4, 5) * 10
    run_node("QuantizeLinear", [x, np.array([0.1, 0.2, 0.5, 1.0], np.float32),
                                np.array([0, -3, 5, 127], np.int8)], consts=(1, 2), axis=1)


def test_quantize_blocked():
    x = f(3, 7) * 10
    scale = np.abs(f(3, 3)) + 0.05
    zp = q((3, 3), np.uint8)
    run_node("QuantizeLinear", [x, scale, zp], consts=(1, 2), axis=1, block_size=3)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32])
def test_dequantize(dtype):
    x = q((4, 6), dtype) if dtype != np.int32 else RNG.integers(-1e6, 1e6, (4, 6)).astype(dtype)
    zp = np.array(0 if dtype == np.int32 else np.iinfo(dtype).max // 3, dtype)
    run_node("DequantizeLinear", [x, np.array(0.02, np.float32), zp], consts=(1, 2))


def test_dequantize_per_axis_and_blocked():
    x = q((2, 3, 4), np.int8)
    run_node("DequantizeLinear", [x, np.abs(f(3)), q((3,), np.int8)], consts=(1, 2), axis=1)
    run_node("DequantizeLinear", [x, np.abs(f(2, 3, 2)), q((2, 3, 2), np.int8)],
             consts=(1, 2), axis=2, block_size=2)


@pytest.mark.parametrize("x", [f(3, 50, 7), np.zeros((2, 3), np.float32),
                               np.full((4,), 3.0, np.float32), -np.abs(f(9)) - 1])
def test_dynamic_quantize(x):
    run_node("DynamicQuantizeLinear", [x], n_out=3)


@pytest.mark.parametrize("a_shape,b_shape", [((5, 33), (33, 7)), ((2, 3, 8), (8, 4))])
def test_matmul_integer(a_shape, b_shape):
    a, b = q(a_shape, np.uint8), q(b_shape, np.int8)
    run_node("MatMulInteger", [a, b, np.array(131, np.uint8), np.array(-3, np.int8)],
             consts=(2, 3))
    run_node("MatMulInteger", [a, b])


def test_matmul_integer_per_row_and_column():
    # onnxruntime (and ONNX's reference evaluator) take only per-tensor zero points here,
    # though the operator's documentation allows these: numpy computes the expected product
    a, b, za, zb = q((5, 16), np.uint8), q((16, 7), np.uint8), q((5,), np.uint8), q((7,), np.uint8)
    model, feeds = node_model("MatMulInteger", [a, b, za, zb], consts=(2, 3))
    want = (a.astype(np.int32) - za[:, None]) @ (b.astype(np.int32) - zb)
    np.testing.assert_array_equal(run_program(compile_onnx(model), feeds)[0], want)


@pytest.mark.parametrize("at,bt", [(np.uint8, np.int8), (np.int8, np.int8),
                                   (np.uint8, np.uint8)])
def test_qlinear_matmul(at, bt):
    a, b = q((2, 6, 40), at), q((40, 9), bt)
    zp_a, zp_b = q((), at), q((), bt)
    run_node("QLinearMatMul", [a, np.array(0.05, np.float32), zp_a, b,
                               np.array(0.02, np.float32), zp_b,
                               np.array(0.7, np.float32), q((), at)], consts=(1, 2, 4, 5, 6, 7))


def test_qlinear_matmul_per_column():
    a, b = q((6, 40), np.uint8), q((40, 9), np.int8)
    run_node("QLinearMatMul", [a, np.array(0.05, np.float32), np.array(120, np.uint8), b,
                               np.abs(f(9)) / 20, np.zeros(9, np.int8),
                               np.array(0.4, np.float32), np.array(128, np.uint8)],
             consts=(1, 2, 4, 5, 6, 7))


def _conv_inputs(c, k, group=1):
    return q((1, c, 9, 8), np.uint8), q((k, c // group, 3, 3), np.uint8)


@pytest.mark.parametrize("attrs", [{}, {"pads": [1, 1, 1, 1]},
                                   {"strides": [2, 2], "pads": [0, 1, 1, 0]}])
def test_conv_integer(attrs):
    x, w = _conv_inputs(4, 5)
    run_node("ConvInteger", [x, w, np.array(130, np.uint8), np.array(7, np.uint8)],
             consts=(1, 2, 3), **attrs)


@pytest.mark.parametrize("xt,wt", [(np.uint8, np.int8), (np.int8, np.int8),
                                   (np.uint8, np.uint8)])
@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_conv(xt, wt, per_channel):
    k = 6
    x, w = q((1, 4, 9, 8), xt), q((k, 2, 3, 3), wt)
    w_scale = (np.abs(f(k)) + 0.1) / 50 if per_channel else np.array(0.01, np.float32)
    w_zp = np.zeros(k if per_channel else (), wt)
    bias = RNG.integers(-2000, 2000, k).astype(np.int32)
    run_node("QLinearConv", [x, np.array(0.03, np.float32), q((), xt), w, w_scale, w_zp,
                             np.array(0.2, np.float32), q((), xt), bias],
             consts=(1, 2, 3, 4, 5, 6, 7, 8), pads=[1, 1, 1, 1], group=2)


def test_bad_scale_shape_is_the_nodes_error():
    # onnx's shape inference passes a scale of the wrong length; aotc names the node
    graph = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["x", "s"], ["y"], name="dq", axis=1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.INT8, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor("s", TensorProto.FLOAT, [4], [1.0] * 4)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)],
                              ir_version=10)
    with pytest.raises(AotcError, match="axis 1") as e:
        compile_onnx(model)
    assert e.value.node == "dq" and e.value.op == "DequantizeLinear"


def test_qdq_chain_model():
    # quantize, dequantize and a float op between: the round trip of a QDQ model
    graph = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
         helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
         helper.make_node("Relu", ["xd"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])],
        [helper.make_tensor("s", TensorProto.FLOAT, [], [0.05]),
         helper.make_tensor("z", TensorProto.INT8, [], [-4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)],
                              ir_version=10)
    check_model(model, [f(3, 5)], tol=1e-6)


def test_integer_products_exact_where_int16_pairs_would_saturate():
    """255 * 127 in every product: a kernel that adds pairs in saturating int16 (vpmaddubsw,
    as onnxruntime's u8 x s8 kernels on x86-64 without VNNI do) clips them; aotc's result is
    the exact sum on every ISA, checked against numpy."""
    a = np.full((3, 96), 255, np.uint8)
    a[1, ::3] = 0
    b = np.full((96, 5), 127, np.int8)
    b[::2, 1] = -128
    model, feeds = node_model("MatMulInteger", [a, b], consts=(1,))
    got = run_program(compile_onnx(model), feeds)[0]
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))
