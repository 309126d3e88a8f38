"""LSTM, GRU and RNN against onnxruntime: directions, layouts, optional inputs (biases, sequence
lengths, initial states, peepholes) and outputs, clip, input_forget, linear_before_reset, other
activations, weights given as graph inputs; an LSTM inside a model; the ONNX backend node tests
of the three operators; and the refusals."""

from __future__ import annotations

import importlib
import pathlib
import sys

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from program_runner import (  # noqa: E402
    assert_close,
    check_model,
    compile_onnx,
    load_graph,
    node_model,
    ort_outputs,
    run_program,
)

from aotc.compiler import compile_model  # noqa: E402
from aotc.errors import AotcError  # noqa: E402
from targets.cpu.target import host_target  # noqa: E402

RNG = np.random.default_rng(7)
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
OUTPUTS = {"LSTM": 3, "GRU": 2, "RNN": 2}


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def make(op, inputs, consts, outputs, **attrs) -> tuple[onnx.ModelProto, list[np.ndarray]]:
    """A one-node model at opset 14 (see program_runner.node_model)."""
    return node_model(op, inputs, consts, outputs=outputs, opset=14, **attrs)


def case(op, *, steps=5, batch=3, size=4, hidden=6, direction="forward", layout=0, bias=True,
         lens=None, initial=False, peephole=False, consts=True, outputs=None, scale=0.5,
         **attrs):
    """The inputs (and which are initializers) of a recurrent node of these dimensions."""
    nd = 2 if direction == "bidirectional" else 1
    n = GATES[op] * hidden
    x = rand(batch, steps, size) if layout else rand(steps, batch, size)
    state = (batch, nd, hidden) if layout else (nd, batch, hidden)
    inputs = [x, rand(nd, n, size, scale=scale), rand(nd, n, hidden, scale=scale),
              rand(nd, 2 * n, scale=0.2) if bias else None,
              None if lens is None else np.asarray(lens, np.int32),
              rand(*state) if initial else None]
    if op == "LSTM":
        inputs += [rand(*state) if initial else None,
                   rand(nd, 3 * hidden, scale=0.3) if peephole else None]
    while inputs[-1] is None:
        inputs.pop()
    fixed = {1, 2, 3} if consts else set()
    if consts == "lens":
        fixed = {1, 2, 3, 4}
    attrs = {"hidden_size": hidden, "direction": direction, **attrs}
    if layout:
        attrs["layout"] = layout
    outs = outputs or [True] * OUTPUTS[op]
    return make(op, inputs, fixed, outs, **attrs)


def check(op, tol=1e-4, **kw):
    model, feeds = case(op, **kw)
    check_model(model, feeds, tol)


DIRECTIONS = ["forward", "reverse", "bidirectional"]


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_directions(op, direction):
    check(op, direction=direction)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_sequence_lengths_and_initial_states(op, direction):
    # a row shorter than the sequence, a full one, an empty one (zero states, as onnxruntime)
    check(op, direction=direction, lens=[3, 5, 0], initial=True)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_batch_major_layout(op):
    """layout=1 (onnxruntime refuses it) against onnxruntime on the same node with layout 0,
    its inputs and outputs transposed."""
    model, feeds = case(op, direction="bidirectional", layout=1, lens=[2, 4, 1, 4], batch=4,
                        steps=4, initial=True, consts=False)
    got = run_program(compile_onnx(model), feeds)
    node = model.graph.node[0]
    plain = helper.make_node(op, node.input, node.output, **{
        a.name: helper.get_attribute_value(a) for a in node.attribute if a.name != "layout"})
    x, w, r, b, lens, *states = feeds
    flipped = [x.transpose(1, 0, 2), w, r, b, lens, *(s.transpose(1, 0, 2) for s in states)]
    graph = helper.make_graph([plain], "g", [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in zip(node.input, flipped, strict=True)],
        [helper.make_empty_tensor_value_info(o) for o in node.output])
    want = ort_outputs(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)],
                                         ir_version=10), flipped)
    assert_close(got[0], want[0].transpose(2, 0, 1, 3))
    for g, w_ in zip(got[1:], want[1:], strict=True):
        assert_close(g, w_.transpose(1, 0, 2))


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_weights_and_lengths_given_as_graph_inputs(op):
    check(op, direction="bidirectional", consts=False, lens=[5, 2, 4], initial=True)


def test_constant_sequence_lengths():
    check("LSTM", direction="reverse", consts="lens", lens=[1, 5, 3])


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_no_bias(op):
    check(op, direction="bidirectional", bias=False, initial=True)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_lstm_peepholes(direction):
    check("LSTM", direction=direction, peephole=True, initial=True, lens=[4, 5, 1])


@pytest.mark.parametrize("input_forget", [0, 1])
def test_lstm_clip_and_input_forget(input_forget):
    check("LSTM", direction="bidirectional", clip=0.7, input_forget=input_forget, scale=2.0,
          peephole=True, initial=True)


@pytest.mark.parametrize("before", [0, 1])
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_gru_linear_before_reset(before, direction):
    check("GRU", direction=direction, linear_before_reset=before, lens=[5, 1, 3], initial=True)


@pytest.mark.parametrize("op", ["GRU", "RNN"])
def test_clip(op):
    check(op, direction="bidirectional", clip=0.5, scale=2.0)


@pytest.mark.parametrize("op, outputs", [("LSTM", [False, True]), ("LSTM", [True, False, True]),
                                         ("LSTM", [False, False, True]), ("GRU", [True]),
                                         ("RNN", [False, True])])
def test_optional_outputs(op, outputs):
    check(op, direction="bidirectional", outputs=outputs, lens=[5, 3, 2])


@pytest.mark.parametrize("op, acts, alpha, beta", [
    ("RNN", ["Relu"], None, None),
    ("RNN", ["LeakyRelu", "Softsign"], [0.2], None),
    ("RNN", ["ThresholdedRelu"], [0.3], None),
    ("RNN", ["Affine"], [0.6], [0.1]),
    ("RNN", ["Softplus"], None, None),
    ("GRU", ["HardSigmoid", "Elu"], [0.3, 0.9], [0.4]),
    ("GRU", ["Sigmoid", "ScaledTanh", "HardSigmoid", "Tanh"], [1.5, 0.25], [0.7, 0.45]),
    ("LSTM", ["Sigmoid", "Tanh", "Relu"], None, None),
    ("LSTM", ["HardSigmoid", "Elu", "Tanh"], None, None),
])
def test_activations(op, acts, alpha, beta):
    attrs = {"activations": acts}
    if alpha is not None:
        attrs["activation_alpha"] = alpha
    if beta is not None:
        attrs["activation_beta"] = beta
    nd = len(acts) // {"LSTM": 3, "GRU": 2, "RNN": 1}[op]
    check(op, direction="bidirectional" if nd == 2 else "forward", lens=[5, 2, 4], **attrs)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_larger_hidden_sizes_and_batches(op):
    # hidden sizes past one vector and not a multiple of it, a batch split over the cores, a
    # projection large enough for the GEMM template
    check(op, steps=9, batch=5, size=40, hidden=37, direction="bidirectional",
          lens=[9, 4, 0, 9, 7], initial=True, scale=0.2)
    check(op, steps=7, batch=2, size=24, hidden=70, direction="forward", scale=0.15)


@pytest.mark.parametrize("op, direction", [("LSTM", "forward"), ("GRU", "bidirectional")])
def test_batch_split_over_cores(op, direction):
    """Compiled for 4 cores, the batch is split into chunks (of uneven size) that run as
    iterations of the parallel loop; the outputs are those of the one-core kernel, bit for bit,
    and onnxruntime's."""
    model, feeds = case(op, steps=12, batch=5, size=24, hidden=70, direction=direction,
                        lens=[12, 3, 0, 7, 12], scale=0.15)
    graph = load_graph(model)
    host = host_target()
    runs = [run_program(compile_model(graph, host.with_machine(host.machine.with_cores(n))),
                        feeds) for n in (1, 4)]
    for one, four, want in zip(*runs, ort_outputs(model, feeds), strict=True):
        np.testing.assert_array_equal(four, one)
        assert_close(four, want)


def test_lstm_between_other_ops():
    """A bidirectional LSTM over a batch-first sequence, as exporters write it: Transpose,
    LSTM, Transpose, Reshape, MatMul, Relu."""
    b, t, f, h, c = 2, 6, 10, 12, 5
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [b, t, f])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [b, t, c])
    inits = [numpy_helper.from_array(rand(2, 4 * h, f, scale=0.4), "W"),
             numpy_helper.from_array(rand(2, 4 * h, h, scale=0.4), "R"),
             numpy_helper.from_array(rand(2, 8 * h, scale=0.1), "B"),
             numpy_helper.from_array(np.array([b, t, 2 * h], np.int64), "shape"),
             numpy_helper.from_array(rand(2 * h, c), "P")]
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
             helper.make_node("LSTM", ["xt", "W", "R", "B"], ["seq", "hn"], hidden_size=h,
                              direction="bidirectional"),
             helper.make_node("Transpose", ["seq"], ["st"], perm=[2, 0, 1, 3]),
             helper.make_node("Reshape", ["st", "shape"], ["flat"]),
             helper.make_node("MatMul", ["flat", "P"], ["mm"]),
             helper.make_node("Relu", ["mm"], ["y"])]
    graph = helper.make_graph(nodes, "g", [x], [y], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    check_model(model, [rand(b, t, f)])


@pytest.mark.torch
@pytest.mark.parametrize("dynamo", [False, True])
def test_pytorch_export(dynamo, tmp_path):
    """PyTorch 2.13's exporters (TorchScript and dynamo) on a 2-layer bidirectional batch-first
    LSTM feeding a GRU and a Linear: the same outputs as the module."""
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(16, 24, num_layers=2, batch_first=True, bidirectional=True)
            self.gru = torch.nn.GRU(48, 20, batch_first=True)
            self.fc = torch.nn.Linear(20, 5)

        def forward(self, x):
            y, _ = self.lstm(x)
            z, h = self.gru(y)
            return self.fc(z[:, -1]), h

    torch.manual_seed(0)
    net, x = Net().eval(), torch.randn(3, 7, 16)
    path = tmp_path / "rnn.onnx"
    torch.onnx.export(net, (x,), str(path), dynamo=dynamo, input_names=["x"],
                      **({} if dynamo else {"dynamic_axes": {"x": {0: "batch"}}}))
    model = onnx.load(str(path))
    assert {"LSTM", "GRU"} <= {n.op_type for n in model.graph.node}
    got = run_program(compile_onnx(model, {"x": (3, 7, 16)}), [x.numpy()])
    with torch.no_grad():
        want = [t.numpy() for t in net(x)]
    for g, w in zip(got, want, strict=True):
        assert_close(g, w)


# ONNX backend node tests ------------------------------------------------------------------------

def _node_cases() -> list:
    """The backend node test cases of LSTM, GRU and RNN. onnx's `collect_testcases()` imports
    every operator's generator (8 s); importing only these three fills the same list."""
    node = importlib.import_module("onnx.backend.test.case.node")
    for name in ("lstm", "gru", "rnn"):
        importlib.import_module(f"onnx.backend.test.case.node.{name}")
    cases = getattr(node, "_NodeTestCases", None)
    if cases is None:  # pragma: no cover - another onnx
        cases = node.collect_testcases()
    return [c for c in cases if {n.op_type for n in c.model.graph.node} & set(GATES)]


def test_backend_node_tests():
    cases = _node_cases()
    assert len(cases) >= 18
    failed = []
    for c in cases:
        inputs, expected = c.data_sets[0]
        try:
            program = compile_model(load_graph(c.model), host_target())
            got = run_program(program, list(inputs))
            for g, w in zip(got, expected, strict=True):
                np.testing.assert_allclose(g, w, rtol=c.rtol, atol=c.atol)
        except (AotcError, AssertionError) as e:
            failed.append(f"{c.name}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    assert not failed, "\n".join(failed)


# refusals --------------------------------------------------------------------------------------

def _refusal(model) -> str:
    with pytest.raises(AotcError) as e:
        compile_onnx(model)
    return str(e.value)


def test_refuses_unknown_activation():
    model, _ = case("RNN", activations=["Swish"])
    assert "activation 'Swish'" in _refusal(model)


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_refuses_other_float_types(dtype):
    model, _ = make("GRU", [rand(5, 2, 3).astype(dtype), rand(1, 12, 3).astype(dtype),
                            rand(1, 12, 4).astype(dtype)], {1, 2}, [True, True], hidden_size=4)
    assert f"GRU on {np.dtype(dtype).name} data is not supported (float32 only)" in \
        _refusal(model)


def test_matches_onnxruntime_output_by_output():
    """Y past a row's length is zero and Y_h its last valid state (onnxruntime's reading)."""
    model, feeds = case("LSTM", direction="reverse", lens=[2, 5, 0], initial=True)
    got, want = run_program(compile_onnx(model), feeds), ort_outputs(model, feeds)
    y, yh, _ = got
    assert not y[2:, 0, 0].any() and not y[:, 0, 2].any()
    np.testing.assert_array_equal(yh[0, 0], y[0, 0, 0])  # reverse: the last step is t = 0
    for g, w in zip(got, want, strict=True):
        assert_close(g, w)
