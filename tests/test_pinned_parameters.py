"""Parameters given as graph inputs whose meaning the declared shapes fix (lowering/ops/pinned.py):
compiled for that meaning, checked at run time, and an error (AOTC_ERR_INPUT_VALUE) for a value
that means something else; every run compared with onnxruntime."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from program_runner import (  # noqa: E402
    RunFailed,
    assert_close,
    compile_onnx,
    ort_outputs,
    run_program,
)

from aotc.driver import optimize_model  # noqa: E402
from aotc.errors import AotcError  # noqa: E402
from aotc.package.build import build_bundle  # noqa: E402
from aotc.package.loaded import BundleError, LoadedBundle  # noqa: E402
from aotc.package.program import Check, flat_items  # noqa: E402

F, I64 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64
INPUT_VALUE = 13  # AOTC_ERR_INPUT_VALUE


Info = tuple[str, int, list[int]]  # a graph input or output: name, element type, shape


def model_of(nodes: list[onnx.NodeProto], inputs: list[Info], outputs: list[Info]
             ) -> onnx.ModelProto:
    """A model of `nodes` with every input's and output's shape declared (as the ONNX node
    tests write them)."""
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info(*i) for i in inputs],
                          [oh.make_tensor_value_info(*o) for o in outputs])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)


def one_node(op: str, x_shape: list[int], param: str, param_len: int, out_shapes: list[list[int]],
             out_types: list[int] | None = None, **attrs) -> onnx.ModelProto:
    """`op(x, param)` with the parameter a graph input."""
    outs = [f"y{k}" for k in range(len(out_shapes))]
    types = out_types or [F] * len(outs)
    return model_of([oh.make_node(op, ["x", param], outs, **attrs)],
                    [("x", F, x_shape), (param, I64, [param_len])],
                    list(zip(outs, types, out_shapes, strict=True)))


def compare(model: onnx.ModelProto, program, feeds: list[np.ndarray]) -> None:
    for got, want in zip(run_program(program, feeds), ort_outputs(model, feeds), strict=True):
        assert_close(got, want)


def x_of(shape: list[int]) -> np.ndarray:
    return np.random.default_rng(7).standard_normal(shape).astype(np.float32)


def test_reduce_axes_pinned_by_output_shape() -> None:
    model = one_node("ReduceSum", [3, 4, 5], "axes", 1, [[3, 1, 5]], keepdims=1)
    program = compile_onnx(model)
    checks = [i for i in flat_items(program.steps) if isinstance(i, Check)]
    assert len(checks) == 1 and "axes must name axes [1]" in checks[0].what
    x = x_of([3, 4, 5])
    for axes in ([1], [-2]):  # the same axis, named either way
        compare(model, program, [x, np.array(axes, np.int64)])
    for axes in ([0], [2], [3], [-4]):  # another axis, or out of range
        with pytest.raises(RunFailed) as e:
            run_program(program, [x, np.array(axes, np.int64)])
        assert e.value.status == INPUT_VALUE


def test_reduce_size_one_axes_mean_the_same() -> None:
    """A [3, 1, 5] input reduced to [1, 1, 5]: axis 0 must be named, axis 1 may be."""
    model = one_node("ReduceMax", [3, 1, 5], "axes", 2, [[1, 1, 5]], keepdims=1)
    program = compile_onnx(model)
    x = x_of([3, 1, 5])
    compare(model, program, [x, np.array([0, 1], np.int64)])
    compare(model, program, [x, np.array([1, -3], np.int64)])
    for axes in ([0, 0], [0, 2]):  # a repeat; an axis that changes the result
        with pytest.raises(RunFailed):
            run_program(program, [x, np.array(axes, np.int64)])


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceLogSumExp"])
def test_reduce_axes_the_shapes_leave_open_are_chosen_at_run_time(op: str) -> None:
    """[3, 2, 2] to [3, 2] without keepdims is axis 1 or axis 2: both are compiled and the
    run-time axes select one."""
    model = one_node(op, [3, 2, 2], "axes", 1, [[3, 2]], keepdims=0)
    program = compile_onnx(model)
    x = x_of([3, 2, 2])
    for axes in ([1], [2], [-1], [-2]):
        compare(model, program, [x, np.array(axes, np.int64)])
    with pytest.raises(RunFailed):
        run_program(program, [x, np.array([0], np.int64)])


def test_reduce_axes_that_fit_no_shape_are_refused() -> None:
    model = one_node("ReduceSum", [3, 4, 5], "axes", 1, [[3, 4]], keepdims=1)
    model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 7  # [3, 7]: rank 2
    with pytest.raises(AotcError, match="axes"):
        compile_onnx(model)


def test_reshape_shape_pinned() -> None:
    model = one_node("Reshape", [2, 3, 4], "shape", 2, [[2, 12]])
    program = compile_onnx(model)
    x = x_of([2, 3, 4])
    for shape in ([2, 12], [0, -1], [-1, 12], [2, -1]):
        compare(model, program, [x, np.array(shape, np.int64)])
    for shape in ([4, 6], [12, 2], [-1, -1], [0, 0]):
        with pytest.raises(RunFailed):
            run_program(program, [x, np.array(shape, np.int64)])


def test_unsqueeze_and_squeeze_axes_pinned() -> None:
    model = one_node("Unsqueeze", [3, 4], "axes", 1, [[3, 1, 4]])
    program = compile_onnx(model)
    x = x_of([3, 4])
    compare(model, program, [x, np.array([1], np.int64)])
    compare(model, program, [x, np.array([-2], np.int64)])
    with pytest.raises(RunFailed):
        run_program(program, [x, np.array([0], np.int64)])
    model = one_node("Squeeze", [3, 1, 4, 1], "axes", 1, [[3, 4, 1]])
    program = compile_onnx(model)
    x = x_of([3, 1, 4, 1])
    compare(model, program, [x, np.array([-3], np.int64)])
    with pytest.raises(RunFailed):
        run_program(program, [x, np.array([3], np.int64)])


def test_expand_tile_topk_split_pinned() -> None:
    x = x_of([3, 1])
    model = one_node("Expand", [3, 1], "shape", 3, [[2, 3, 6]])
    program = compile_onnx(model)
    for shape in ([2, 3, 6], [2, 1, 6]):
        compare(model, program, [x, np.array(shape, np.int64)])
    with pytest.raises(RunFailed):
        run_program(program, [x, np.array([2, 3, 1], np.int64)])

    model = one_node("Tile", [3, 1], "repeats", 2, [[6, 4]])
    program = compile_onnx(model)
    compare(model, program, [x, np.array([2, 4], np.int64)])
    with pytest.raises(RunFailed):
        run_program(program, [x, np.array([4, 2], np.int64)])

    x = x_of([3, 5])
    model = one_node("TopK", [3, 5], "k", 1, [[3, 2], [3, 2]], [F, I64], axis=1)
    program = compile_onnx(model)
    compare(model, program, [x, np.array([2], np.int64)])
    with pytest.raises(RunFailed):
        run_program(program, [x, np.array([3], np.int64)])

    model = one_node("Split", [3, 5], "split", 2, [[3, 2], [3, 3]], axis=1)
    program = compile_onnx(model)
    compare(model, program, [x, np.array([2, 3], np.int64)])
    with pytest.raises(RunFailed):
        run_program(program, [x, np.array([3, 2], np.int64)])


def test_gpu_target_still_asks_for_a_constant() -> None:
    """The GPU executors run no checks: there the parameter must be a constant."""
    from program_runner import load_graph

    from aotc.compiler import compile_model
    from targets.gpu.target import gpu_target

    model = one_node("ReduceSum", [3, 4, 5], "axes", 1, [[3, 1, 5]], keepdims=1)
    with pytest.raises(AotcError, match="must be a constant"):
        compile_model(load_graph(model), gpu_target("opencl"))


def test_bundle_returns_input_value_error(tmp_path: Path) -> None:
    """Through the C runtime: the header lists the check, a wrong value is the status
    AOTC_ERR_INPUT_VALUE with its message, a right one the right result."""
    model = one_node("ReduceSum", [3, 4, 5], "axes", 1, [[3, 1, 5]], keepdims=1)
    (tmp_path / "m").mkdir()
    onnx.save(model, tmp_path / "m" / "model.onnx")
    optimize_model(tmp_path / "m" / "model.onnx", tmp_path / "b", input_shapes=[])
    header = (tmp_path / "b" / "model.h").read_text()
    assert "Checked at run time" in header and "axes must name axes [1]" in header
    build_bundle(tmp_path / "b", target="shared")
    bundle = LoadedBundle(tmp_path / "b")
    bundle.create(1)
    x = x_of([3, 4, 5])
    got = bundle.run([x, np.array([-2], np.int64)])
    assert_close(got[0], ort_outputs(model, [x, np.array([1], np.int64)])[0])
    with pytest.raises(BundleError) as e:
        bundle.run([x, np.array([2], np.int64)])
    assert e.value.status == INPUT_VALUE
    assert "compiled for" in str(e.value)
    with pytest.raises(BundleError) as e:  # the single-threaded entry point checks too
        bundle.run_single([x, np.array([0], np.int64)])
    assert e.value.status == INPUT_VALUE


def test_shape_of_a_reduction_from_its_elementwise_reader() -> None:
    """`Log(ReduceSum(x, axes))` with only the Log's output declared: inference cannot give
    the sum's shape (the axes are data); the Log's output gives it, and that pins the axes."""
    model = model_of(
        [oh.make_node("ReduceSum", ["x", "axes"], ["s"], keepdims=0),
         oh.make_node("Log", ["s"], ["y"])],
        [("x", F, [3, 4, 5]), ("axes", I64, [2])],
        [("y", F, [4])])
    program = compile_onnx(model)
    x = np.abs(x_of([3, 4, 5])) + 0.1
    compare(model, program, [x, np.array([0, 2], np.int64)])
    compare(model, program, [x, np.array([-1, 0], np.int64)])
    with pytest.raises(RunFailed):
        run_program(program, [x, np.array([0, 1], np.int64)])


def test_resize_sizes_pinned() -> None:
    """Stretched, Resize's sizes are its output's dimensions (scales are not pinned: the
    transform divides by their exact values, which the output shape does not give)."""
    model = model_of(
        [oh.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear")],
        [("x", F, [1, 2, 4, 4]), ("sizes", I64, [4])],
        [("y", F, [1, 2, 7, 3])])
    program = compile_onnx(model)
    x = x_of([1, 2, 4, 4])
    compare(model, program, [x, np.array([1, 2, 7, 3], np.int64)])
    with pytest.raises(RunFailed):
        run_program(program, [x, np.array([1, 2, 3, 7], np.int64)])


@pytest.mark.parametrize("mode, transform, antialias", [
    ("nearest", "asymmetric", 0), ("linear", "half_pixel", 0), ("linear", "half_pixel_symmetric", 0),
    ("cubic", "half_pixel", 0), ("linear", "half_pixel", 1), ("cubic", "pytorch_half_pixel", 1)])
def test_resize_scales_read_at_run_time(mode: str, transform: str, antialias: int) -> None:
    """Scales divide the output position, so the output shape cannot stand for them: the
    coordinate (and filter) tables read them at run time, and a check asks that they give the
    output's length (scale 1 where the output keeps an axis). Antialiased, the downsampled
    axis takes the taps of its least scale."""
    model = model_of(
        [oh.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode, antialias=antialias,
                      coordinate_transformation_mode=transform)],
        [("x", F, [1, 2, 4, 5]), ("scales", F, [4])],
        [("y", F, [1, 2, 7, 3])])
    program = compile_onnx(model)
    x = x_of([1, 2, 4, 5])
    for scales in ([1, 1, 1.75, 0.6], [1, 1, 1.8, 0.7]):  # two scales for each length
        compare(model, program, [x, np.array(scales, np.float32)])
    for scales in ([1, 1, 2.0, 0.6], [1, 1.5, 1.75, 0.6], [1, 1, -1.75, 0.6]):
        with pytest.raises(RunFailed):
            run_program(program, [x, np.array(scales, np.float32)])


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_pads_read_at_run_time(mode: str) -> None:
    """The output's shape fixes each axis's total pad, not its split: the kernel reads the
    begin pads (negative ones crop) and a check asks for the totals."""
    model = model_of(
        [oh.make_node("Pad", ["x", "pads", "", "axes"], ["y"], mode=mode)],
        [("x", F, [2, 5, 4]), ("pads", I64, [4]), ("axes", I64, [2])],
        [("y", F, [2, 8, 3])])
    program = compile_onnx(model)
    x = x_of([2, 5, 4])
    for pads, axes in (([1, 0, 2, -1], [1, 2]), ([3, -1, 0, 0], [1, -1]),
                       ([-1, 2, 0, 1], [-1, 1])):
        compare(model, program, [x, np.array(pads, np.int64), np.array(axes, np.int64)])
    for pads, axes in (([1, 0, 1, -1], [1, 2]), ([1, 0, 2, -1], [0, 2]), ([1, 1, 2, -1], [1, 1])):
        with pytest.raises(RunFailed):
            run_program(program, [x, np.array(pads, np.int64), np.array(axes, np.int64)])


def test_constant_of_shape_pinned() -> None:
    model = model_of(
        [oh.make_node("ConstantOfShape", ["shape"], ["y"],
                      value=oh.make_tensor("v", F, [1], [2.5]))],
        [("shape", I64, [2])],
        [("y", F, [3, 4])])
    program = compile_onnx(model)
    compare(model, program, [np.array([3, 4], np.int64)])
    with pytest.raises(RunFailed):
        run_program(program, [np.array([4, 3], np.int64)])


def test_slice_parameters_read_at_run_time() -> None:
    """Starts, ends, axes and steps all given at run time: any values that give the declared
    output shape run (clamped, negative, backwards), others stop the run."""
    model = model_of([oh.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])],
                     [("x", F, [6, 7, 5]), ("s", I64, [2]), ("e", I64, [2]), ("a", I64, [2]),
                      ("st", I64, [2])], [("y", F, [6, 3, 2])])
    program = compile_onnx(model)
    x = x_of([6, 7, 5])
    good = [([1, 0], [4, 2], [1, 2], [1, 1]),           # rows 1..3, columns 0..1
            ([-2, 4], [-100, 0], [-2, 2], [-2, -3]),     # backwards, negative, clamped
            ([0, 4], [2**62, 10], [2, 1], [3, 1])]       # an end past the axis
    for s, e, a, st in good:
        compare(model, program, [x] + [np.array(v, np.int64) for v in (s, e, a, st)])
    bad = [([1, 0], [5, 2], [1, 2], [1, 1]),            # 4 rows, not 3
           ([1, 0], [4, 2], [1, 1], [1, 1]),            # an axis named twice
           ([1, 0], [4, 2], [1, 2], [1, 0]),            # a zero step
           ([1, 0], [4, 2], [1, 3], [1, 1])]            # an axis out of range
    for s, e, a, st in bad:
        with pytest.raises(RunFailed) as err:
            run_program(program, [x] + [np.array(v, np.int64) for v in (s, e, a, st)])
        assert err.value.status == INPUT_VALUE


def _runs_and_stops(model: onnx.ModelProto, good: list[list[np.ndarray]],
                    bad: list[list[np.ndarray]]) -> None:
    """Each feed of `good` matches onnxruntime; each of `bad` stops with AOTC_ERR_INPUT_VALUE."""
    program = compile_onnx(model)
    for feeds in good:
        compare(model, program, feeds)
    for feeds in bad:
        with pytest.raises(RunFailed) as err:
            run_program(program, feeds)
        assert err.value.status == INPUT_VALUE


def test_range_read_at_run_time() -> None:
    model = model_of([oh.make_node("Range", ["s", "l", "d"], ["y"])],
                     [("s", F, []), ("l", F, []), ("d", F, [])], [("y", F, [4])])
    def f32(*v: float) -> list[np.ndarray]:
        return [np.array(a, np.float32) for a in v]

    _runs_and_stops(model, [f32(1, 3, 0.5), f32(10, -1.9, -3)], [f32(1, 3, 1), f32(1, 3, 0)])


def test_compress_condition_read_at_run_time() -> None:
    """A condition longer than CumSum's direct limit (its running count is blocked), shorter
    than the axis (the positions past it are dropped)."""
    model = model_of([oh.make_node("Compress", ["x", "c"], ["y"], axis=1)],
                     [("x", F, [3, 40]), ("c", onnx.TensorProto.BOOL, [37])], [("y", F, [3, 5])])
    x = x_of([3, 40])
    picks = [np.isin(np.arange(37), kept) for kept in ([0, 1, 2, 3, 4], [3, 17, 18, 30, 36])]
    _runs_and_stops(model, [[x, c] for c in picks],
                    [[x, np.isin(np.arange(37), [1, 2])], [x, np.ones(37, bool)]])


def test_dft_axis_chosen_at_run_time() -> None:
    """Axes 1 and 2 both fit the shapes (axis 0, of one element, too): each is built and the
    run-time value selects; the last axis holds the parts and is no meaning."""
    model = model_of([oh.make_node("DFT", ["x", "", "a"], ["y"])],
                     [("x", F, [1, 6, 6, 2]), ("a", I64, [])], [("y", F, [1, 6, 6, 2])])
    x = x_of([1, 6, 6, 2])
    _runs_and_stops(model, [[x, np.array(a, np.int64)] for a in (1, 2, -2, -3)],
                    [[x, np.array(3, np.int64)], [x, np.array(-5, np.int64)]])


def test_col2im_block_chosen_at_run_time() -> None:
    """Blocks [1, 5] and [5, 1] both read a [1, 5, 5] input over a 5x5 image."""
    model = model_of([oh.make_node("Col2Im", ["x", "i", "b"], ["y"])],
                     [("x", F, [1, 5, 5]), ("i", I64, [2]), ("b", I64, [2])],
                     [("y", F, [1, 1, 5, 5])])
    x = x_of([1, 5, 5])
    image = np.array([5, 5], np.int64)
    _runs_and_stops(model, [[x, image, np.array(b, np.int64)] for b in ([1, 5], [5, 1])],
                    [[x, image, np.array([5, 5], np.int64)],
                     [x, np.array([5, 6], np.int64), np.array([1, 5], np.int64)]])


def test_affine_grid_size_pinned() -> None:
    model = model_of([oh.make_node("AffineGrid", ["t", "s"], ["y"])],
                     [("t", F, [2, 2, 3]), ("s", I64, [4])], [("y", F, [2, 4, 5, 2])])
    t = x_of([2, 2, 3])
    _runs_and_stops(model, [[t, np.array([2, c, 4, 5], np.int64)] for c in (1, 3)],
                    [[t, np.array([2, 3, 5, 4], np.int64)]])


def test_dropout_training_mode_checked_at_run_time() -> None:
    """Training off, or ratio 0, is the identity; training with a ratio stops the run."""
    model = model_of([oh.make_node("Dropout", ["x", "r", "t"], ["y", "m"])],
                     [("x", F, [3, 4]), ("r", F, []), ("t", onnx.TensorProto.BOOL, [])],
                     [("y", F, [3, 4]), ("m", onnx.TensorProto.BOOL, [3, 4])])
    x = x_of([3, 4])

    def feeds(ratio: float, training: bool) -> list[np.ndarray]:
        return [x, np.array(ratio, np.float32), np.array(training)]

    _runs_and_stops(model, [feeds(0.5, False), feeds(0.0, True)], [feeds(0.5, True)])


def test_stft_step_and_length_at_run_time() -> None:
    """frame_step read at run time; frame_length 16 or 17 give the 9 bins, and both give 7
    frames with step 7 (16 also with 8): each is built, the run-time value selects."""
    model = model_of([oh.make_node("STFT", ["x", "s", "", "f"], ["y"])],
                     [("x", F, [1, 64, 1]), ("s", I64, []), ("f", I64, [])],
                     [("y", F, [1, 7, 9, 2])])
    x = x_of([1, 64, 1])

    def feeds(step: int, frame: int) -> list[np.ndarray]:
        return [x, np.array(step, np.int64), np.array(frame, np.int64)]

    _runs_and_stops(model, [feeds(8, 16), feeds(7, 16), feeds(7, 17)],
                    [feeds(9, 16), feeds(8, 17), feeds(0, 16), feeds(7, 15)])


def test_run_time_length_bound_by_a_declared_reader() -> None:
    """Range(0, n) has a length inference names but cannot compute (unk__0); the declared
    output of the element-wise chain reading it binds it (both operands of the Add carry it),
    and the Range is checked to give it."""
    f = onnx.TensorProto.FLOAT
    nodes = [oh.make_node("Constant", [], ["zero"], value=oh.make_tensor("z", f, [], [0.0])),
             oh.make_node("Constant", [], ["one"], value=oh.make_tensor("o", f, [], [1.0])),
             oh.make_node("Constant", [], ["two"], value=oh.make_tensor("t", f, [], [2.0])),
             oh.make_node("Cast", ["n"], ["nf"], to=f),
             oh.make_node("Range", ["zero", "nf", "one"], ["r"]),
             oh.make_node("Mul", ["r", "two"], ["r2"]),
             oh.make_node("Cos", ["r"], ["c"]),
             oh.make_node("Add", ["r2", "c"], ["y"])]
    model = model_of(nodes, [("n", I64, [])], [("y", F, [6])])
    _runs_and_stops(model, [[np.array(6, np.int64)]],
                    [[np.array(5, np.int64)], [np.array(7, np.int64)]])


def test_resize_align_corners_scales_must_be_exact() -> None:
    """align_corners from run-time scales: onnxruntime and ONNX's reference agree only where
    scale * length is the output's length exactly, which the check asks."""
    model = model_of([oh.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear",
                                   coordinate_transformation_mode="align_corners")],
                     [("x", F, [1, 1, 4, 5]), ("scales", F, [4])], [("y", F, [1, 1, 8, 10])])
    x = x_of([1, 1, 4, 5])
    _runs_and_stops(model, [[x, np.array([1, 1, 2, 2], np.float32)]],
                    [[x, np.array([1, 1, 2.1, 2], np.float32)]])


def test_resize_roi_read_at_run_time() -> None:
    model = model_of([oh.make_node("Resize", ["x", "roi", "", "sizes"], ["y"], mode="linear",
                                   coordinate_transformation_mode="tf_crop_and_resize",
                                   axes=[2, 3], extrapolation_value=-1.0)],
                     [("x", F, [1, 2, 6, 6]), ("roi", F, [4]), ("sizes", I64, [2])],
                     [("y", F, [1, 2, 4, 5])])
    x = x_of([1, 2, 6, 6])
    sizes = np.array([4, 5], np.int64)
    _runs_and_stops(model, [[x, np.array(r, np.float32), sizes] for r in
                            ([0.2, 0.1, 0.7, 0.9], [-0.2, 0.0, 1.3, 0.5])],
                    [[x, np.array([0.2, 0.1, 0.7, 0.9], np.float32), np.array([4, 6], np.int64)]])


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
def test_resize_sizes_with_a_kept_aspect_ratio_at_run_time(policy: str) -> None:
    """The common scale is computed from the run-time sizes; a check asks that it gives the
    output's shape."""
    out = [1, 1, 5, 8] if policy == "not_larger" else [1, 1, 8, 13]
    model = model_of([oh.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="nearest",
                                   keep_aspect_ratio_policy=policy, axes=[2, 3])],
                     [("x", F, [1, 1, 5, 8]), ("sizes", I64, [2])], [("y", F, out)])
    x = x_of([1, 1, 5, 8])
    good = [5, 9] if policy == "not_larger" else [7, 13]
    bad = [4, 9] if policy == "not_larger" else [9, 9]
    _runs_and_stops(model, [[x, np.array(good, np.int64)]], [[x, np.array(bad, np.int64)]])


@pytest.mark.parametrize("out", [[3, 7, 9], [4, 10, 5], [3, 9, 8]])
def test_center_crop_pad_shape_pinned(out: list[int]) -> None:
    """Cropped or padded around the centre on axes 1 and 2 (odd differences put the odd
    element at the end), the run-time shape pinned to the output's."""
    model = model_of([oh.make_node("CenterCropPad", ["x", "s"], ["y"], axes=[-2, -1])],
                     [("x", F, [out[0], 8, 6]), ("s", I64, [2])], [("y", F, out)])
    x = x_of([out[0], 8, 6])
    _runs_and_stops(model, [[x, np.array(out[1:], np.int64)]],
                    [[x, np.array([out[1], out[2] + 1], np.int64)]])
