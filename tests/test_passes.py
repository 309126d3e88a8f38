"""aotc.passes: each pass keeps onnxruntime's outputs and does what it says to the graph."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from aotc.errors import AotcError
from aotc.frontend import CANONICAL_OPSET, load_model
from aotc.frontend.shapes import infer_shapes
from aotc.passes import PIPELINE, run_passes
from aotc.passes.eliminate_dead_nodes import eliminate_dead_nodes
from aotc.passes.fold_batchnorm import fold_batchnorm
from aotc.passes.fold_constants import fold_constants
from aotc.passes.remove_identity import remove_identity

F = TensorProto.FLOAT
RNG = np.random.default_rng(1)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def vi(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def make_proto(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", CANONICAL_OPSET)])
    model.ir_version = 10
    return model


def loaded(proto: onnx.ModelProto, tmp_path) -> ir.Model:
    """The model as the frontend hands it to the passes."""
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    return load_model(path)


def raw(proto: onnx.ModelProto) -> ir.Model:
    """The model with shapes inferred but nothing folded (to see the nodes a pass removes)."""
    model = ir.from_proto(proto)
    infer_shapes(model)
    return model


def ort_run(model: ir.Model | onnx.ModelProto, feeds):
    proto = ir.to_proto(model) if isinstance(model, ir.Model) else model
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(proto.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))


def check_pass(fn, model: ir.Model, feeds, atol=1e-5) -> ir.Model:
    """Run `fn` and compare onnxruntime before/after; the output names must not change."""
    before = ort_run(model, feeds)
    names = [v.name for v in model.graph.outputs], [v.name for v in model.graph.inputs]
    model = fn(model)
    onnx.checker.check_model(ir.to_proto(model))
    assert ([v.name for v in model.graph.outputs], [v.name for v in model.graph.inputs]) == names
    after = ort_run(model, feeds)
    assert before.keys() == after.keys()
    for k in before:
        np.testing.assert_allclose(after[k], before[k], rtol=1e-4, atol=atol)
    for node in model.graph:
        for out in node.outputs:
            assert out.dtype is not None and out.shape is not None and out.shape.is_static()
    return model


def ops(model: ir.Model) -> list[str]:
    return [n.op_type for n in model.graph]


# ---------------------------------------------------------------- fold_constants

def test_fold_constants_weights_have_no_size_limit(tmp_path):
    w = rand(300, 300)  # 90,000 elements: above onnxscript's and the frontend's limits
    nodes = [helper.make_node("Transpose", ["w"], ["wt"]),
             helper.make_node("Cast", ["wt"], ["w16"], to=TensorProto.FLOAT16),
             helper.make_node("Cast", ["w16"], ["w32"], to=F),
             helper.make_node("Add", ["b1", "b2"], ["b"]),
             helper.make_node("MatMul", ["x", "w32"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["y"])]
    inits = [init("w", w), init("b1", rand(300)), init("b2", rand(300))]
    model = loaded(make_proto(nodes, [vi("x", [2, 300])], [vi("y", [2, 300])], inits), tmp_path)
    assert "Transpose" in ops(model)
    model = check_pass(fold_constants, model, {"x": rand(2, 300)}, atol=1e-3)
    assert ops(model) == ["MatMul", "Add"]
    matmul = next(iter(model.graph))
    assert matmul.inputs[1].is_initializer()
    assert matmul.inputs[1].const_value.dtype == ir.DataType.FLOAT


def test_fold_constants_keeps_large_expansions(tmp_path):
    nodes = [helper.make_node("ConstantOfShape", ["big_shape"], ["big"],
                              value=init("v", np.array([0.5], np.float32))),
             helper.make_node("ConstantOfShape", ["small_shape"], ["small"],
                              value=init("v", np.array([2.0], np.float32))),
             helper.make_node("Add", ["x", "big"], ["y"]),
             helper.make_node("Mul", ["y", "small"], ["z"])]
    inits = [init("big_shape", np.array([1100, 1000], np.int64)),
             init("small_shape", np.array([1000], np.int64))]
    model = loaded(make_proto(nodes, [vi("x", [1100, 1000])], [vi("z", [1100, 1000])], inits),
                   tmp_path)
    model = check_pass(fold_constants, model, {"x": rand(1100, 1000)})
    assert ops(model).count("ConstantOfShape") == 1  # the 1.1M-element one stays


# ---------------------------------------------------------------- remove_identity

def test_remove_identity_and_noops():
    nodes = [helper.make_node("Identity", ["x"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Dropout", ["r"], ["d"]),
             helper.make_node("Cast", ["d"], ["c"], to=F),
             helper.make_node("Reshape", ["c", "same"], ["s"]),
             helper.make_node("Transpose", ["s"], ["t"], perm=[0, 1]),
             helper.make_node("Neg", ["t"], ["n"]),
             helper.make_node("Identity", ["n"], ["y"]),        # output fed by a node: renamed
             helper.make_node("Identity", ["x"], ["copy"]),     # input → output: stays
             helper.make_node("Identity", ["n"], ["y2"])]       # second output of the same value
    inits = [init("same", np.array([2, 3], np.int64))]
    outs = [vi("y", [2, 3]), vi("copy", [2, 3]), vi("y2", [2, 3])]
    model = raw(make_proto(nodes, [vi("x", [2, 3])], outs, inits))
    model = check_pass(remove_identity, model, {"x": rand(2, 3)})
    assert ops(model) == ["Relu", "Neg", "Identity", "Identity"]
    neg = [n for n in model.graph if n.op_type == "Neg"][0]
    assert neg.outputs[0].name == "y"


def test_remove_identity_keeps_training_dropout_and_real_casts():
    nodes = [helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16),
             helper.make_node("Cast", ["h"], ["y"], to=F),
             helper.make_node("Reshape", ["x", "flat"], ["z"])]
    inits = [init("flat", np.array([6], np.int64))]
    model = raw(make_proto(nodes, [vi("x", [2, 3])], [vi("y", [2, 3]), vi("z", [6])], inits))
    model = check_pass(remove_identity, model, {"x": rand(2, 3)}, atol=1e-2)
    assert ops(model) == ["Cast", "Cast", "Reshape"]


# ---------------------------------------------------------------- fold_batchnorm

def _bn(name, x, y, c):
    inits = [init(f"{name}_s", rand(c) + 2), init(f"{name}_b", rand(c)),
             init(f"{name}_m", rand(c)), init(f"{name}_v", np.abs(rand(c)) + 0.5)]
    node = helper.make_node("BatchNormalization", [x, *(i.name for i in inits)], [y],
                            epsilon=1e-3)
    return node, inits


@pytest.mark.parametrize("group, bias", [(1, True), (1, False), (2, True)])
def test_fold_batchnorm_into_conv(tmp_path, group, bias):
    conv_in = ["x", "w", "cb"] if bias else ["x", "w"]
    bn, bn_inits = _bn("bn", "c", "y", 4)
    nodes = [helper.make_node("Conv", conv_in, ["c"], pads=[1, 1, 1, 1], group=group), bn]
    inits = [init("w", rand(4, 4 // group, 3, 3)), init("cb", rand(4)), *bn_inits]
    model = loaded(make_proto(nodes, [vi("x", [2, 4, 5, 5])], [vi("y", [2, 4, 5, 5])],
                              inits if bias else [i for i in inits if i.name != "cb"]),
                   tmp_path)
    model = check_pass(fold_batchnorm, model, {"x": rand(2, 4, 5, 5)})
    assert ops(model) == ["Conv"]
    assert len(next(iter(model.graph)).inputs) == 3


def test_fold_batchnorm_into_conv_transpose(tmp_path):
    bn, bn_inits = _bn("bn", "c", "y", 6)
    nodes = [helper.make_node("ConvTranspose", ["x", "w"], ["c"], group=2, strides=[2, 2]), bn]
    inits = [init("w", rand(4, 3, 2, 2)), *bn_inits]
    model = loaded(make_proto(nodes, [vi("x", [1, 4, 3, 3])], [vi("y", [1, 6, 6, 6])], inits),
                   tmp_path)
    model = check_pass(fold_batchnorm, model, {"x": rand(1, 4, 3, 3)})
    assert ops(model) == ["ConvTranspose"]


@pytest.mark.parametrize("trans_b, c_shape", [(0, None), (1, (5,)), (0, (3, 5))])
def test_fold_batchnorm_into_gemm(tmp_path, trans_b, c_shape):
    bn, bn_inits = _bn("bn", "g", "y", 5)
    w = rand(5, 4) if trans_b else rand(4, 5)
    gemm_in = ["x", "w"] + (["c"] if c_shape else [])
    nodes = [helper.make_node("Gemm", gemm_in, ["g"], transB=trans_b, alpha=0.5, beta=2.0), bn]
    inits = [init("w", w), *bn_inits] + ([init("c", rand(*c_shape))] if c_shape else [])
    model = loaded(make_proto(nodes, [vi("x", [3, 4])], [vi("y", [3, 5])], inits), tmp_path)
    model = check_pass(fold_batchnorm, model, {"x": rand(3, 4)})
    assert ops(model) == ["Gemm"]


def test_standalone_and_shared_batchnorm_stay(tmp_path):
    bn1, inits1 = _bn("bn1", "x", "a", 4)          # after a graph input
    bn2, inits2 = _bn("bn2", "c", "b", 4)          # conv output also used elsewhere
    nodes = [bn1, helper.make_node("Conv", ["a", "w"], ["c"]), bn2,
             helper.make_node("Add", ["b", "c"], ["y"])]
    inits = [init("w", rand(4, 4, 1, 1)), *inits1, *inits2]
    model = loaded(make_proto(nodes, [vi("x", [1, 4, 3, 3])], [vi("y", [1, 4, 3, 3])], inits),
                   tmp_path)
    model = check_pass(fold_batchnorm, model, {"x": rand(1, 4, 3, 3)})
    assert ops(model).count("BatchNormalization") == 2


# ---------------------------------------------------------------- eliminate_dead_nodes

def test_eliminate_dead_nodes():
    nodes = [helper.make_node("Relu", ["x"], ["y"]),
             helper.make_node("Add", ["x", "unused_w"], ["dead1"]),
             helper.make_node("Neg", ["dead1"], ["dead2"])]
    model = raw(make_proto(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])],
                           [init("unused_w", rand(2, 3))]))
    model = check_pass(eliminate_dead_nodes, model, {"x": rand(2, 3)})
    assert ops(model) == ["Relu"] and not model.graph.initializers


# ---------------------------------------------------------------- pipeline

def _conv_bn_model(tmp_path):
    bn, bn_inits = _bn("bn", "c", "b", 4)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), bn,
             helper.make_node("Identity", ["b"], ["i"]),
             helper.make_node("Relu", ["i"], ["y"])]
    inits = [init("w", rand(4, 3, 1, 1)), *bn_inits]
    return loaded(make_proto(nodes, [vi("x", [1, 3, 4, 4])], [vi("y", [1, 4, 4, 4])], inits),
                  tmp_path)


def test_run_passes_pipeline(tmp_path):
    lines: list[str] = []
    model = _conv_bn_model(tmp_path)
    model = check_pass(lambda m: run_passes(m, log=lines.append), model,
                       {"x": rand(1, 3, 4, 4)})
    # BatchNorm folded into the Conv, Identity removed, Relu fused as the Conv's epilogue
    assert ops(model) == ["Fused_Conv_Relu"]
    assert [line.split(":")[0] for line in lines] == [name for name, _ in PIPELINE]
    assert "winograd_conv: not run" in "\n".join(lines)
    model = check_pass(lambda m: run_passes(m, disabled=["fuse_epilogue", "fuse_elementwise"]),
                       _conv_bn_model(tmp_path), {"x": rand(1, 3, 4, 4)})
    assert ops(model) == ["Conv", "Relu"]


def test_run_passes_disable_and_unknown(tmp_path):
    model = run_passes(_conv_bn_model(tmp_path), disabled=["fold_batchnorm"])
    assert "BatchNormalization" in ops(model)
    with pytest.raises(AotcError, match="fuse_everything"):
        run_passes(model, disabled=["fuse_everything"])
