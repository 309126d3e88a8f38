"""Outputs whose length the input data decides (NonZero, Unique, Compress by a run-time
condition): bounded by the frontend, written dense at the run's length, the length reported
by the executor (in process: the arena's length slot; a bundle: NAME_output_shape, run_model's
.npy shapes, `aotc verify`); a declared shape the data contradicts stops the run. Each
compared with onnxruntime."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from program_runner import RunFailed, compile_onnx, ort_outputs, run_program  # noqa: E402

from aotc.driver import compile_file, emit_ort, optimize_model  # noqa: E402
from aotc.errors import AotcError  # noqa: E402
from aotc.package.build import build_bundle, run_model_process  # noqa: E402
from aotc.package.loaded import LoadedBundle  # noqa: E402
from aotc.verify import verify_bundle  # noqa: E402

RNG = np.random.default_rng(7)
T = onnx.TensorProto


def _model(op: str, inputs: list[tuple[str, int, list]], outputs: list[tuple[str, int, list]],
           **attrs) -> onnx.ModelProto:
    node = oh.make_node(op, [n for n, _, _ in inputs], [n for n, _, _ in outputs], name="n",
                        **attrs)
    graph = oh.make_graph([node], "g", [oh.make_tensor_value_info(*i) for i in inputs],
                          [oh.make_tensor_value_info(*o) for o in outputs])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)


def _sparse(shape: tuple[int, ...], dtype=np.float32, density: float = 0.4) -> np.ndarray:
    keep = RNG.random(shape) < density
    return (RNG.integers(1, 9, shape) * keep).astype(dtype)


def _same(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("x", [
    _sparse((3, 4)), np.zeros((3, 4), np.float32), np.ones((2, 3, 2), np.float32),
    _sparse((5,), np.int32), _sparse((4, 4), np.bool_, 0.5), _sparse((200,), np.int64, 0.1),
    np.array(3.0, np.float32)])
def test_nonzero_bounded(x: np.ndarray) -> None:
    dtype = onnx.helper.np_dtype_to_tensor_dtype(x.dtype)
    model = _model("NonZero", [("x", dtype, list(x.shape))], [("y", T.INT64, [x.ndim, None])])
    program = compile_onnx(model)
    out = program.outputs[0]
    assert out.computed_axis == 1 and out.shape == (max(x.ndim, 1), x.size)
    _same(run_program(program, [x]), ort_outputs(model, [x]))


def test_a_declared_length_is_checked() -> None:
    """The model says how many: compiled at that shape, a check stops other data."""
    x = _sparse((4, 5))
    model = _model("NonZero", [("x", T.FLOAT, [4, 5])],
                   [("y", T.INT64, [2, int(np.count_nonzero(x))])])
    program = compile_onnx(model)
    assert program.outputs[0].computed_axis == -1
    _same(run_program(program, [x]), ort_outputs(model, [x]))
    more = np.where(x == 0, 1.0, x).astype(np.float32)
    with pytest.raises(RunFailed) as e:
        run_program(program, [more])
    assert e.value.status == 13


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_compress_by_a_run_time_condition(axis: int | None) -> None:
    x = RNG.standard_normal((6, 5)).astype(np.float32)
    n = x.size if axis is None else x.shape[axis]
    attrs = {} if axis is None else {"axis": axis}
    model = _model("Compress", [("x", T.FLOAT, [6, 5]), ("c", T.BOOL, [n])],
                   [("y", T.FLOAT, [None] * (1 if axis is None else 2))], **attrs)
    program = compile_onnx(model)
    for cond in (RNG.random(n) < 0.5, np.zeros(n, bool), np.ones(n, bool)):
        _same(run_program(program, [x, cond]), ort_outputs(model, [x, cond]))


@pytest.mark.parametrize("shape,axis,sort", [
    ((12,), None, 1), ((12,), None, 0), ((3, 4), None, 1), ((6, 3), 0, 1), ((3, 6), 1, 0),
    ((2, 5, 2), 1, 1), ((4, 3), -2, 1)])
def test_unique(shape: tuple[int, ...], axis: int | None, sort: int) -> None:
    x = RNG.integers(0, 3, shape).astype(np.float32)
    if axis is not None:  # repeat some slices
        x = np.take(x, [0, 1, 0, *range(2, x.shape[axis])][:x.shape[axis]], axis=axis)
    attrs = {"sorted": sort} | ({} if axis is None else {"axis": axis})
    outs = [("y", T.FLOAT, [None] * (1 if axis is None else len(shape))),
            ("indices", T.INT64, [None]), ("inverse", T.INT64, [None]),
            ("counts", T.INT64, [None])]
    model = _model("Unique", [("x", T.FLOAT, list(shape))], outs, **attrs)
    program = compile_onnx(model)
    assert [o.computed_axis for o in program.outputs] == [
        0 if axis is None else axis % len(shape), 0, -1, 0]
    _same(run_program(program, [x]), ort_outputs(model, [x]))


def test_a_node_reading_a_computed_length_is_refused() -> None:
    graph = oh.make_graph([oh.make_node("NonZero", ["x"], ["i"], name="nz"),
                           oh.make_node("Transpose", ["i"], ["y"], name="flip")], "g",
                          [oh.make_tensor_value_info("x", T.FLOAT, [3, 4])],
                          [oh.make_tensor_value_info("y", T.INT64, [None, 2])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)])
    with pytest.raises(AotcError, match="'flip' \\(Transpose\\) reads 'i'"):
        compile_onnx(model)


@pytest.fixture(scope="module")
def unique_bundle(tmp_path_factory) -> tuple[Path, Path, onnx.ModelProto]:
    tmp = tmp_path_factory.mktemp("computed")
    model = _model("Unique", [("x", T.INT64, [16])], [
        ("y", T.INT64, [None]), ("indices", T.INT64, [None]), ("inverse", T.INT64, [None]),
        ("counts", T.INT64, [None])])
    (tmp / "m").mkdir()
    onnx.save(model, tmp / "m" / "model.onnx")
    optimize_model(tmp / "m" / "model.onnx", tmp / "b", input_shapes=[])
    build_bundle(tmp / "b", target="shared")
    build_bundle(tmp / "b")
    return tmp / "m" / "model.onnx", tmp / "b", model


def test_bundle_reports_the_computed_shape(unique_bundle) -> None:
    """The header documents the bound and declares NAME_output_shape; the C API gives the
    run's shape through the context and through a caller's workspace; run_model writes .npy
    files of that shape."""
    _, bundle, model = unique_bundle
    header = (bundle / "model.h").read_text()
    assert "output 0 axis 0: at most 16" in header
    assert "int model_output_shape(const void *workspace" in header
    assert "int model_context_output_shape(const model_context *ctx" in header
    for x in (RNG.integers(0, 4, 16), np.full(16, 5), np.arange(16)):
        want = ort_outputs(model, [x])
        with LoadedBundle(bundle) as lib:
            lib.create(1)
            _same(lib.run([x]), want)
            _same(lib.run_single([x]), want)
        _same(run_model_process(bundle, [x]), want)


def test_output_shape_before_any_run_is_an_error(unique_bundle) -> None:
    import ctypes

    _, bundle, _ = unique_bundle
    lib = LoadedBundle(bundle)
    workspace = np.full(max(lib.workspace_size, 64), 0xFF, np.uint8)  # no run: no length
    shape = (ctypes.c_int64 * 1)()
    assert lib._output_shape(workspace.ctypes.data, 0, shape) == 9  # AOTC_ERR_INTERNAL
    assert lib._output_shape(workspace.ctypes.data, 7, shape) == 7  # no such output


def test_verify_compares_at_the_computed_shape(unique_bundle) -> None:
    path, bundle, _ = unique_bundle
    reports = verify_bundle(path, bundle, input_shapes=[], runs=2)
    assert len(reports) == 8 and all(r.ok for r in reports)


def test_gpu_targets_and_run_time_dimensions_refuse_computed_lengths(tmp_path: Path) -> None:
    graph = oh.make_graph([oh.make_node("Relu", ["x"], ["r"], name="relu"),
                           oh.make_node("NonZero", ["z"], ["y"], name="nz")], "g",
                          [oh.make_tensor_value_info("x", T.FLOAT, ["n", 4]),
                           oh.make_tensor_value_info("z", T.FLOAT, [3, 4])],
                          [oh.make_tensor_value_info("r", T.FLOAT, ["n", 4]),
                           oh.make_tensor_value_info("y", T.INT64, [2, None])])
    path = tmp_path / "nz.onnx"
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)]), path)
    with pytest.raises(AotcError, match="cannot check when it runs"):
        compile_file(path, input_shapes=["x=3,4"], target="opencl")
    with pytest.raises(AotcError, match="output 'y' has a length that depends on the input "
                       "data, in a model with a run-time dimension"):
        compile_file(path, input_shapes=["x=1..8,4"])


def test_emit_ort_leaves_the_node_to_onnxruntime(tmp_path: Path) -> None:
    """--emit ort: the computed-length node stays outside every island."""
    graph = oh.make_graph([oh.make_node("Relu", ["x"], ["r"], name="relu"),
                           oh.make_node("NonZero", ["r"], ["y"], name="nz")], "g",
                          [oh.make_tensor_value_info("x", T.FLOAT, [3, 4])],
                          [oh.make_tensor_value_info("y", T.INT64, [2, None])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    emit_ort(path, tmp_path / "out", input_shapes=[], name="m")
    rewritten = onnx.load(tmp_path / "out" / "m.onnx")
    assert "NonZero" in [n.op_type for n in rewritten.graph.node]
