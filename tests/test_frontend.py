"""aotc.frontend: loading, opset normalisation, binding, shape folding — checked with onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from aotc.errors import AotcError
from aotc.frontend import (
    CANONICAL_OPSET,
    load_model,
    parse_input_shapes,
    read_model,
    unbound_dims,
)

F = TensorProto.FLOAT
RNG = np.random.default_rng(0)


# ---------------------------------------------------------------- helpers

def make_model(nodes, inputs, outputs, inits=(), opset=CANONICAL_OPSET, functions=(),
               ir_version=None, extra_opsets=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    opsets = [helper.make_opsetid("", opset), *extra_opsets]
    model = helper.make_model(graph, opset_imports=opsets, functions=list(functions))
    model.ir_version = ir_version or min(max(helper.find_min_ir_version_for(opsets, True), 7), 10)
    if any(not o.type.tensor_type.HasField("shape") for o in graph.output):
        inferred = onnx.shape_inference.infer_shapes(model).graph.output
        for out, done in zip(model.graph.output, inferred, strict=True):
            if not out.type.tensor_type.HasField("shape"):
                out.CopyFrom(done)
    return model


def vi(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def save(model: onnx.ModelProto, tmp_path, name="m.onnx") -> str:
    path = str(tmp_path / name)
    onnx.save(model, path)
    return path


def ort_run(model: onnx.ModelProto | ir.Model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    if isinstance(model, ir.Model):
        ir.external_data.load_to_model(model)
        model = ir.to_proto(model)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def all_values(model: ir.Model):
    g = model.graph
    yield from g.inputs
    yield from g.initializers.values()
    for node in ir.traversal.RecursiveGraphIterator(g):
        yield from node.outputs


def assert_static(model: ir.Model) -> None:
    for v in all_values(model):
        assert v.dtype is not None, v
        assert v.shape is not None and all(isinstance(d, int) for d in v.shape.dims), v


def assert_same(proto: onnx.ModelProto, loaded: ir.Model, feeds, atol=1e-5) -> None:
    want = ort_run(proto, feeds)
    got = ort_run(loaded, feeds)
    assert len(want) == len(got)
    for w, g in zip(want, got, strict=True):
        assert w.shape == g.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=atol)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------- opset normalisation

def _case_squeeze_unsqueeze():
    nodes = [helper.make_node("Unsqueeze", ["x"], ["u"], axes=[0, 3]),
             helper.make_node("Squeeze", ["u"], ["y"], axes=[0])]
    return nodes, [vi("x", [2, 3])], [vi("y", None)], [], {"x": rand(2, 3)}


def _case_reduce(with_sum=True):
    ops = ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2"]
    ops = [op for op in ops if with_sum or op != "ReduceSum"]
    nodes = [helper.make_node(op, ["x"], [f"y{i}"], axes=[1], keepdims=i % 2)
             for i, op in enumerate(ops)]
    nodes.append(helper.make_node("ReduceMean", ["x"], ["all"], keepdims=0))
    outs = [vi(f"y{i}", None) for i in range(len(ops))] + [vi("all", None)]
    return nodes, [vi("x", [2, 3, 4])], outs, [], {"x": rand(2, 3, 4)}


def _case_split():
    nodes = [helper.make_node("Split", ["x"], ["a", "b"], axis=1, split=[2, 4]),
             helper.make_node("Split", ["x"], ["c", "d", "e"], axis=1)]
    outs = [vi(n, None) for n in "abcde"]
    return nodes, [vi("x", [2, 6])], outs, [], {"x": rand(2, 6)}


def _case_clip():
    nodes = [helper.make_node("Clip", ["x"], ["y"], min=-0.5, max=0.25),
             helper.make_node("Clip", ["x"], ["z"], min=0.0)]
    return nodes, [vi("x", [3, 4])], [vi("y", None), vi("z", None)], [], {"x": rand(3, 4)}


def _case_pad():
    nodes = [helper.make_node("Pad", ["x"], ["y"], pads=[0, 1, 2, 0, 2, 1], value=1.5),
             helper.make_node("Pad", ["x"], ["z"], pads=[0, 0, 1, 0, 0, 2], mode="reflect")]
    return nodes, [vi("x", [1, 3, 4])], [vi("y", None), vi("z", None)], [], {"x": rand(1, 3, 4)}


def _case_slice():
    nodes = [helper.make_node("Slice", ["x"], ["y"], starts=[1, 0], ends=[3, 100], axes=[0, 2]),
             helper.make_node("Slice", ["x"], ["z"], starts=[0, 1], ends=[-1, 3])]
    return nodes, [vi("x", [4, 5, 6])], [vi("y", None), vi("z", None)], [], {"x": rand(4, 5, 6)}


def _case_topk():
    nodes = [helper.make_node("TopK", ["x"], ["v", "i"], k=2, axis=1)]
    outs = [vi("v", None), vi("i", None, TensorProto.INT64)]
    return nodes, [vi("x", [3, 5])], outs, [], {"x": rand(3, 5)}


def _case_batchnorm():
    c = 3
    inits = [init("s", rand(c) + 2), init("b", rand(c)), init("m", rand(c)),
             init("v", np.abs(rand(c)) + 0.5)]
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"],
                              epsilon=1e-3, spatial=1)]
    return nodes, [vi("x", [2, c, 4, 4])], [vi("y", None)], inits, {"x": rand(2, c, 4, 4)}


def _case_dropout():
    nodes = [helper.make_node("Dropout", ["x"], ["d", "mask"], ratio=0.3),
             helper.make_node("Relu", ["d"], ["y"])]
    return nodes, [vi("x", [2, 3])], [vi("y", None)], [], {"x": rand(2, 3)}


def _case_softmax():
    nodes = [helper.make_node("Softmax", ["x"], ["a"], axis=1),
             helper.make_node("LogSoftmax", ["x"], ["b"], axis=2),
             helper.make_node("Softmax", ["x"], ["c"]),
             helper.make_node("Hardmax", ["x"], ["d"], axis=0)]
    outs = [vi(n, None) for n in "abcd"]
    return nodes, [vi("x", [2, 3, 4])], outs, [], {"x": rand(2, 3, 4)}


def _case_upsample7():
    nodes = [helper.make_node("Upsample", ["x"], ["y"], scales=[1.0, 1.0, 2.0, 3.0]),
             helper.make_node("Upsample", ["x"], ["z"], scales=[1.0, 1.0, 2.0, 2.0],
                              mode="linear")]
    return nodes, [vi("x", [1, 2, 3, 4])], [vi("y", None), vi("z", None)], [], \
        {"x": rand(1, 2, 3, 4)}


def _case_upsample9():
    nodes = [helper.make_node("Upsample", ["x", "sc"], ["y"], mode="nearest")]
    inits = [init("sc", np.array([1, 1, 2, 2], np.float32))]
    return nodes, [vi("x", [1, 2, 3, 4])], [vi("y", None)], inits, {"x": rand(1, 2, 3, 4)}


def _case_resize10():
    inits = [init("sc", np.array([1, 1, 2, 1.5], np.float32))]
    nodes = [helper.make_node("Resize", ["x", "sc"], ["y"], mode="nearest"),
             helper.make_node("Resize", ["x", "sc"], ["z"], mode="linear")]
    return nodes, [vi("x", [1, 2, 3, 4])], [vi("y", None), vi("z", None)], inits, \
        {"x": rand(1, 2, 3, 4)}


def _case_resize11():
    inits = [init("roi", np.zeros(0, np.float32)), init("sc", np.zeros(0, np.float32)),
             init("sz", np.array([1, 2, 5, 7], np.int64)),
             init("sc2", np.array([1, 1, 2, 2], np.float32))]
    nodes = [helper.make_node("Resize", ["x", "roi", "sc", "sz"], ["y"], mode="linear",
                              coordinate_transformation_mode="align_corners"),
             helper.make_node("Resize", ["x", "roi", "sc2"], ["z"], mode="nearest")]
    return nodes, [vi("x", [1, 2, 3, 4])], [vi("y", None), vi("z", None)], inits, \
        {"x": rand(1, 2, 3, 4)}


def _case_misc12():
    w = rand(4, 3, 3, 3)
    inits = [init("w", w), init("gw", rand(5, 36)), init("shape", np.array([2, -1], np.int64))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Reshape", ["p", "shape"], ["f"]),
             helper.make_node("Gemm", ["f", "gw"], ["y"], transB=1)]
    return nodes, [vi("x", [2, 3, 6, 6])], [vi("y", None)], inits, {"x": rand(2, 3, 6, 6)}


def _case_stays20():
    inits = [init("g", rand(4)), init("b", rand(4))]
    nodes = [helper.make_node("Gelu", ["x"], ["a"], approximate="tanh"),
             helper.make_node("LayerNormalization", ["a", "g", "b"], ["y"], axis=-1)]
    return nodes, [vi("x", [2, 4])], [vi("y", None)], inits, {"x": rand(2, 4)}


def _case_groupnorm18():
    inits = [init("s", rand(2)), init("b", rand(2))]
    nodes = [helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)]
    return nodes, [vi("x", [2, 4, 3])], [vi("y", [2, 4, 3])], inits, {"x": rand(2, 4, 3)}


def _case_downgrade22():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Sin", ["r"], ["y"])]
    return nodes, [vi("x", [2, 3])], [vi("y", None)], [], {"x": rand(2, 3)}


def _case_scatter():
    inits = [init("idx", np.array([[1, 0, 2], [0, 2, 1]], np.int64)), init("upd", rand(2, 3))]
    nodes = [helper.make_node("Scatter", ["x", "idx", "upd"], ["y"], axis=0)]
    return nodes, [vi("x", [3, 3])], [vi("y", [3, 3])], inits, {"x": rand(3, 3)}


def _case_grid_sample():
    grid = RNG.uniform(-1, 1, (1, 3, 4, 2)).astype(np.float32)
    nodes = [helper.make_node("GridSample", ["x", "grid"], ["y"], mode="bilinear"),
             helper.make_node("GridSample", ["x", "grid"], ["z"], mode="nearest")]
    outs = [vi("y", [1, 2, 3, 4]), vi("z", [1, 2, 3, 4])]
    return nodes, [vi("x", [1, 2, 5, 5])], outs, [init("grid", grid)], {"x": rand(1, 2, 5, 5)}


OPSET_CASES = {
    "squeeze_unsqueeze@11": (_case_squeeze_unsqueeze, 11),
    "reduce@11": (_case_reduce, 11),
    "reduce@13": (lambda: _case_reduce(with_sum=False), 13),
    "split@11": (_case_split, 11),
    "clip@9": (_case_clip, 9),
    "pad@9": (_case_pad, 9),
    "slice@9": (_case_slice, 9),
    "topk@9": (_case_topk, 9),
    "batchnorm@7": (_case_batchnorm, 7),
    "dropout@9": (_case_dropout, 9),
    "softmax@11": (_case_softmax, 11),
    "upsample@7": (_case_upsample7, 7),
    "upsample@9": (_case_upsample9, 9),
    "resize@10": (_case_resize10, 10),
    "resize@11": (_case_resize11, 11),
    "misc@12": (_case_misc12, 12),
    "gelu_layernorm@20": (_case_stays20, 20),
    "groupnorm@18": (_case_groupnorm18, 18),
    "relu_sin@22": (_case_downgrade22, 22),
    "scatter@9": (_case_scatter, 9),
    "grid_sample@16": (_case_grid_sample, 16),
}


@pytest.mark.parametrize("case", sorted(OPSET_CASES))
def test_opset_normalisation(case, tmp_path):
    build, opset = OPSET_CASES[case]
    nodes, inputs, outputs, inits, feeds = build()
    proto = make_model(nodes, inputs, outputs, inits, opset=opset)
    loaded = load_model(save(proto, tmp_path))
    assert loaded.opset_imports[""] == CANONICAL_OPSET
    assert all(n.version is None for n in loaded.graph)
    onnx.checker.check_model(ir.to_proto(loaded), full_check=True)
    assert_static(loaded)
    assert_same(proto, loaded, feeds)


def test_opset_rules_shape_the_nodes(tmp_path):
    nodes, inputs, outputs, inits, _ = _case_softmax()
    loaded = load_model(save(make_model(nodes, inputs, outputs, inits, opset=11), tmp_path))
    ops = [n.op_type for n in loaded.graph]
    assert "Flatten" in ops and "Reshape" in ops  # axis 1 and 0 of a rank-3 input
    nodes, inputs, outputs, inits, _ = _case_upsample9()
    loaded = load_model(save(make_model(nodes, inputs, outputs, inits, opset=9), tmp_path))
    (resize,) = list(loaded.graph)
    assert resize.op_type == "Resize"
    assert resize.attributes["coordinate_transformation_mode"].value == "asymmetric"


def test_unconvertible_operator_is_reported(tmp_path):
    # Upsample-7 in "bilinear"-less mode is fine, but legacy broadcasting with an axis is not.
    nodes = [helper.make_node("Add", ["x", "b"], ["y"], broadcast=1, axis=0)]
    proto = make_model(nodes, [vi("x", [2, 3]), vi("b", [2])], [vi("y", [2, 3])], opset=6,
                       ir_version=3)
    path = save(proto, tmp_path)
    with pytest.raises(AotcError) as err:
        load_model(path)
    assert err.value.op == "Add" and path in str(err.value)


# ---------------------------------------------------------------- loading

def test_external_data(tmp_path):
    w = rand(64, 32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    proto = make_model(nodes, [vi("x", [2, 64])], [vi("y", None)], [init("w", w)])
    path = str(tmp_path / "ext.onnx")
    onnx.save_model(proto, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="ext.bin", size_threshold=0)
    assert (tmp_path / "ext.bin").is_file()
    loaded = load_model(path)
    x = rand(2, 64)
    np.testing.assert_allclose(ort_run(loaded, {"x": x})[0], x @ w, rtol=1e-5, atol=1e-5)

    (tmp_path / "ext.bin").unlink()
    with pytest.raises(AotcError) as err:
        load_model(path)
    assert "ext" in str(err.value)


def _external_model(tmp_path, location: str, data: bytes | None = None) -> str:
    """ext.onnx whose weight w (64x32 float32) lies in `location`; `data` replaces its bytes."""
    w = rand(64, 32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    proto = make_model(nodes, [vi("x", [2, 64])], [vi("y", None)], [init("w", w)])
    onnx.save_model(proto, str(tmp_path / "ext.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="ext.bin", size_threshold=0)
    if data is not None:
        (tmp_path / "ext.bin").write_bytes(data)
    model = onnx.load(str(tmp_path / "ext.onnx"), load_external_data=False)
    for e in model.graph.initializer[0].external_data:
        if e.key == "location":
            e.value = location
    onnx.save(model, str(tmp_path / "ext.onnx"))
    return str(tmp_path / "ext.onnx")


@pytest.mark.parametrize("location, needle", [
    ("/etc/passwd", "relative"),
    ("../../../../etc/passwd", "outside the model's folder"),
    ("sub/../../secret.bin", "outside the model's folder"),
    ("link.bin", "outside the model's folder"),  # a symbolic link to a file elsewhere
])
def test_external_data_must_stay_inside_the_folder(tmp_path, location, needle):
    """A model may not make aotc read a file outside its folder (a security check)."""
    secret = tmp_path.parent / f"{tmp_path.name}_secret.bin"
    secret.write_bytes(b"\0" * 64 * 32 * 4)
    (tmp_path / "link.bin").symlink_to(secret)
    path = _external_model(tmp_path, location)
    with pytest.raises(AotcError, match=needle) as err:
        load_model(path)
    assert "'w'" in str(err.value) and "ext.onnx" in str(err.value)


def test_truncated_external_data_is_reported(tmp_path):
    path = _external_model(tmp_path, "ext.bin", data=b"\0" * 1000)
    with pytest.raises(AotcError, match="truncated") as err:
        load_model(path)
    assert "'w'" in str(err.value) and "1000 bytes" in str(err.value)


def test_initializers_listed_as_inputs_are_dropped(tmp_path):
    nodes = [helper.make_node("Add", ["x", "b"], ["y"])]
    proto = make_model(nodes, [vi("x", [2, 3]), vi("b", [3])], [vi("y", None)],
                       [init("b", rand(3))], opset=9, ir_version=3)
    loaded = load_model(save(proto, tmp_path))
    assert [v.name for v in loaded.graph.inputs] == ["x"]
    assert "b" in loaded.graph.initializers


def test_malformed_file(tmp_path):
    path = tmp_path / "bad.onnx"
    path.write_bytes(b"\x08\x07garbage that is not a protobuf \xff\xff\xff")
    with pytest.raises(AotcError) as err:
        load_model(path)
    assert "bad.onnx" in str(err.value)
    with pytest.raises(AotcError, match="no such file"):
        load_model(tmp_path / "missing.onnx")


def test_checker_failure_names_the_file(tmp_path):
    nodes = [helper.make_node("Relu", ["nowhere"], ["y"])]
    proto = make_model(nodes, [vi("x", [2])], [vi("y", [2])])
    path = save(proto, tmp_path, "broken.onnx")
    with pytest.raises(AotcError) as err:
        load_model(path)
    assert err.value.file == path and "not a valid ONNX model" in err.value.message


def test_function_inlining(tmp_path):
    fn = helper.make_function(
        "local", "Block", ["a"], ["b"],
        [helper.make_node("Constant", [], ["two"], value_float=2.0),
         helper.make_node("Mul", ["a", "two"], ["m"]),
         helper.make_node("ReduceSum", ["m"], ["s"], axes=[1], keepdims=1),
         helper.make_node("Sub", ["m", "s"], ["b"])],
        opset_imports=[helper.make_opsetid("", 11)])
    nodes = [helper.make_node("Block", ["x"], ["h"], domain="local"),
             helper.make_node("Block", ["h"], ["y"], domain="local")]
    proto = make_model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])], opset=13, functions=[fn],
                       extra_opsets=[helper.make_opsetid("local", 1)])
    loaded = load_model(save(proto, tmp_path))
    assert not loaded.functions
    assert all(n.domain == "" for n in loaded.graph)
    x = rand(2, 3)
    m = 2 * x
    h = m - m.sum(1, keepdims=True)
    m2 = 2 * h
    np.testing.assert_allclose(ort_run(loaded, {"x": x})[0], m2 - m2.sum(1, keepdims=True),
                               rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- binding

def _dynamic_model():
    inits = [init("w", rand(3, 4))]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    return make_model(nodes, [vi("x", ["batch", "seq", 3])], [vi("y", ["batch", "seq", 4])], inits)


def test_parse_input_shapes():
    assert parse_input_shapes(["x=1,3,224,224", "mask:0=2"]) == {
        "x": (1, 3, 224, 224), "mask:0": (2,)}
    for bad in ["x", "x=", "x=1,,2", "x=a,b", "=1,2", "x=0,3", "x=-1"]:
        with pytest.raises(AotcError):
            parse_input_shapes([bad])
    with pytest.raises(AotcError, match="twice"):
        parse_input_shapes(["x=1", "x=2"])


def test_bind_input_shapes(tmp_path):
    path = save(_dynamic_model(), tmp_path)
    loaded = load_model(path, {"x": (2, 5, 3)})
    assert_static(loaded)
    assert tuple(loaded.graph.outputs[0].shape.dims) == (2, 5, 4)
    assert unbound_dims(read_model(path)) == [("x", 0, "batch"), ("x", 1, "seq")]


@pytest.mark.parametrize("shapes, needle", [
    (None, "--input-shape x="),
    ({"x": (2, 5)}, "rank 3"),
    ({"y": (2, 5, 3)}, "'y'"),
    ({"x": (2, 5, 4)}, "axis 2 is 4"),
    ({"x": (0, 5, 3)}, "positive"),
])
def test_binding_errors(tmp_path, shapes, needle):
    path = save(_dynamic_model(), tmp_path)
    with pytest.raises(AotcError) as err:
        load_model(path, shapes)
    text = str(err.value)
    assert needle in text and path in text


def test_unbound_error_names_input_and_axis(tmp_path):
    path = save(_dynamic_model(), tmp_path)
    with pytest.raises(AotcError) as err:
        load_model(path, None)
    text = str(err.value)
    assert "input 'x' axis 0 ('batch')" in text and "input 'x' axis 1 ('seq')" in text


def test_a_dimension_written_as_minus_one_is_unknown(tmp_path):
    """Paddle-style exports write -1 for an unknown dimension in inputs, outputs and value_info;
    onnxruntime reads it as unknown, and so does aotc (onnx's inference would clash with it)."""
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Flatten", ["a"], ["b"], axis=1),
             helper.make_node("MatMul", ["b", "w"], ["y"])]
    w = init("w", RNG.standard_normal((6, 4)).astype(np.float32))
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, [-1, 2, 3])],
                       [helper.make_tensor_value_info("y", F, [-1, 4])], [w])
    model.graph.value_info.extend([helper.make_tensor_value_info("a", F, [-1, 2, 3]),
                                   helper.make_tensor_value_info("b", F, [-1, 6])])
    path = save(model, tmp_path)
    assert [(name, axis) for name, axis, _ in unbound_dims(read_model(path))] == [("x", 0)]
    loaded = load_model(path, {"x": (5, 2, 3)})
    assert_static(loaded)
    assert_same(model, loaded, {"x": RNG.standard_normal((5, 2, 3)).astype(np.float32)})


# ---------------------------------------------------------------- shapes and folding

def test_shape_chain_folds_to_constant_reshape(tmp_path):
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Constant", [], ["i0"], value=init("i0", np.array(0, np.int64))),
        helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    inits = [init("ax", np.array([0], np.int64)), init("minus1", np.array([-1], np.int64))]
    proto = make_model(nodes, [vi("x", ["N", 3, 4])], [vi("y", None)], inits)
    loaded = load_model(save(proto, tmp_path), {"x": (2, 3, 4)})
    assert [n.op_type for n in loaded.graph] == ["Reshape"]
    (reshape,) = list(loaded.graph)
    assert reshape.inputs[1].is_initializer()
    assert reshape.inputs[1].const_value.numpy().tolist() in ([2, 12], [2, -1])
    assert_static(loaded)
    x = rand(2, 3, 4)
    np.testing.assert_array_equal(ort_run(loaded, {"x": x})[0], x.reshape(2, 12))


def test_if_with_constant_condition_is_inlined(tmp_path):
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                               [vi("t", [None, 3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [vi("e", [None, 3])])
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], start=0, end=1),
        helper.make_node("Equal", ["s", "two"], ["c1"]),
        helper.make_node("Squeeze", ["c1"], ["cond"]),
        helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g),
    ]
    proto = make_model(nodes, [vi("x", ["N", 3])], [vi("y", None)],
                       [init("two", np.array([2], np.int64))])
    path = save(proto, tmp_path)
    for n, op in [(2, "Relu"), (3, "Neg")]:
        loaded = load_model(path, {"x": (n, 3)})
        assert [node.op_type for node in loaded.graph] == [op]
        assert loaded.graph.outputs[0].name == "y"
        assert_static(loaded)
        x = rand(n, 3)
        np.testing.assert_array_equal(ort_run(loaded, {"x": x})[0], ort_run(proto, {"x": x})[0])


def test_data_dependent_shape_names_the_node(tmp_path):
    nodes = [helper.make_node("NonZero", ["x"], ["nz"], name="find"),
             helper.make_node("Transpose", ["nz"], ["y"])]
    proto = make_model(nodes, [vi("x", [3, 4])], [vi("y", None, TensorProto.INT64)])
    with pytest.raises(AotcError) as err:
        load_model(save(proto, tmp_path))
    assert err.value.node == "find" and err.value.op == "NonZero"


def test_a_declared_output_shape_the_inputs_contradict_is_inferred_anew(tmp_path):
    """onnxmltools declares a classifier's labels as [1] whatever the batch; onnxruntime runs
    such a model, and so does aotc, with the shape the inputs give."""
    nodes = [helper.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=0)]
    proto = make_model(nodes, [vi("x", ["N", 4])], [vi("y", [1], TensorProto.INT64)])
    model = load_model(save(proto, tmp_path), {"x": (3, 4)})
    assert list(model.graph.outputs[0].shape) == [3]


def test_an_input_declared_apart_from_its_initializer_is_an_error(tmp_path):
    nodes = [helper.make_node("Add", ["x", "b"], ["y"])]
    proto = make_model(nodes, [vi("x", [2, 4]), vi("b", [1])], [vi("y", [2, 4])],
                       [init("b", rand(2, 4))])
    with pytest.raises(AotcError, match="input 'b' is declared \\[1\\], but its initializer"):
        load_model(save(proto, tmp_path))


def test_shape_mismatch_from_binding_is_an_error(tmp_path):
    nodes = [helper.make_node("Add", ["x", "b"], ["y"])]
    proto = make_model(nodes, [vi("x", ["N", 4])], [vi("y", ["N", 4])], [init("b", rand(3, 4))])
    with pytest.raises(AotcError, match="shape inference failed"):
        load_model(save(proto, tmp_path), {"x": (2, 4)})
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="r")]
    proto = make_model(nodes, [vi("x", ["N", 4])], [vi("y", [3, 4])],
                       [init("shape", np.array([3, 4], np.int64))])
    with pytest.raises(AotcError) as err:
        load_model(save(proto, tmp_path), {"x": (2, 4)})
    assert err.value.node == "r"


# ---------------------------------------------------------------- PyTorch exports

def _torch_model():
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(4)
            self.fc = torch.nn.Linear(4 * 4 * 4, 5)

        def forward(self, x):
            h = torch.relu(self.bn(self.conv(x)))
            h = torch.nn.functional.max_pool2d(h, 2)
            h = h.view(x.size(0), -1)
            return torch.softmax(self.fc(h), dim=-1) * x.shape[0]

    torch.manual_seed(0)
    return torch, Net().eval()


@pytest.mark.torch
@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")
@pytest.mark.parametrize("dynamo", [False, True])
def test_torch_export_with_dynamic_batch(tmp_path, dynamo):
    torch, net = _torch_model()
    path = str(tmp_path / "net.onnx")
    x = torch.randn(2, 3, 8, 8)
    if dynamo:
        torch.onnx.export(net, (x,), path, dynamo=True, input_names=["x"], output_names=["y"],
                          dynamic_shapes={"x": {0: torch.export.Dim("batch")}}, verbose=False)
    else:
        torch.onnx.export(net, (x,), path, dynamo=False, input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    with pytest.raises(AotcError, match="--input-shape"):
        load_model(path)
    loaded = load_model(path, {"x": (3, 3, 8, 8)})
    assert_static(loaded)
    assert loaded.opset_imports[""] == CANONICAL_OPSET
    assert not any(n.op_type in ("Shape", "Gather", "Concat") for n in loaded.graph)
    x3 = torch.randn(3, 3, 8, 8)
    with torch.no_grad():
        want = net(x3).numpy()
    got = ort_run(loaded, {"x": x3.numpy()})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_new_initializer_names_are_fresh():
    """A second initializer under a taken name is numbered (`w_2`), never overwrites."""
    from aotc.frontend.irutil import new_initializer

    graph = ir.Graph([], [], nodes=[], name="g")
    first = new_initializer(graph, np.zeros(2, np.float32), "w")
    second = new_initializer(graph, np.ones(3, np.float32), "w")
    assert (first.name, second.name) == ("w", "w_2")
    assert graph.initializers["w"].const_value.numpy().shape == (2,)


def test_new_initializer_keeps_a_scalar_scalar():
    from aotc.frontend.irutil import new_initializer

    graph = ir.Graph([], [], nodes=[])
    value = new_initializer(graph, np.array(3.0, np.float32), "s")
    assert value.shape == ir.Shape([]) and value.const_value.numpy().shape == ()


def test_undefined_element_type_names_the_value(tmp_path):
    """onnx.checker lets an element type of 99 through; aotc names the value."""
    proto = make_model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", [2])])
    proto.graph.output[0].type.tensor_type.elem_type = 99
    with pytest.raises(AotcError, match="value 'y' has element type 99"):
        load_model(save(proto, tmp_path))


def test_a_name_that_is_not_text_is_named(tmp_path):
    """protobuf keeps a name that is not UTF-8 as bytes; onnx_ir then failed without a name."""
    proto = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu_node")],
                       [vi("x", [2])], [vi("y", [2])])
    path = tmp_path / "bad.onnx"
    path.write_bytes(proto.SerializeToString().replace(b"relu_node", b"relu_nod\xff"))
    with pytest.raises(AotcError, match="Node's name 'relu_nod.' is not UTF-8 text"):
        load_model(str(path))


def test_absurd_declared_sizes_are_refused_before_inference(tmp_path):
    """A declared tensor over 4 GiB, a Slice given 2^31 axes, or an --input-shape that binds
    one, are user errors found before onnx's shape inference (which ran for minutes)."""
    nodes = [helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"],
                              name="cut")]
    inputs = [vi("x", [4, 4]), *(vi(n, [2**31], TensorProto.INT64)
                                 for n in ("starts", "ends", "axes", "steps"))]
    proto = make_model(nodes, inputs, [vi("y", None)])
    with pytest.raises(AotcError, match="'starts' is declared .2147483648.: 16 GiB"):
        load_model(save(proto, tmp_path))
    inputs[1:] = [vi(n, [1000], TensorProto.INT64) for n in ("starts", "ends", "axes", "steps")]
    proto = make_model(nodes, inputs, [vi("y", None)])
    with pytest.raises(AotcError, match="holds a value per axis") as err:
        load_model(save(proto, tmp_path))
    assert err.value.node == "cut"
    with pytest.raises(AotcError, match="--input-shape x would be .*GiB"):
        load_model(save(_dynamic_model(), tmp_path), {"x": (2**15, 2**15, 3)})


def test_empty_variadic_input_is_refused(tmp_path):
    """Concat(x, '') passed onnx.checker; onnxscript then folded it to Identity(x) under the
    declared output shape [2, 4], and the bundle copied 8 floats out of a 4-float input."""
    nodes = [helper.make_node("Concat", ["x", ""], ["y"], axis=1, name="cat")]
    proto = make_model(nodes, [vi("x", [2, 2])], [vi("y", [2, 4])])
    with pytest.raises(AotcError, match="input 1 of Concat is empty") as err:
        load_model(save(proto, tmp_path))
    assert err.value.node == "cat"


def test_a_view_must_keep_its_inputs_bytes():
    """The compiler's own check behind it: an alias whose declared shape holds more elements
    than its input is an error naming the node (not an out-of-bounds copy)."""
    from aotc.compiler import compile_model
    from targets.cpu.target import get_target

    x = ir.Value(name="x", shape=ir.Shape([2, 2]), type=ir.TensorType(ir.DataType.FLOAT))
    node = ir.node("Identity", [x], name="id")
    y = node.outputs[0]
    y.name, y.shape, y.type = "y", ir.Shape([2, 4]), ir.TensorType(ir.DataType.FLOAT)
    graph = ir.Graph([x], [y], nodes=[node], opset_imports={"": CANONICAL_OPSET})
    with pytest.raises(AotcError, match="'y' is float32.2, 4., a view of input 'x'"):
        compile_model(ir.Model(graph, ir_version=10), get_target("cpu-avx2"))
