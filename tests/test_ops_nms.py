"""NonMaxSuppression (lowering/ops/nn/nms.py): the candidates in score order, the greedy pass as a
hand-written serial nest (lowering/nest.py), the selected rows at the computed length. Each
case compared with onnxruntime on random boxes (distinct scores: onnxruntime's priority queue
leaves the order of equal scores to its heap), with the limit and thresholds as constants or
as run-time inputs; a bundle reports the run's row count."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernel_harness import run_kernel  # noqa: E402
from program_runner import RunFailed, compile_onnx, ort_outputs, run_program  # noqa: E402

from aotc.driver import compile_file, optimize_model  # noqa: E402
from aotc.errors import AotcError  # noqa: E402
from aotc.package.build import build_bundle, run_model_process  # noqa: E402
from lowering import te  # noqa: E402
from lowering.loop_ir import BufLoad, For, Seq, Store  # noqa: E402
from lowering.nest import nest_stage  # noqa: E402
from lowering.search.default_space import DefaultSpace  # noqa: E402
from targets.cpu.target import host_target  # noqa: E402

T = onnx.TensorProto
PARAMS = {"m": (T.INT64, np.int64), "iou": (T.FLOAT, np.float32), "st": (T.FLOAT, np.float32)}


def _boxes(rng: np.random.Generator, b: int, n: int, center: int, flip: bool) -> np.ndarray:
    """Boxes that overlap often: corners in [0, 1) around a few clusters."""
    centers = rng.random((b, 4, 2))[:, rng.integers(0, 4, n)]  # [b, n, 2]
    size = 0.05 + 0.3 * rng.random((b, n, 2))
    if center:
        return np.concatenate([centers, size], axis=2).astype(np.float32)
    lo, hi = centers - size / 2, centers + size / 2
    y1x1 = np.stack([lo[..., 1], lo[..., 0]], axis=2)
    y2x2 = np.stack([hi[..., 1], hi[..., 0]], axis=2)
    if flip:  # corners in any order: the other diagonal pair
        y1x1, y2x2 = y2x2, y1x1
    return np.concatenate([y1x1, y2x2], axis=2).astype(np.float32)


def _scores(rng: np.random.Generator, b: int, c: int, n: int) -> np.ndarray:
    """Distinct scores (a shuffled ramp per class)."""
    ramp = (np.arange(b * c * n) + 1) / (b * c * n + 1)
    return rng.permutation(ramp).reshape(b, c, n).astype(np.float32)


def _model(b: int, c: int, n: int, params: dict[str, float | int | None], *,
           run_time: tuple[str, ...] = (), center: int = 0, out_rows: int | None = None
           ) -> onnx.ModelProto:
    """NMS over graph inputs boxes and scores; each of max_output_boxes_per_class ("m"),
    iou_threshold ("iou") and score_threshold ("st") a constant, a graph input (`run_time`)
    or absent (None)."""
    names, inits = [], []
    inputs = [oh.make_tensor_value_info("boxes", T.FLOAT, [b, n, 4]),
              oh.make_tensor_value_info("scores", T.FLOAT, [b, c, n])]
    for name in ("m", "iou", "st"):
        value = params.get(name)
        if value is None and name not in run_time:
            names.append("")
            continue
        names.append(name)
        if name in run_time:
            inputs.append(oh.make_tensor_value_info(name, PARAMS[name][0], [1]))
        else:
            inits.append(oh.make_tensor(name, PARAMS[name][0], [1], [value]))
    while names and names[-1] == "":
        names.pop()
    node = oh.make_node("NonMaxSuppression", ["boxes", "scores", *names], ["y"], name="nms",
                        center_point_box=center)
    graph = oh.make_graph([node], "g", inputs,
                          [oh.make_tensor_value_info("y", T.INT64, [out_rows, 3])], inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)], ir_version=10)


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("b,c,n,center,flip,params", [
    (1, 1, 6, 0, False, {"m": 3, "iou": 0.5}),
    (2, 3, 40, 0, True, {"m": 5, "iou": 0.3, "st": 0.4}),
    (2, 2, 33, 1, False, {"m": 100, "iou": 0.45, "st": 0.1}),
    (1, 4, 64, 1, False, {"m": 8, "iou": 0.0}),                  # any overlap suppresses
    (3, 1, 25, 0, False, {"m": 25, "iou": 1.0, "st": 0.7}),      # nothing suppresses
    (1, 2, 17, 0, False, {"m": 2, "iou": None, "st": None}),     # default IoU 0, no floor
])
def test_nms_against_onnxruntime(b, c, n, center, flip, params) -> None:
    rng = np.random.default_rng(n)
    model = _model(b, c, n, params, center=center)
    program = compile_onnx(model)
    bound = b * c * min(n, params["m"])
    assert program.outputs[0].computed_axis == 0 and program.outputs[0].shape == (bound, 3)
    for _ in range(3):
        x = [_boxes(rng, b, n, center, flip), _scores(rng, b, c, n)]
        (got,) = run_program(program, x)
        (want,) = ort_outputs(model, x)
        assert len(want) > 0
        _same(got, want)


def test_nms_sorts_only_the_boxes_above_the_score_threshold() -> None:
    """A detector's scores: most boxes under the threshold (left out before the sort), a
    class with none above it, a NaN score (never above it), a limit some classes reach."""
    rng = np.random.default_rng(5)
    b, c, n = 2, 4, 300
    model = _model(b, c, n, {"m": 6, "iou": 0.4, "st": 0.6})
    program = compile_onnx(model)
    for _ in range(3):
        scores = (rng.random((b, c, n)) ** 6).astype(np.float32)  # ~8 % above 0.6
        scores[0, 1] = rng.random(n).astype(np.float32) * 0.6  # none above
        scores[1, 2, rng.integers(0, n, 5)] = np.nan
        x = [_boxes(rng, b, n, 0, False), scores]
        (got,) = run_program(program, x)
        (want,) = ort_outputs(model, x)
        assert 0 < len(want)
        _same(got, want)


@pytest.mark.parametrize("n", [1, 2, 37, 256])
@pytest.mark.parametrize("iou", [1.0, 0.5])
def test_nms_orders_equal_scores_by_box_index(n: int, iou: float) -> None:
    """Scores from a few values: the candidates' order (the nest's merge sort) puts equal
    scores lower index first, as onnxruntime does; with IoU 1 nothing is suppressed, so the
    output is the whole order."""
    rng = np.random.default_rng(n)
    model = _model(1, 2, n, {"m": n, "iou": iou, "st": 0.15})
    program = compile_onnx(model)
    for _ in range(2):
        scores = (rng.integers(0, 6, (1, 2, n)) / 5).astype(np.float32)
        x = [_boxes(rng, 1, n, 0, False), scores]
        (got,) = run_program(program, x)
        (want,) = ort_outputs(model, x)
        _same(got, want)


def test_nms_with_run_time_limit_and_thresholds() -> None:
    """max_output_boxes_per_class, iou_threshold and score_threshold as graph inputs: one
    program bounded by every box of every class, any values at run time (a negative limit
    counts as 0, as onnxruntime's)."""
    b, c, n = 2, 3, 30
    model = _model(b, c, n, {}, run_time=("m", "iou", "st"))
    program = compile_onnx(model)
    assert program.outputs[0].shape == (b * c * n, 3)
    rng = np.random.default_rng(1)
    x = [_boxes(rng, b, n, 0, False), _scores(rng, b, c, n)]
    for m, iou, st in [(3, 0.5, 0.2), (0, 0.5, 0.2), (-4, 0.5, 0.0), (1000, 0.2, 0.5),
                       (7, 1.0, 0.0), (30, 0.0, 0.9)]:
        args = [*x, np.array([m], np.int64), np.array([iou], np.float32),
                np.array([st], np.float32)]
        (got,) = run_program(program, args)
        (want,) = ort_outputs(model, args)
        _same(got, want)


def test_nms_without_a_limit_selects_nothing() -> None:
    model = _model(1, 2, 8, {"m": None, "iou": 0.5})
    program = compile_onnx(model)
    x = [_boxes(np.random.default_rng(2), 1, 8, 0, False),
         _scores(np.random.default_rng(3), 1, 2, 8)]
    (got,) = run_program(program, x)
    (want,) = ort_outputs(model, x)
    assert got.shape == want.shape == (0, 3)


def test_nms_declared_row_count_is_checked_when_it_runs() -> None:
    """A declared output length is compiled as such: data that select another number of
    boxes stop the run (status 13) instead of giving a wrong result."""
    b, c, n = 1, 1, 12
    rng = np.random.default_rng(4)
    x = [_boxes(rng, b, n, 0, False), _scores(rng, b, c, n)]
    free = _model(b, c, n, {"m": 12, "iou": 0.3})
    (want,) = ort_outputs(free, x)
    rows = len(want)
    (got,) = run_program(compile_onnx(_model(b, c, n, {"m": 12, "iou": 0.3}, out_rows=rows)), x)
    _same(got, want)
    wrong = compile_onnx(_model(b, c, n, {"m": 12, "iou": 0.3}, out_rows=rows + 1))
    with pytest.raises(RunFailed) as e:
        run_program(wrong, x)
    assert e.value.status == 13


def test_nms_declared_empty_output_is_checked_when_it_runs() -> None:
    """A declared [0, 3] output with a run-time limit: a limit of 0 runs, a limit that
    selects boxes stops the run (status 13)."""
    program = compile_onnx(_model(1, 1, 6, {"iou": 0.5}, run_time=("m",), out_rows=0))
    x = [_boxes(np.random.default_rng(10), 1, 6, 0, False),
         _scores(np.random.default_rng(11), 1, 1, 6)]
    (got,) = run_program(program, [*x, np.array([0], np.int64)])
    assert got.shape == (0, 3)
    with pytest.raises(RunFailed) as e:
        run_program(program, [*x, np.array([3], np.int64)])
    assert e.value.status == 13


def test_nms_iou_threshold_out_of_range() -> None:
    with pytest.raises(AotcError, match=r"iou_threshold must be in \[0, 1\], got 1.5"):
        compile_onnx(_model(1, 1, 4, {"m": 2, "iou": 1.5}))
    program = compile_onnx(_model(1, 1, 4, {"m": 2}, run_time=("iou",)))
    x = [_boxes(np.random.default_rng(5), 1, 4, 0, False),
         _scores(np.random.default_rng(6), 1, 1, 4)]
    run_program(program, [*x, np.array([0.5], np.float32)])
    with pytest.raises(RunFailed) as e:
        run_program(program, [*x, np.array([-0.1], np.float32)])
    assert e.value.status == 13


def test_nms_bundle_reports_the_row_count(tmp_path: Path) -> None:
    b, c, n = 2, 2, 20
    model = _model(b, c, n, {"m": 4, "iou": 0.4, "st": 0.3})
    (tmp_path / "m").mkdir()
    onnx.save(model, tmp_path / "m" / "nms.onnx")
    optimize_model(tmp_path / "m" / "nms.onnx", tmp_path / "b", input_shapes=[])
    build_bundle(tmp_path / "b")
    assert "output 0 axis 0: at most 16" in (tmp_path / "b" / "model.h").read_text()
    rng = np.random.default_rng(8)
    for _ in range(2):
        x = [_boxes(rng, b, n, 0, False), _scores(rng, b, c, n)]
        (want,) = ort_outputs(model, x)
        (got,) = run_model_process(tmp_path / "b", x)
        _same(got, want)


def test_nms_does_not_compile_for_gpu_targets(tmp_path: Path) -> None:
    path = tmp_path / "nms.onnx"
    onnx.save(_model(1, 1, 8, {"m": 2, "iou": 0.5}, out_rows=2), path)
    with pytest.raises(AotcError, match="nms"):
        compile_file(path, input_shapes=[], target="opencl")


def test_hand_written_nest_between_te_stages() -> None:
    """A stage with a hand-written nest (a running maximum, each element depending on the
    one before) reads a te stage and is read by one, all in one kernel of the default space;
    it gets a buffer and its own scratch, and no knobs."""
    n = 37
    x = te.placeholder((n,), "float32", "x")
    doubled = te.compute((n,), lambda i: x[i] * 2.0, name="doubled")

    def write(out, buffer_of, scratch):
        src = buffer_of(doubled)
        best = scratch("best", "float32", (1,))
        i = te.Var("i")
        return Seq([Store(best, te.const(0, "int64"), BufLoad(src, te.const(0, "int64"))),
                    For(i, te.const(n, "int64"), "serial", Seq([
                        Store(best, te.const(0, "int64"),
                              te.maximum(BufLoad(best, te.const(0, "int64")),
                                         BufLoad(src, i))),
                        Store(out, i, BufLoad(best, te.const(0, "int64")))]))])

    running = nest_stage((n,), "float32", "running_max", [doubled], write)
    y = te.compute((n,), lambda i: running[i] + 1.0, name="y")
    space = DefaultSpace([x], [y], [None], host_target())
    assert all(t is not running for t in space.stages)  # (the stages with knobs)
    kernel = space.build(space.default_config()).kernel
    xv = np.random.default_rng(9).standard_normal(n).astype(np.float32)
    (got,) = run_kernel(kernel, [xv])
    np.testing.assert_array_equal(got, np.maximum.accumulate(xv * 2) + 1)
