"""`aotc optimize --emit ort`: the rewritten model and the custom-op library inside onnxruntime.

Every model runs three ways on the same inputs: onnxruntime on the original, onnxruntime on the
rewritten model with the library registered (aotc's kernels run the islands; the profile shows
the islands' custom ops ran), and without it (onnxruntime inlines the islands' functions).
"""

from __future__ import annotations

import itertools
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from model_zoo import SAMPLE_MODELS, random_inputs  # noqa: E402

from aotc.driver import emit_ort  # noqa: E402

RNG = np.random.default_rng(3)
_SESSIONS = itertools.count()


def _rand(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * 0.3).astype(np.float32)


def lstm_in_the_middle(path: pathlib.Path, middle: str = "lstm") -> pathlib.Path:
    """MatMul+Relu, an LSTM, then MatMul+Add+Sigmoid. With `middle="contrib"` the LSTM is an
    operator aotc does not compile and onnxruntime runs, reading initializers: onnxruntime's
    contrib FusedMatMul (com.microsoft)."""
    h = 12
    if middle == "lstm":
        mid = [helper.make_node("LSTM", ["bt", "W", "R", "B"], ["Y"], hidden_size=h,
                                name="lstm")]
        weights = [("W", _rand(1, 4 * h, 16)), ("R", _rand(1, 4 * h, h)), ("B", _rand(1, 8 * h))]
    else:
        mid = [helper.make_node("FusedMatMul", ["bt", "W"], ["y3"], domain="com.microsoft",
                                alpha=1.0, name="contrib"),
               helper.make_node("Unsqueeze", ["y3", "ax"], ["Y"], name="unsq")]
        weights = [("W", _rand(16, h))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"], name="mm1"),
             helper.make_node("Relu", ["a"], ["b"], name="relu1"),
             helper.make_node("Transpose", ["b"], ["bt"], perm=[1, 0, 2], name="tr"),
             *mid,
             helper.make_node("Squeeze", ["Y", "ax"], ["ys"], name="sq"),
             helper.make_node("MatMul", ["ys", "w2"], ["c"], name="mm2"),
             helper.make_node("Add", ["c", "bias"], ["d"], name="add"),
             helper.make_node("Sigmoid", ["d"], ["y"], name="sig")]
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("w1", _rand(16, 16)), *weights, ("ax", np.array([1], np.int64)), ("w2", _rand(h, 5)),
        ("bias", _rand(5))]]
    graph = helper.make_graph(nodes, "lstm_mid",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 1, 5])],
                              inits)
    if middle != "lstm":  # (onnx's shape inference does not know contrib operators)
        graph.value_info.append(helper.make_tensor_value_info("y3", TensorProto.FLOAT,
                                                              [8, 1, h]))
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    onnx.save(helper.make_model(graph, opset_imports=opsets), path)
    return path


def nonzero_in_the_middle(path: pathlib.Path) -> pathlib.Path:
    """A data-dependent shape (NonZero) between two compiled parts."""
    nodes = [helper.make_node("Mul", ["x", "two"], ["a"], name="mul"),
             helper.make_node("Relu", ["a"], ["b"], name="relu"),
             helper.make_node("NonZero", ["b"], ["nz"], name="nz"),
             helper.make_node("Cast", ["nz"], ["nzf"], to=TensorProto.FLOAT, name="cast"),
             helper.make_node("ReduceSum", ["nzf"], ["s"], keepdims=0, name="rs"),
             helper.make_node("Exp", ["b"], ["e"], name="exp"),
             helper.make_node("Add", ["e", "s"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "nonzero",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6])],
                              [numpy_helper.from_array(np.array(2.0, np.float32), "two")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def loop_in_the_middle(path: pathlib.Path) -> pathlib.Path:
    """MatMul+Relu, a Loop (left to onnxruntime) whose body reads the MatMul's weight from the
    outer scope, then Sigmoid."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("MatMul", ["v_in", "w"], ["mm"]),
         helper.make_node("Mul", ["mm", "half"], ["v_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [4, 8])],
        [numpy_helper.from_array(np.array(0.5, np.float32), "half")])
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"], name="mm"),
             helper.make_node("Relu", ["a"], ["b"], name="relu"),
             helper.make_node("Loop", ["trips", "", "b"], ["c"], body=body, name="loop"),
             helper.make_node("Sigmoid", ["c"], ["y"], name="sig")]
    graph = helper.make_graph(
        nodes, "loop_mid", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [numpy_helper.from_array(_rand(8, 8), "w"),
         numpy_helper.from_array(np.array(3, np.int64), "trips")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def if_in_the_middle(path: pathlib.Path) -> pathlib.Path:
    """MatMul+Relu, an If on a condition computed from the data (left to onnxruntime) whose
    branches read the island's output and a weight from the outer scope, then Tanh."""
    def branch(op: str) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node(op, ["b", "v"], ["r"])], op,
                                 [], [helper.make_tensor_value_info("r", TensorProto.FLOAT,
                                                                    [4, 8])])
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"], name="mm"),
             helper.make_node("Relu", ["a"], ["b"], name="relu"),
             helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="sum"),
             helper.make_node("Greater", ["s", "zero"], ["cond"], name="gt"),
             helper.make_node("If", ["cond"], ["c"], then_branch=branch("Add"),
                              else_branch=branch("Sub"), name="if"),
             helper.make_node("Tanh", ["c"], ["y"], name="tanh")]
    graph = helper.make_graph(
        nodes, "if_mid", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [numpy_helper.from_array(_rand(8, 8), "w"), numpy_helper.from_array(_rand(8), "v"),
         numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def nms_in_the_middle(path: pathlib.Path) -> pathlib.Path:
    """Scores from MatMul+Sigmoid feed NonMaxSuppression (left to onnxruntime; its output's
    length depends on the data) and a compiled Exp."""
    n, classes = 16, 3
    nodes = [helper.make_node("MatMul", ["feat", "w"], ["logits"], name="mm"),
             helper.make_node("Sigmoid", ["logits"], ["prob"], name="sig"),
             helper.make_node("Transpose", ["prob"], ["scores"], perm=[0, 2, 1], name="tr"),
             helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "thr"],
                              ["selected"], name="nms"),
             helper.make_node("Exp", ["scores"], ["e"], name="exp")]
    graph = helper.make_graph(
        nodes, "nms_mid",
        [helper.make_tensor_value_info("feat", TensorProto.FLOAT, [1, n, 8]),
         helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, n, 4])],
        [helper.make_tensor_value_info("selected", TensorProto.INT64, ["k", 3]),
         helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, classes, n])],
        [numpy_helper.from_array(_rand(8, classes), "w"),
         numpy_helper.from_array(np.array([5], np.int64), "max_out"),
         numpy_helper.from_array(np.array([0.5], np.float32), "iou"),
         numpy_helper.from_array(np.array([0.3], np.float32), "thr")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _session(model: pathlib.Path, library: pathlib.Path | None, profile: bool = False,
             config: dict[str, str] | None = None) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.enable_profiling = profile
    # in the model's folder, one name per session (two may start in the same millisecond)
    so.profile_file_prefix = str(model.parent / f"profile_{next(_SESSIONS)}")
    for k, v in (config or {}).items():
        so.add_session_config_entry(k, v)
    if library is not None:
        so.register_custom_ops_library(str(library))
    return ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])


def _ops_run(sess: ort.InferenceSession) -> set[str]:
    trace = pathlib.Path(sess.end_profiling())
    events = json.loads(trace.read_text())
    trace.unlink()
    return {e["args"]["op_name"] for e in events
            if e.get("cat") == "Node" and "op_name" in e.get("args", {})}


def check_three_ways(original: pathlib.Path, out: pathlib.Path,
                     shapes: dict[str, tuple[int, ...]] | None = None,
                     feed: dict[str, np.ndarray] | None = None) -> tuple:
    """`emit_ort` on `original`, then the rewritten model with and without the library against
    onnxruntime on the original (on `feed`, default seeded random inputs)."""
    binding = [f"{k}={','.join(map(str, v))}" for k, v in (shapes or {}).items()]
    result = emit_ort(original, out, input_shapes=binding, name="m")
    onnx.checker.check_model(str(result.model_path))
    feed = feed if feed is not None else random_inputs(original, shapes, seed=1)
    want = _session(original, None).run(None, feed)
    with_lib = _session(result.model_path, result.library_path, profile=True)
    without = _session(result.model_path, None, profile=True)
    for sess in (with_lib, without):
        got = sess.run(None, feed)
        for w, g in zip(want, got, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    islands = {op for op, _ in result.islands}
    assert islands and islands <= _ops_run(with_lib)  # the library's kernels ran
    assert not islands & _ops_run(without)  # the functions ran instead
    return result, feed


@pytest.mark.parametrize("name", sorted(SAMPLE_MODELS))
def test_sample_models_compile_whole_and_run_with_and_without_the_library(name, tmp_path):
    result, _ = check_three_ways(SAMPLE_MODELS[name], tmp_path / "out")
    assert len(result.islands) == 1 and result.left_out == []


def test_weights_live_in_the_library_and_the_fallback_file_only(tmp_path):
    """The rewritten model carries no large weight: the library holds the islands' weights, and
    NAME.fallback.data holds them for the functions, which onnxruntime reads only without the
    library (the model runs with the library after the file is gone)."""
    original = SAMPLE_MODELS["mlp"]
    result, feed = check_three_ways(original, tmp_path / "out")
    fallback = result.model_path.parent / "m.fallback.data"
    weights = sum(t.ByteSize() for t in onnx.load(str(original)).graph.initializer)
    assert fallback.stat().st_size >= 0.95 * weights
    assert result.model_path.stat().st_size < 0.1 * original.stat().st_size
    want = _session(original, None).run(None, feed)
    fallback.unlink()
    got = _session(result.model_path, result.library_path).run(None, feed)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)
    with pytest.raises(Exception, match="fallback.data"):
        _session(result.model_path, None).run(None, feed)


def test_a_weight_onnxruntime_reads_too_stays_an_initializer(tmp_path):
    """The contrib operator's weight stays an initializer for onnxruntime; the islands' own
    weights (the two MatMuls') leave the graph for the library and the fallback file."""
    result, _ = check_three_ways(lstm_in_the_middle(tmp_path / "m.onnx", "contrib"),
                                 tmp_path / "out")
    model = onnx.load(str(result.model_path), load_external_data=False)
    assert {t.name for t in model.graph.initializer} == {"W"}
    island_inputs = {i for n in model.graph.node if n.domain == "ai.aotc.kernels"
                     for i in n.input}
    assert not island_inputs & {"w1", "w2", "W", "R", "B"}


def test_an_operator_aotc_does_not_compile_stays_with_onnxruntime_between_two_islands(tmp_path):
    result, _ = check_three_ways(lstm_in_the_middle(tmp_path / "m.onnx", "contrib"),
                                 tmp_path / "out")
    assert len(result.islands) == 2
    assert [(node, op) for node, op, _ in result.left_out] == [
        ("contrib", "FusedMatMul")]


def test_an_lstm_is_compiled_into_the_island(tmp_path):
    result, _ = check_three_ways(lstm_in_the_middle(tmp_path / "lstm.onnx"), tmp_path / "out")
    assert len(result.islands) == 1 and "LSTM" in result.islands[0][1]
    assert result.left_out == []


def test_a_data_dependent_shape_stays_with_onnxruntime(tmp_path):
    result, _ = check_three_ways(nonzero_in_the_middle(tmp_path / "nz.onnx"), tmp_path / "out")
    left = {node: why for node, _, why in result.left_out}
    assert set(left) == {"nz", "cast", "rs"}
    assert "known only at run time" in left["cast"]
    # Exp cannot join the first island: its other input descends from it through NonZero
    assert len(result.islands) == 2


def test_a_model_with_external_data(tmp_path):
    """Weights in a data file beside the model (as the dynamo exporter writes them), the
    contrib operator's kept by onnxruntime, the MatMuls' compiled: the islands read the file
    relative to the model, not to the working directory."""
    inline = lstm_in_the_middle(tmp_path / "inline.onnx", "contrib")
    folder = tmp_path / "model"
    folder.mkdir()
    onnx.save(onnx.load(str(inline)), str(folder / "lstm.onnx"), save_as_external_data=True,
              location="lstm.onnx.data", size_threshold=1024)
    assert (folder / "lstm.onnx.data").stat().st_size > 0
    result, _ = check_three_ways(folder / "lstm.onnx", tmp_path / "out")
    assert len(result.islands) == 2


def test_a_loop_stays_with_onnxruntime_and_keeps_the_weight_its_body_reads(tmp_path):
    result, _ = check_three_ways(loop_in_the_middle(tmp_path / "loop.onnx"), tmp_path / "out")
    assert [(node, op) for node, op, _ in result.left_out] == [("loop", "Loop")]
    assert len(result.islands) == 2
    # the body reads w from the outer scope: it stays an initializer the first island shares
    model = onnx.load(str(result.model_path), load_external_data=False)
    assert "w" in {t.name for t in model.graph.initializer}


def test_an_if_on_a_data_dependent_condition_stays_with_onnxruntime(tmp_path):
    model = if_in_the_middle(tmp_path / "if.onnx")
    result, feed = check_three_ways(model, tmp_path / "out")
    assert [(node, op) for node, op, _ in result.left_out] == [("if", "If")]
    assert [ops for _, ops in result.islands][-1] == ["Tanh"]
    feed["x"] = -np.abs(feed["x"])  # the other branch
    want = _session(model, None).run(None, feed)
    got = _session(result.model_path, result.library_path).run(None, feed)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)


def test_non_max_suppression_stays_with_onnxruntime(tmp_path):
    model = nms_in_the_middle(tmp_path / "nms.onnx")
    result, feed = check_three_ways(model, tmp_path / "out")
    assert [(node, op) for node, op, _ in result.left_out] == [("nms", "NonMaxSuppression")]
    assert _session(model, None).run(["selected"], feed)[0].shape[0] > 0  # it selects boxes


@pytest.mark.torch
def test_torch_exports_run_with_and_without_the_library(tmp_path):
    """The PyTorch exports the tests make (TorchScript and dynamo exporters), their dynamic
    batch bound to a size the export never saw."""
    from model_zoo import torch_models

    for name, (path, binding) in torch_models(tmp_path / "torch").items():
        result, _ = check_three_ways(path, tmp_path / name, binding)
        assert result.islands, name


def test_inputs_are_checked_against_the_compiled_shapes(tmp_path):
    """A rewritten model whose input is made dynamic, fed another shape: onnxruntime raises
    with the island's message instead of the kernel reading past its input."""
    result = emit_ort(SAMPLE_MODELS["mlp"], tmp_path / "out", input_shapes=[], name="m")
    model = onnx.load(str(result.model_path))
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    loose = tmp_path / "loose.onnx"
    onnx.save(model, loose)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim[1:]]
    sess = _session(loose, result.library_path)
    with pytest.raises(Exception, match=r"aotc island m_island0: input 0 .* has shape \[2, "):
        sess.run(None, {model.graph.input[0].name: np.zeros([2, *shape], np.float32)})


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_islands_share_onnxruntime_threads_unless_the_session_config_gives_a_count(tmp_path):
    """By default the islands' loops run on onnxruntime's intra-op pool: the library starts no
    thread. "aotc.threads" = N gives the library one pool of N threads (N - 1 workers plus the
    caller) for all its islands, however many there are."""
    original = lstm_in_the_middle(tmp_path / "m.onnx", "contrib")  # two islands
    result = emit_ort(original, tmp_path / "out", input_shapes=[], name="m")
    assert len(result.islands) == 2
    feed = random_inputs(original, seed=2)
    want = _session(original, None).run(None, feed)

    def threads_while_open(library, intra, config=None):
        so = ort.SessionOptions()
        so.intra_op_num_threads = intra
        for k, v in (config or {}).items():
            so.add_session_config_entry(k, v)
        if library is not None:
            so.register_custom_ops_library(str(library))
        before = _threads()
        sess = ort.InferenceSession(str(result.model_path), so,
                                    providers=["CPUExecutionProvider"])
        got = sess.run(None, feed)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)
        started = _threads() - before
        del sess
        return started

    ort_alone = threads_while_open(None, 3)
    assert threads_while_open(result.library_path, 3) == ort_alone
    assert threads_while_open(result.library_path, 3, {"aotc.threads": "3"}) == ort_alone + 2
    assert threads_while_open(result.library_path, 1, {"aotc.threads": "1"}) == \
        threads_while_open(None, 1)


def test_the_thread_count_entry_is_checked(tmp_path):
    result = emit_ort(SAMPLE_MODELS["mlp"], tmp_path / "out", input_shapes=[], name="m")
    with pytest.raises(Exception, match="aotc.threads' must be a thread count"):
        _session(result.model_path, result.library_path, config={"aotc.threads": "many"})


def test_cli_reports_islands_and_what_was_left_out(tmp_path):
    model = lstm_in_the_middle(tmp_path / "m.onnx", "contrib")
    proc = subprocess.run([sys.executable, "-m", "aotc", "optimize", str(model), "-o",
                           str(tmp_path / "out"), "--emit", "ort", "--report"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "model_island0" in proc.stdout and "FusedMatMul" in proc.stdout
    assert (tmp_path / "out" / "libaotc_model.so").is_file()
    # the folder's Makefile rebuilds the library from its sources
    (tmp_path / "out" / "libaotc_model.so").unlink()
    subprocess.run(["make", "-s", "-C", str(tmp_path / "out")], check=True)
    assert (tmp_path / "out" / "libaotc_model.so").is_file()


def test_a_parameter_given_as_an_input_is_checked_in_the_island(tmp_path):
    """ReduceSum whose axes are a graph input, compiled for the axes its declared output
    shape fixes (lowering/ops/pinned.py): the island runs them, and other axes are an
    onnxruntime error with the island's message, never a wrong result."""
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]),
         helper.make_node("ReduceSum", ["r", "axes"], ["y"], keepdims=1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 5]),
         helper.make_tensor_value_info("axes", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 1, 5])])
    original = tmp_path / "reduce.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10),
              original)
    feed = {"x": _rand(3, 4, 5), "axes": np.array([-2], np.int64)}
    result, _ = check_three_ways(original, tmp_path / "out", feed=feed)
    assert len(result.islands) == 1 and result.left_out == []
    sess = _session(result.model_path, result.library_path)
    with pytest.raises(Exception, match="compiled for"):
        sess.run(None, {**feed, "axes": np.array([2], np.int64)})


def test_a_converted_forest_runs_with_and_without_the_library(tmp_path):
    """An ai.onnx.ml tree ensemble (skl2onnx): the frontend rewrites it into standard
    operators, which become the island; without the library its function runs instead."""
    pytest.importorskip("sklearn")
    skl2onnx = pytest.importorskip("skl2onnx")
    from sklearn.datasets import make_classification
    from sklearn.ensemble import RandomForestClassifier

    x, y = make_classification(200, 6, n_informative=4, n_classes=3, random_state=0)
    x = x.astype(np.float32)
    forest = RandomForestClassifier(5, max_depth=4, random_state=0).fit(x, y)
    path = tmp_path / "forest.onnx"
    onnx.save(skl2onnx.to_onnx(forest, x[:1], options={id(forest): {"zipmap": False}},
                               target_opset={"": 17, "ai.onnx.ml": 3}), path)
    result, _ = check_three_ways(path, tmp_path / "out", {"X": (8, 6)}, {"X": x[:8]})
    assert len(result.islands) == 1 and result.left_out == []
