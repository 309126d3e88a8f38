"""Scan, Loop and run-time If (aotc/control_flow.py): bodies compiled once, run by the executor.

Each model is compared with onnxruntime in-process (tests/program_runner.py runs loops and
branches as the C executor does), and a few as built C bundles under ASan/UBSan."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper
from program_runner import (
    INPUT_VALUE_STATUS,
    RunFailed,
    assert_close,
    compile_onnx,
    ort_outputs,
    run_program,
)

from aotc.errors import AotcError
from aotc.package.build import build_bundle, run_model_process
from aotc.package.bundle import write_bundle
from aotc.package.memory_plan import loop_lifetimes
from aotc.package.program import Branch, Loop

F = TP.FLOAT


def vi(name: str, shape, dtype: int = F):
    return helper.make_tensor_value_info(name, dtype, shape)


def model(nodes, inputs, outputs, inits=(), opset: int = 21) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=10)


def check(m: onnx.ModelProto, feeds: list[np.ndarray], tol: float = 1e-5):
    program = compile_onnx(m)
    got = run_program(program, feeds)
    want = ort_outputs(m, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert_close(g, w, tol)
    return program


def items_of(program, kind) -> list:
    out = []

    def walk(items):
        for it in items:
            if isinstance(it, kind):
                out.append(it)
            if isinstance(it, Loop):
                walk(it.body)
            elif isinstance(it, Branch):
                walk(it.then)
                walk(it.otherwise)
    walk(program.steps)
    return out


# -- Scan ------------------------------------------------------------------------------------

def scan_model(x_shape, in_axis, in_dir, out_axis, out_dir, state=(3,)):
    """state' = state * 0.5 + slice (a row of the scan input's slice), y = tanh(state') * slice;
    a second scan input read forward, a second scan output the state itself."""
    rank = len(x_shape)
    ax = in_axis % rank
    slice_shape = [d for k, d in enumerate(x_shape) if k != ax]
    t = x_shape[ax]
    body = helper.make_graph(
        [helper.make_node("Mul", ["s", "half"], ["sh"]),
         helper.make_node("ReduceSum", ["x", "red"], ["xr"], keepdims=0),
         helper.make_node("Add", ["sh", "xr"], ["s2"]),
         helper.make_node("Add", ["s2", "z"], ["s3"]),
         helper.make_node("Tanh", ["s3"], ["th"]),
         helper.make_node("Mul", ["th", "xr"], ["y"]),
         helper.make_node("Identity", ["s3"], ["ys"])],
        "body", [vi("s", list(state)), vi("x", slice_shape), vi("z", list(state))],
        [vi("s3", list(state)), vi("y", list(state)), vi("ys", list(state))])
    y_rank = len(state) + 1
    nodes = [helper.make_node(
        "Scan", ["s0", "xs", "zs"], ["sf", "ys_all", "ss_all"], body=body, num_scan_inputs=2,
        scan_input_axes=[in_axis, 0], scan_input_directions=[in_dir, 0],
        scan_output_axes=[out_axis, 0], scan_output_directions=[out_dir, 1])]
    y_shape = list(state)
    y_shape.insert(out_axis % y_rank, t)
    inits = [helper.make_tensor("half", F, [], [0.5]),
             helper.make_tensor("red", TP.INT64, [1], [len(slice_shape) - 1])]
    m = model(nodes, [vi("s0", list(state)), vi("xs", list(x_shape)), vi("zs", [t, *state])],
              [vi("sf", list(state)), vi("ys_all", y_shape), vi("ss_all", [t, *state])], inits)
    rng = np.random.default_rng(t)
    feeds = [rng.standard_normal(state).astype(np.float32),
             rng.standard_normal(x_shape).astype(np.float32),
             rng.standard_normal((t, *state)).astype(np.float32)]
    return m, feeds


@pytest.mark.parametrize("x_shape,in_axis,in_dir,out_axis,out_dir", [
    ((5, 3, 4), 0, 0, 0, 0),
    ((5, 3, 4), 0, 1, 0, 0),
    ((3, 5, 4), 1, 0, 1, 1),
    ((3, 4, 5), -1, 1, -1, 0),
    ((3, 4, 5), 2, 0, 0, 1),
    ((1, 3, 4), 0, 1, 1, 1),  # one iteration (the final state in the second buffer)
])
def test_scan_axes_and_directions(x_shape, in_axis, in_dir, out_axis, out_dir) -> None:
    m, feeds = scan_model(x_shape, in_axis, in_dir, out_axis, out_dir)
    program = check(m, feeds)
    (loop,) = items_of(program, Loop)
    assert loop.trip_count == x_shape[in_axis]


@pytest.mark.parametrize("x_shape,in_axis,in_dir", [((4, 6, 300), 1, 1), ((2, 4, 5, 130), 2, 0)])
def test_scan_large_slices_on_an_inner_axis(x_shape, in_axis, in_dir) -> None:
    """Slices of 4 KiB or more along an inner axis are copied out by each iteration."""
    m, feeds = scan_model(x_shape, in_axis, in_dir, 0, 0, state=x_shape[:-1][:in_axis] +
                          x_shape[:-1][in_axis + 1:])
    program = check(m, feeds)
    (loop,) = items_of(program, Loop)
    assert any("scan_input0" in s.node for s in loop.body)


def test_scan_state_passed_through_and_scalar_state() -> None:
    """A body that gives a state back untouched and one whose state is a scalar: copies."""
    body = helper.make_graph(
        [helper.make_node("ReduceSum", ["x"], ["xsum"], keepdims=0),
         helper.make_node("Add", ["c", "xsum"], ["c2"]),
         helper.make_node("Identity", ["k"], ["k2"]),
         helper.make_node("Mul", ["x", "k"], ["y"])],
        "body", [vi("c", []), vi("k", [4]), vi("x", [4])],
        [vi("c2", []), vi("k2", [4]), vi("y", [4])])
    m = model([helper.make_node("Scan", ["c0", "k0", "xs"], ["cf", "kf", "ys"], body=body,
                                num_scan_inputs=1)],
              [vi("c0", []), vi("k0", [4]), vi("xs", [6, 4])],
              [vi("cf", []), vi("kf", [4]), vi("ys", [6, 4])])
    rng = np.random.default_rng(1)
    check(m, [np.array(2.0, dtype=np.float32), rng.standard_normal(4).astype(np.float32),
              rng.standard_normal((6, 4)).astype(np.float32)])


# -- Loop ------------------------------------------------------------------------------------

def loop_model(trip: int | None, cond_kind: str, with_scan: bool = True):
    """v' = v * 1.5 + i (the iteration number; 1.5 without a trip count), scan output v';
    `cond_kind`: 'none' (no
    condition), 'true' (a constant), 'body' (v' < limit, from the body: may end it early)."""
    counter = ("Cast", ["i"], ["fi"]) if trip is not None else ("Identity", ["k"], ["fi"])
    nodes = [helper.make_node(*counter, **({"to": F} if trip is not None else {})),
             helper.make_node("Mul", ["v", "k"], ["vk"]),
             helper.make_node("Add", ["vk", "fi"], ["v2"])]
    if cond_kind == "body":
        nodes += [helper.make_node("ReduceMax", ["v2"], ["mx"], keepdims=0),
                  helper.make_node("Less", ["mx", "limit"], ["c2"])]
    else:
        nodes.append(helper.make_node("Identity", ["c"], ["c2"]))
    outs = [vi("c2", [], TP.BOOL), vi("v2", [2, 3])]
    if with_scan:
        nodes.append(helper.make_node("Identity", ["v2"], ["sv"]))
        outs.append(vi("sv", [2, 3]))
    body = helper.make_graph(nodes, "body", [vi("i", [], TP.INT64), vi("c", [], TP.BOOL),
                                             vi("v", [2, 3])], outs)
    inputs = ["M" if trip is not None else "", "" if cond_kind == "none" else "c0", "v0"]
    outputs = ["vf", "vs"] if with_scan else ["vf"]
    inits = [helper.make_tensor("k", F, [], [1.5]), helper.make_tensor("limit", F, [], [40.0])]
    if trip is not None:
        inits.append(helper.make_tensor("M", TP.INT64, [], [trip]))
    graph_in = [vi("v0", [2, 3])]
    if cond_kind == "true":
        inits.append(helper.make_tensor("c0", TP.BOOL, [], [True]))
    elif cond_kind == "body":
        graph_in.append(vi("c0", [], TP.BOOL))
    graph_out = [vi("vf", [2, 3])] + ([vi("vs", [trip or 0, 2, 3])] if with_scan else [])
    m = model([helper.make_node("Loop", inputs, outputs, body=body)], graph_in, graph_out, inits)
    return m


@pytest.mark.parametrize("trip,cond_kind", [(5, "none"), (4, "true"), (1, "none"),
                                            (0, "none")])
def test_loop_fixed_trip_count(trip, cond_kind) -> None:
    m = loop_model(trip, cond_kind)
    v0 = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
    program = check(m, [v0])
    assert len(items_of(program, Loop)) == (1 if trip else 0)


@pytest.mark.parametrize("start", [True, False])
@pytest.mark.parametrize("trip,scale", [(10, 1.0), (10, 8.0), (10, 0.01), (None, 1.0),
                                        (3, 1.0)])
def test_loop_early_exit(trip, scale, start) -> None:
    """The body's condition ends the loop after an odd or even number of iterations, before
    the trip count, or not at all; a false initial condition runs none."""
    m = loop_model(trip, "body", with_scan=False)
    v0 = (np.arange(6, dtype=np.float32).reshape(2, 3) + 1) * scale
    program = check(m, [v0, np.array(start)])
    (loop,) = items_of(program, Loop)
    assert loop.cond_out is not None and loop.on_odd_exit


def test_loop_early_exit_with_scan_outputs_is_refused() -> None:
    m = loop_model(10, "body", with_scan=True)
    with pytest.raises(AotcError, match="scan outputs would be as long as the iterations"):
        compile_onnx(m)


def _trip_count_as_input(m: onnx.ModelProto) -> onnx.ModelProto:
    graph = m.graph
    init = next(t for t in graph.initializer if t.name == "M")
    graph.initializer.remove(init)
    graph.input.append(vi("M", [], TP.INT64))
    return m


def test_loop_run_time_trip_count_is_pinned_by_scan_outputs() -> None:
    """The scan output's declared length (5) fixes the trip count: compiled for it, and a
    check stops a run given another."""
    m = _trip_count_as_input(loop_model(5, "none"))
    program = compile_onnx(m)
    v0 = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
    feeds = [v0, np.array(5, np.int64)]
    for g, w in zip(run_program(program, feeds), ort_outputs(m, feeds), strict=True):
        assert_close(g, w, 1e-5)
    for trip in (4, 6, 0):
        with pytest.raises(RunFailed) as err:
            run_program(program, [v0, np.array(trip, np.int64)])
        assert err.value.status == INPUT_VALUE_STATUS


def test_loop_run_time_trip_count_without_scan_outputs_is_refused() -> None:
    m = _trip_count_as_input(loop_model(5, "none", with_scan=False))
    with pytest.raises(AotcError, match="trip count is computed at run time"):
        compile_onnx(m)


def test_loop_body_input_without_a_shape_takes_its_start_values() -> None:
    """A body whose carried input declares no shape (function expansions write them so): the
    start value's shape is assumed, and the body's inference confirms it."""
    m = loop_model(3, "none")
    body = m.graph.node[0].attribute[0].g
    carried = body.input[2]
    carried.type.tensor_type.ClearField("shape")
    for out in list(body.output)[1:]:
        out.type.tensor_type.ClearField("shape")
    check(m, [np.arange(6, dtype=np.float32).reshape(2, 3)])


def test_scan_inside_loop() -> None:
    """A Scan in a Loop's body: references moved by both loops' iterations."""
    sbody = helper.make_graph(
        [helper.make_node("Add", ["s", "x"], ["s2"]),
         helper.make_node("Mul", ["s2", "x"], ["y"])],
        "sbody", [vi("s", [3]), vi("x", [3])], [vi("s2", [3]), vi("y", [3])])
    lbody = helper.make_graph(
        [helper.make_node("Gather", ["table", "i"], ["row"], axis=0),
         helper.make_node("Scan", ["v", "row"], ["v2", "ys"], body=sbody, num_scan_inputs=1,
                          scan_input_directions=[1]),
         helper.make_node("Identity", ["c"], ["c2"])],
        "lbody", [vi("i", [], TP.INT64), vi("c", [], TP.BOOL), vi("v", [3])],
        [vi("c2", [], TP.BOOL), vi("v2", [3]), vi("ys", [4, 3])])
    m = model([helper.make_node("Loop", ["M", "", "v0"], ["vf", "all"], body=lbody)],
              [vi("v0", [3]), vi("table", [3, 4, 3])], [vi("vf", [3]), vi("all", [3, 4, 3])],
              [helper.make_tensor("M", TP.INT64, [], [3])])
    rng = np.random.default_rng(2)
    program = check(m, [rng.standard_normal(3).astype(np.float32) * 0.3,
                        rng.standard_normal((3, 4, 3)).astype(np.float32) * 0.3])
    assert sorted(lp.depth for lp in items_of(program, Loop)) == [0, 1]


# -- If --------------------------------------------------------------------------------------

def if_model():
    """y = cond ? relu(x @ w) : x * 2 - 1, z = cond ? x : sum(x) broadcast."""
    then = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["t0"]), helper.make_node("Relu", ["t0"], ["ty"]),
         helper.make_node("Identity", ["x"], ["tz"])],
        "then", [], [vi("ty", [4, 4]), vi("tz", [4, 4])])
    other = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["e0"]), helper.make_node("Sub", ["e0", "one"], ["ey"]),
         helper.make_node("ReduceSum", ["x"], ["s"], keepdims=1),
         helper.make_node("Expand", ["s", "shape"], ["ez"])],
        "else", [], [vi("ey", [4, 4]), vi("ez", [4, 4])])
    inits = [helper.make_tensor("two", F, [], [2.0]), helper.make_tensor("one", F, [], [1.0]),
             helper.make_tensor("shape", TP.INT64, [2], [4, 4])]
    return model([helper.make_node("If", ["cond"], ["y", "z"], then_branch=then,
                                   else_branch=other),
                  helper.make_node("Add", ["y", "z"], ["yz"])],
                 [vi("cond", [], TP.BOOL), vi("x", [4, 4]), vi("w", [4, 4])],
                 [vi("y", [4, 4]), vi("yz", [4, 4])], inits)


@pytest.mark.parametrize("cond", [True, False])
def test_if_run_time_condition(cond) -> None:
    rng = np.random.default_rng(3)
    feeds = [np.array(cond), rng.standard_normal((4, 4)).astype(np.float32),
             rng.standard_normal((4, 4)).astype(np.float32)]
    program = check(if_model(), feeds)
    assert len(items_of(program, Branch)) == 1


def test_lstm_in_both_branches_of_a_run_time_if() -> None:
    """The voice-activity pattern: an If on the sample rate (an input) chooses between two
    LSTMs with weights of their own, their final states as the outputs."""
    from onnx import numpy_helper

    rng = np.random.default_rng(6)
    steps, hidden, features = 5, 16, 8

    def branch(tag: str) -> onnx.GraphProto:
        weights = [numpy_helper.from_array(
            (rng.standard_normal(shape) * 0.3).astype(np.float32), f"{name}{tag}")
            for name, shape in (("W", (1, 4 * hidden, features)),
                                ("R", (1, 4 * hidden, hidden)), ("B", (1, 8 * hidden)))]
        return helper.make_graph(
            [helper.make_node("LSTM", ["x", f"W{tag}", f"R{tag}", f"B{tag}", "", "h0", "c0"],
                              [f"Y{tag}", f"Yh{tag}", f"Yc{tag}"], hidden_size=hidden),
             helper.make_node("Squeeze", [f"Yh{tag}", "axis0"], [f"h{tag}"])],
            f"lstm_{tag}", [], [vi(f"h{tag}", [1, hidden]), vi(f"Yc{tag}", [1, 1, hidden])],
            weights)

    m = model([helper.make_node("Equal", ["sr", "rate16k"], ["c"]),
               helper.make_node("If", ["c"], ["h", "state"], then_branch=branch("a"),
                                else_branch=branch("b"))],
              [vi("x", [steps, 1, features]), vi("h0", [1, 1, hidden]), vi("c0", [1, 1, hidden]),
               vi("sr", [], TP.INT64)],
              [vi("h", [1, hidden]), vi("state", [1, 1, hidden])],
              [helper.make_tensor("rate16k", TP.INT64, [], [16000]),
               helper.make_tensor("axis0", TP.INT64, [1], [0])])
    for rate in (16000, 8000):
        feeds = [rng.standard_normal((steps, 1, features)).astype(np.float32),
                 (rng.standard_normal((1, 1, hidden)) * 0.1).astype(np.float32),
                 (rng.standard_normal((1, 1, hidden)) * 0.1).astype(np.float32),
                 np.array(rate, np.int64)]
        program = check(m, feeds)
    assert len(items_of(program, Branch)) == 1


def concat_if(axis: int, declared=None) -> onnx.ModelProto:
    """y = c ? x : concat(x, x) along `axis`, x [3, 4]: the branches differ along it."""
    then = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [],
                             [vi("t", [3, 4])])
    other = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["e"], axis=axis)],
                              "else", [], [vi("e", [6, 4] if axis == 0 else [3, 8])])
    return model([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
                 [vi("c", [], TP.BOOL), vi("x", [3, 4])], [vi("y", declared or [None, None])])


@pytest.mark.parametrize("axis", [0, 1])
def test_if_branches_of_different_lengths(axis: int) -> None:
    """An If output whose branches differ along one axis: bounded by the longer branch, each
    branch writing its own shape dense at the start of the buffer and its length where the
    executor reports it (computed_lengths._if, control_flow._If)."""
    m = concat_if(axis)
    program = compile_onnx(m)
    out = program.outputs[0]
    assert out.computed_axis == axis and out.shape == ((6, 4) if axis == 0 else (3, 8))
    x = np.random.default_rng(4).standard_normal((3, 4)).astype(np.float32)
    for c in (True, False):
        (got,), (want,) = run_program(program, [np.array(c), x]), ort_outputs(m, [np.array(c), x])
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_if_branches_of_different_shapes_are_refused() -> None:
    """Where the output is declared, or the branches differ along two axes, the shapes
    must agree."""
    with pytest.raises(AotcError, match="then_branch gives float32\\[3, 4\\]"):
        compile_onnx(concat_if(0, declared=[6, 4]))
    then = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [],
                             [vi("t", [3, 4])])
    other = helper.make_graph([helper.make_node("Transpose", ["x"], ["e"], perm=[1, 0])],
                              "else", [], [vi("e", [4, 3])])
    m = model([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
              [vi("c", [], TP.BOOL), vi("x", [3, 4])], [vi("y", [None, None])])
    with pytest.raises(AotcError, match="shape"):
        compile_onnx(m)


# -- memory plan -----------------------------------------------------------------------------

def test_loop_lifetimes() -> None:
    """A body temporary keeps its span; what crosses iterations lives across the loop."""
    uses = {"temp": [3, 4], "outer": [0, 3], "made_for_after": [4, 7], "moved": [3],
            "after": [7, 8]}
    spans = loop_lifetimes(uses, [(2, 5, 0)], {"moved": {0}})
    assert spans == {"temp": (3, 4), "outer": (0, 5), "made_for_after": (2, 7),
                     "moved": (2, 5), "after": (7, 8)}


# -- C bundle --------------------------------------------------------------------------------

def bundle_model() -> onnx.ModelProto:
    """A reversed Scan on axis 1, a Loop that its condition ends early and a run-time If."""
    sbody = helper.make_graph(
        [helper.make_node("Add", ["s", "x"], ["s2"]), helper.make_node("Sigmoid", ["s2"], ["y"])],
        "sbody", [vi("s", [3]), vi("x", [3])], [vi("s2", [3]), vi("y", [3])])
    lbody = helper.make_graph(
        [helper.make_node("Mul", ["v", "k"], ["v2"]),
         helper.make_node("ReduceMax", ["v2"], ["mx"], keepdims=0),
         helper.make_node("Less", ["mx", "limit"], ["c2"])],
        "lbody", [vi("i", [], TP.INT64), vi("c", [], TP.BOOL), vi("v", [3])],
        [vi("c2", [], TP.BOOL), vi("v2", [3])])
    then = helper.make_graph([helper.make_node("Add", ["lf", "sf"], ["t"])], "then", [],
                             [vi("t", [3])])
    other = helper.make_graph([helper.make_node("Sub", ["lf", "sf"], ["e"])], "else", [],
                              [vi("e", [3])])
    nodes = [
        helper.make_node("Scan", ["s0", "xs"], ["sf", "ys"], body=sbody, num_scan_inputs=1,
                         scan_input_axes=[1], scan_input_directions=[1],
                         scan_output_axes=[1]),
        helper.make_node("Loop", ["M", "go", "sf"], ["lf"], body=lbody),
        helper.make_node("If", ["pick"], ["out"], then_branch=then, else_branch=other),
    ]
    inits = [helper.make_tensor("M", TP.INT64, [], [20]), helper.make_tensor("k", F, [], [1.7]),
             helper.make_tensor("limit", F, [], [50.0])]
    return model(nodes, [vi("s0", [3]), vi("xs", [3, 5]), vi("go", [], TP.BOOL),
                         vi("pick", [], TP.BOOL)],
                 [vi("ys", [3, 5]), vi("lf", [3]), vi("out", [3])], inits)


def bundle_feeds(seed: int, go: bool, pick: bool) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(0.5, 2, 3).astype(np.float32), rng.uniform(0, 1, (3, 5)).astype(np.float32),
            np.array(go), np.array(pick)]


def test_bundle_runs_control_flow_under_sanitizers(tmp_path: Path) -> None:
    m = bundle_model()
    program = compile_onnx(m)
    out = tmp_path / "cf"
    write_bundle(program, out)
    build_bundle(out, cflags="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined",
                 ldflags="-fsanitize=address,undefined")
    env = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0",
           "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"}
    for seed, go, pick in ((0, True, True), (1, True, False), (2, False, True), (3, True, True)):
        feeds = bundle_feeds(seed, go, pick)
        got = run_model_process(out, feeds, threads=2, env=env)
        want = ort_outputs(m, feeds)
        inprocess = run_program(program, feeds)
        for g, w, p in zip(got, want, inprocess, strict=True):
            assert_close(g, w, 1e-5)
            np.testing.assert_array_equal(g, p)


def test_bundle_reports_the_length_the_branch_gives(tmp_path: Path) -> None:
    """The If of different lengths as a bundle (run_model under the sanitizers): the header
    documents the bound, the .npy files have the taken branch's shape."""
    m = concat_if(1)
    out = tmp_path / "if"
    write_bundle(compile_onnx(m), out)
    assert "output 0 axis 1: at most 8" in (out / "model.h").read_text()
    build_bundle(out, cflags="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined",
                 ldflags="-fsanitize=address,undefined")
    env = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0",
           "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"}
    x = np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32)
    for c in (True, False, True):
        feeds = [np.array(c), x]
        (got,), (want,) = run_model_process(out, feeds, env=env), ort_outputs(m, feeds)
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


# -- PyTorch ---------------------------------------------------------------------------------

def test_torch_cond_exports_a_run_time_if(tmp_path: Path) -> None:
    """torch.cond, exported by the dynamo exporter, is an If on a computed condition."""
    torch = pytest.importorskip("torch")

    class Gate(torch.nn.Module):
        def forward(self, x, y):
            return torch.cond(x.sum() > 0, lambda x, y: torch.relu(x) + y,
                              lambda x, y: x * y - 1, (x, y))

    path = tmp_path / "cond.onnx"
    torch.onnx.export(Gate(), (torch.randn(3, 4), torch.randn(3, 4)), dynamo=True).save(path)
    m = onnx.load(path)
    assert "If" in [n.op_type for n in m.graph.node]
    rng = np.random.default_rng(4)
    program = compile_onnx(m)
    for sign in (1, -1):
        feeds = [np.abs(rng.standard_normal((3, 4))).astype(np.float32) * sign,
                 rng.standard_normal((3, 4)).astype(np.float32)]
        for g, w in zip(run_program(program, feeds), ort_outputs(m, feeds), strict=True):
            assert_close(g, w, 1e-5)
    assert len(items_of(program, Branch)) == 1
