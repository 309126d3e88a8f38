"""The `winograd_conv` pass: which convolutions it rewrites, the F(4x4, 3x3) transforms, and the
rewritten model against onnxruntime on the original (in plain onnxruntime, and compiled)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from program_runner import assert_close, reference_outputs, run_program

from aotc.driver import compile_file, emit_onnx, rewrite_file
from aotc.passes.winograd_conv import input_kernels, output_matrix, transformed_weights


def conv_model(c: int, k: int, h: int, w: int, *, n: int = 1, pads=(1, 1, 1, 1), bias=True,
               relu=True, seed=0, **attrs) -> onnx.ModelProto:
    """x [n, c, h, w] -> Conv 3x3 (k outputs) [-> Relu]."""
    rng = np.random.default_rng(seed)
    group = attrs.get("group", 1)
    weights = (rng.standard_normal((k, c // group, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    inits = [numpy_helper.from_array(weights, "w")]
    ins = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(k).astype(np.float32), "b"))
        ins.append("b")
    nodes = [helper.make_node("Conv", ins, ["c" if relu else "y"], pads=list(pads), **attrs)]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [n, c, h, w])], [helper.make_empty_tensor_value_info("y")], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def saved(model: onnx.ModelProto, tmp_path: Path, name: str = "m.onnx") -> Path:
    path = tmp_path / name
    onnx.save(model, path)
    return path


def op_types(graph) -> list[str]:
    return [node.op_type for node in graph.graph]


def test_the_transforms_compute_a_tile_of_the_convolution() -> None:
    """A^T [ (G g G^T) * (B^T d B) ] A is the 4x4 valid correlation of a 6x6 tile d with g."""
    rng = np.random.default_rng(1)
    d, g = rng.standard_normal((6, 6)), rng.standard_normal((3, 3))
    want = np.array([[np.sum(d[i:i + 3, j:j + 3] * g) for j in range(4)] for i in range(4)])
    u = transformed_weights(g.reshape(1, 1, 3, 3)).astype(np.float64).reshape(6, 6)
    v = np.einsum("ij,j...->i...", input_kernels(1).reshape(36, 36).astype(np.float64),
                  d.reshape(36)).reshape(6, 6)
    got = (output_matrix().astype(np.float64) @ (u * v).reshape(36)).reshape(4, 4)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n,h,w,pads,bias,relu", [
    (1, 14, 14, (1, 1, 1, 1), True, True),   # ResNet-50's 256x256 layers: 16 tiles, a Slice
    (1, 16, 16, (1, 1, 1, 1), False, False),  # whole tiles: no Slice, no bias, a graph output
    (2, 11, 13, (0, 2, 1, 0), True, True),   # a batch, odd sizes, uneven pads
])
def test_rewritten_model_matches_onnxruntime(tmp_path: Path, n, h, w, pads, bias, relu) -> None:
    model = conv_model(256, 256, h, w, n=n, pads=pads, bias=bias, relu=relu)
    x = np.random.default_rng(2).standard_normal((n, 256, h, w)).astype(np.float32)
    want = reference_outputs(model, [x])[0]

    # the rewritten graph is plain ONNX: onnxruntime runs it
    graph = rewrite_file(saved(model, tmp_path), input_shapes={}, cpu_kernels=True)
    assert "MatMul" in op_types(graph) and "Conv" in op_types(graph)
    assert ("Slice" in op_types(graph)) == (h % 4 != 0 or w % 4 != 0)
    proto = ir.serde.serialize_model(graph)
    onnx.checker.check_model(proto)
    conv = next(nd for nd in proto.graph.node if nd.op_type == "Conv")
    assert helper.get_attribute_value(next(a for a in conv.attribute if a.name == "group")) == 256
    got = ort.InferenceSession(proto.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert_close(got, want, 1e-4)

    # and compiled by aotc
    program, _ = compile_file(saved(model, tmp_path), input_shapes=[], threads=1)
    assert any("winograd" in s.node for s in program.steps)
    assert_close(run_program(program, [x])[0], want, 1e-4)


@pytest.mark.parametrize("c,k,h,attrs,why", [
    (64, 256, 14, {}, "fewer than MIN_CHANNELS input channels"),
    (256, 64, 14, {}, "fewer than MIN_CHANNELS output channels"),
    (512, 512, 7, {}, "fewer than MIN_TILES tiles"),
    (256, 256, 14, {"strides": [2, 2]}, "stride 2"),
    (256, 256, 14, {"dilations": [2, 2]}, "dilated"),
    (256, 256, 14, {"group": 2}, "grouped"),
])
def test_other_convolutions_stay(tmp_path: Path, c, k, h, attrs, why) -> None:
    pads = (2, 2, 2, 2) if "dilations" in attrs else (1, 1, 1, 1)
    graph = rewrite_file(saved(conv_model(c, k, h, h, pads=pads, **attrs), tmp_path),
                         input_shapes={}, cpu_kernels=True)
    assert "MatMul" not in op_types(graph), why


def test_only_cpu_kernels_get_it(tmp_path: Path) -> None:
    """GPU targets, `--emit onnx` and `--disable-pass winograd_conv` keep the convolution."""
    path = saved(conv_model(256, 256, 14, 14), tmp_path)
    assert "MatMul" not in op_types(rewrite_file(path, input_shapes={}))
    assert "MatMul" not in op_types(rewrite_file(path, input_shapes={}, cpu_kernels=True,
                                                 disabled_passes=["winograd_conv"]))
    result = emit_onnx(path, tmp_path / "out", input_shapes={})
    assert not any(nd.op_type == "MatMul" for nd in onnx.load(result.path).graph.node)
    program, _ = compile_file(path, input_shapes=[], target="opencl")
    assert not any("winograd" in s.node for s in program.steps)


def test_new_values_do_not_take_a_name_the_model_uses(tmp_path: Path) -> None:
    """The chain's values are named after the convolution, and never as one the model has."""
    rng = np.random.default_rng(3)
    w = [numpy_helper.from_array((rng.standard_normal((128, 128, 3, 3)) / 34).astype(np.float32),
                                 f"w{i}") for i in range(2)]
    taken = "conv_winograd_1"  # the name the first chain's first value would get
    nodes = [helper.make_node("Conv", [taken, "w0"], ["h"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Conv", ["h", "w1"], ["y"], pads=[1, 1, 1, 1], name="conv2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        taken, TensorProto.FLOAT, [1, 128, 16, 16])], [helper.make_empty_tensor_value_info("y")],
        w)
    model = onnx.shape_inference.infer_shapes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10), strict_mode=True)
    rewritten = rewrite_file(saved(model, tmp_path), input_shapes={}, cpu_kernels=True)
    assert op_types(rewritten).count("MatMul") == 4
    proto = ir.serde.serialize_model(rewritten)
    onnx.checker.check_model(proto, full_check=True)
    x = rng.standard_normal((1, 128, 16, 16)).astype(np.float32)
    got = ort.InferenceSession(proto.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {taken: x})[0]
    assert_close(got, reference_outputs(model, [x])[0], 1e-4)
