"""The auto-scheduler: schedule spaces from static analysis, every option a correct kernel, the
annealing search, the tuning log, and `aotc optimize --tune` end to end."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from program_runner import compile_onnx, load_graph, run_program

from aotc.compiler import _kernel_spaces, compile_model
from aotc.driver import make_tuner, optimize_model
from aotc.errors import AotcError
from lowering import te
from lowering.default_schedule import default_schedule
from lowering.loop_ir import Seq, format_kernel
from lowering.lower import lower_kernel
from lowering.search.anneal import (
    all_configs,
    anneal,
    choose_by_model,
    config_key,
    neighbours,
    random_config,
    space_size,
)
from lowering.search.default_space import DefaultSpace
from lowering.search.space import BuiltKernel, Config, Knob, ScheduleSpace
from lowering.search.tuner import Tuner
from lowering.search.tuning_log import TuningLog, space_hash
from targets.cpu.measure import Measurer
from targets.cpu.target import NAMED_TARGETS, host_target

ROOT = Path(__file__).resolve().parent.parent
MLP = ROOT / "models" / "mlp.onnx"
TARGET = host_target()  # tests that run the kernels they build
STRUCTURE = NAMED_TARGETS["cpu-avx512"]  # tests of generated structure name their target
LANES = STRUCTURE.vector_lanes_f32


def _space(inputs, outputs, target=TARGET) -> DefaultSpace:
    return DefaultSpace(inputs, outputs, [None] * len(inputs), target)


def matmul(m: int, k: int, n: int, target=TARGET):
    a = te.placeholder((m, k), "float32", "A")
    b = te.placeholder((k, n), "float32", "B")
    r = te.reduce_axis(k, "k")
    c = te.compute((m, n), lambda i, j: te.reduce_sum(a[i, r.var] * b[r.var, j], [r]), name="C")
    return _space([a, b], [c], target), lambda x, y: x @ y


def depthwise(c: int, h: int, w: int, target=TARGET):
    x = te.placeholder((c, h + 2, w + 2), "float32", "X")
    f = te.placeholder((c, 3, 3), "float32", "F")
    ry, rx = te.reduce_axis(3, "ry"), te.reduce_axis(3, "rx")
    out = te.compute((c, h, w), lambda ci, y, xi: te.reduce_sum(
        x[ci, y + ry.var, xi + rx.var] * f[ci, ry.var, rx.var], [ry, rx]), name="D")

    def ref(xa, fa):
        return sum(xa[:, i:i + h, j:j + w] * fa[:, i, j][:, None, None]
                   for i in range(3) for j in range(3))

    return _space([x, f], [out], target), ref


def softmax_rows(rows: int, cols: int, target=TARGET):
    """Three stages (max, sum of exp, divide): knobs for each."""
    x = te.placeholder((rows, cols), "float32", "X")
    r1, r2 = te.reduce_axis(cols, "r1"), te.reduce_axis(cols, "r2")
    mx = te.compute((rows, 1), lambda i, _: te.reduce_max(x[i, r1.var], [r1]), name="mx")
    sm = te.compute((rows, 1), lambda i, _: te.reduce_sum(
        te.unary("exp", x[i, r2.var] - mx[i, 0]), [r2]), name="sm")
    out = te.compute((rows, cols), lambda i, j: te.unary("exp", x[i, j] - mx[i, 0]) / sm[i, 0],
                     name="out")

    def ref(xa):
        e = np.exp(xa - xa.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    return _space([x], [out], target), ref


def transpose3(a: int, b: int, c: int):
    p = te.placeholder((a, b, c), "float32", "P")
    t = te.compute((b, c, a), lambda i, j, k: p[k, i, j], name="T")
    return _space([p], [t]), lambda x: x.transpose(1, 2, 0)


def _knobs(space: ScheduleSpace) -> dict[str, tuple]:
    return {k.name: k.options for k in space.knobs}


# spaces from static analysis ---------------------------------------------------------------
def test_knobs_follow_loop_structure() -> None:
    mm = _knobs(matmul(64, 96, 300, STRUCTURE)[0])
    assert mm["s0.vec"][0] == 0 and -1 in mm["s0.vec"]  # vectorise j (default) or nothing
    assert mm["s0.block"][0] == 256 and 0 in mm["s0.block"]  # REDUCTION_BLOCK first
    assert "s0.split" not in mm and "s0.unroll" not in mm and "s0.fuse" not in mm
    # an output row shorter than a vector: the rule keeps the reduce loop innermost
    assert _knobs(matmul(64, 96, LANES - 2, STRUCTURE)[0])["s0.vec"] == (-1, 0, 1)  # 1: the 64 rows
    assert "s0.block" not in _knobs(matmul(8, 8, 24, STRUCTURE)[0])  # nothing long enough to block

    dw = _knobs(depthwise(32, 56, 56, STRUCTURE)[0])
    assert dw["s0.unroll"] == (True, False)  # the 3x3 window
    assert dw["s0.fuse"] == (0, 1)  # channels and rows fused, or channels alone
    assert set(dw["s0.vec"]) >= {0, 1, -1}

    ew = te.placeholder((64, 30000), "float32", "Z")
    ew_space = _space([ew], [te.compute((64, 30000), lambda i, j: ew[i, j] * 2.0, name="E")],
                      STRUCTURE)
    assert _knobs(ew_space)["s0.split"][0] == 0  # the rule splits only a lone loop
    lone = te.placeholder((100000,), "float32", "L")
    lone_space = _space([lone], [te.compute((100000,), lambda i: lone[i] + 1.0, name="E")],
                        STRUCTURE)
    assert _knobs(lone_space)["s0.split"][0] == 4096
    tiny = te.placeholder((4,), "float32", "T")
    tiny_out = te.compute((4,), lambda i: tiny[i] + 1.0, name="E")
    assert _space([tiny], [tiny_out], STRUCTURE).knobs == []

    sm = _knobs(softmax_rows(64, 1000, STRUCTURE)[0])
    assert any(n.startswith("s0.") for n in sm) and any(n.startswith("s2.") for n in sm)


def test_default_config_is_the_default_schedule() -> None:
    for space, _ in (matmul(64, 96, 300), depthwise(8, 20, 20), softmax_rows(16, 300)):
        untuned = lower_kernel("k", space.inputs, space.outputs,
                               lambda t: default_schedule(t, TARGET.vector_lanes_f32))
        built = space.build(space.default_config()).kernel
        assert format_kernel(built, canonical=True) == format_kernel(untuned, canonical=True)


@pytest.mark.parametrize("make,shape", [
    (matmul, (6, 40, 100)),
    (depthwise, (4, 9, 37)),
    (softmax_rows, (32, 1500)),
    (transpose3, (20, 3, 33)),
])
def test_every_option_builds_and_computes_the_result(make, shape) -> None:
    space, ref = make(*shape)
    # every option of every knob, beside the default and in a few random combinations
    default = space.default_config()
    rng = random.Random(0)
    configs = [default, *neighbours(default, space.knobs),
               *(random_config(space.knobs, rng) for _ in range(3))]
    assert len(space.knobs) >= 2
    measurer = Measurer(space, sample_seconds=1e-5, samples=1)
    want = ref(*measurer.inputs)
    for config, m in zip(configs, measurer.measure(configs), strict=True):
        np.testing.assert_allclose(m.outputs[0], want, rtol=1e-4, atol=1e-4,
                                   err_msg=config_key(config))
        assert m.seconds > 0


def test_cost_model_prefers_contiguous_vectors() -> None:
    z = te.placeholder((64, 3000), "float32", "Z")
    space = _space([z], [te.compute((64, 3000), lambda i, j: te.unary("exp", z[i, j]), name="E")])
    assert space.cost({"s0.vec": 0, "s0.split": 0}) < space.cost({"s0.vec": 1, "s0.split": 0})
    mm, _ = matmul(64, 96, 300)
    assert mm.cost({"s0.vec": 0, "s0.block": 256}) < mm.cost({"s0.vec": -1, "s0.block": 256})


# search -------------------------------------------------------------------------------------
class _Synthetic(ScheduleSpace):
    """A space whose 'run time' is a function with one minimum, and a noisy model of it."""

    kind = "synthetic"

    def __init__(self, target_point: dict[str, int], options: int = 8) -> None:
        super().__init__([], [], [], TARGET)
        self.knobs = [Knob(f"x{i}", tuple(range(options))) for i in range(4)]
        self.point = target_point
        self.noise = random.Random(1)

    def true_time(self, c: Config) -> float:
        d = sum((int(c[k]) - v) ** 2 for k, v in self.point.items())  # type: ignore[call-overload]
        return 1.0 + d + 0.5 * abs(int(c["x0"]) - int(c["x1"]))  # type: ignore[call-overload]

    def cost(self, config: Config) -> float:
        return self.true_time(config) * (1 + 0.3 * self.noise.random())

    def threaded_cost(self, config: Config, one_core: float | None = None) -> float:
        return self.cost(config) if one_core is None else one_core

    def build(self, config: Config, name: str = "k") -> BuiltKernel:
        raise AssertionError("not a real kernel")


def test_anneal_finds_the_optimum_of_a_synthetic_function() -> None:
    space = _Synthetic({"x0": 5, "x1": 6, "x2": 1, "x3": 7})
    evaluated: list[int] = []

    def evaluate(configs: list[Config]) -> list[float]:
        evaluated.append(len(configs))
        return [space.true_time(c) for c in configs]

    rng = random.Random(0)
    starts = [space.default_config(), {k.name: 7 for k in space.knobs}]
    result = anneal(space.knobs, evaluate, space.cost, starts, budget_s=1e9, rng=rng,
                    max_evals=120)
    assert result.best == {"x0": 5, "x1": 6, "x2": 1, "x3": 7}
    assert sum(evaluated) <= 120 < space_size(space.knobs)
    assert len(evaluated) > 5  # measured in batches, not one by one or all at once


def test_cost_model_alone_picks_its_argmin() -> None:
    space = _Synthetic({"x0": 2, "x1": 2, "x2": 3, "x3": 1}, options=4)  # 256: all ranked
    chosen = choose_by_model(space)
    assert space.true_time(chosen) <= 2.0  # the minimum (1.0) or next to it, despite 30% noise


# tuning log -------------------------------------------------------------------------------
def test_tuning_log_round_trip_and_bad_lines(tmp_path: Path) -> None:
    space, _ = matmul(64, 96, 300)
    path = tmp_path / "sub" / "log.jsonl"
    warnings: list[str] = []
    log = TuningLog(path, warnings.append)
    best = {"s0.vec": -1, "s0.block": 64}
    log.add(space_hash(space), space, {"s0.vec": 0, "s0.block": 0}, 2e-4, 3e-4)
    log.add(space_hash(space), space, best, 1e-4, 3e-4)
    with path.open("a") as f:
        f.write("{not json\n")
        f.write(json.dumps({"key": "x"}) + "\n")
    again = TuningLog(path, warnings.append)
    assert len(warnings) == 2 and ":3:" in warnings[0]
    same, _ = matmul(64, 96, 300)  # identical computation, new tensors: same key
    assert again.lookup(same) == best
    assert again.lookup(matmul(64, 96, 200)[0]) is None
    # an entry whose knobs no longer exist is ignored, not used
    stale = TuningLog(path, warnings.append)
    stale.best[space_hash(space)].config = {"s0.vec": 99, "s0.block": 64}
    assert stale.lookup(space) is None
    with pytest.raises(AotcError, match="folder"):
        TuningLog(tmp_path, warnings.append)


def test_identical_kernels_are_tuned_once(tmp_path: Path) -> None:
    spaces = [matmul(16, 64, 100)[0], matmul(16, 64, 100)[0], transpose3(20, 3, 33)[0]]
    tuner = Tuner(60.0, tmp_path / "log.jsonl")  # small spaces: measured exhaustively
    tuner.tune(spaces)
    assert len(tuner.results) == 2
    assert len((tmp_path / "log.jsonl").read_text().splitlines()) == 2
    assert tuner.choose(spaces[1]) == tuner.choose(spaces[0])


def test_second_compile_reuses_the_log(tmp_path: Path) -> None:
    log = tmp_path / "tuning.jsonl"
    x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    sess = ort.InferenceSession(str(MLP))
    want = sess.run(None, {sess.get_inputs()[0].name: x})[0]

    first = Tuner(60.0, log)  # mlp's spaces are small: measured exhaustively well within it
    prog = compile_model(load_graph(MLP), TARGET, tuner=first)
    assert first.measure_calls > 0 and first.results
    assert len(log.read_text().splitlines()) == len(first.results)
    np.testing.assert_allclose(run_program(prog, [x])[0], want, rtol=1e-4, atol=1e-5)

    second = Tuner(3.0, log)
    prog2 = compile_model(load_graph(MLP), TARGET, tuner=second)
    assert second.measure_calls == 0 and second.reused == len(first.results)
    np.testing.assert_allclose(run_program(prog2, [x])[0], want, rtol=1e-4, atol=1e-5)
    # the same schedules, from the log; without --tune the log is still read when named
    third = Tuner(0.0, log)
    for space in _kernel_spaces(load_graph(MLP), TARGET, None):
        assert second.choose(space) == third.choose(space) == first.choose(space)


def test_tuned_compile_lowers_and_builds_each_node_once(tmp_path: Path, monkeypatch) -> None:
    """--tune sees every kernel's space before any is built, from the one lowering that the
    build then uses (no throw-away lowering pass): each node is lowered once."""
    from aotc import compiler

    lowered: list[str] = []
    real_lower = compiler._Compiler.lower_node

    def counting_lower(self, node):  # type: ignore[no-untyped-def]
        lowered.append(node.name)
        return real_lower(self, node)

    monkeypatch.setattr(compiler._Compiler, "lower_node", counting_lower)
    model = load_graph(MLP)
    nodes = [n.name for n in model.graph if n.op_type != "Constant"]
    tuner = Tuner(60.0, tmp_path / "log.jsonl")
    spaces: list = []
    real_tune = tuner.tune
    monkeypatch.setattr(tuner, "tune", lambda sp: (spaces.extend(sp), real_tune(sp)))
    compile_model(model, TARGET, tuner=tuner)
    assert sorted(lowered) == sorted(nodes)
    assert spaces and tuner.results


def test_untuned_compile_is_correct() -> None:
    prog = compile_onnx(str(MLP))
    x = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)
    sess = ort.InferenceSession(str(MLP))
    want = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    np.testing.assert_allclose(run_program(prog, [x])[0], want, rtol=1e-4, atol=1e-5)


# command line -----------------------------------------------------------------------------
def _aotc(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aotc", *map(str, args)], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, **(env or {})})


def test_optimize_tune_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    cache = tmp_path / "cache"
    proc = _aotc("optimize", MLP, "-o", out, "--tune", 5, env={"XDG_CACHE_HOME": str(cache)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    log = cache / "aotc" / "tuning.jsonl"  # the default log lives in the user's cache
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert lines and all(e["target"] == "cpu" and e["seconds"] > 0 for e in lines)
    assert "kernels measured" in proc.stdout
    proc = _aotc("verify", MLP, out)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_bad_tuning_options(tmp_path: Path) -> None:
    proc = _aotc("optimize", MLP, "-o", tmp_path / "b", "--tune", "-2")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--tune must be" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "b").exists()
    with pytest.raises(AotcError, match="--tune must be"):
        make_tuner(float("nan"), None)
    with pytest.raises(AotcError, match="is a folder"):
        make_tuner(1.0, tmp_path)
    with pytest.raises(AotcError, match="cannot run code for target 'aarch64'"):
        optimize_model(MLP, tmp_path / "c", input_shapes=[], target="aarch64",
                       tuner=make_tuner(1.0, tmp_path / "log.jsonl"))


def test_measurer_times_each_distinct_kernel_once():
    """Pixel-mode K blocks at or above the channel run build the same kernel: a batch (or a
    later one) holding several of them compiles and times it once."""
    import numpy as np

    from lowering.ops import OPS, OpContext
    from lowering.templates.gemm import GemmTemplate
    from targets.cpu.measure import Measurer

    x = te.placeholder((1, 64, 6, 6), "float32", "x")
    w = te.placeholder((32, 64, 3, 3), "float32", "w")
    b = te.placeholder((32,), "float32", "b")
    wv = np.random.default_rng(0).standard_normal((32, 64, 3, 3)).astype(np.float32)
    ctx = OpContext(node="n", op_type="Conv", attrs={"pads": [1, 1, 1, 1]}, inputs=[x, w, b],
                    consts=[None, wv, None], out_shapes=[(1, 32, 6, 6)], out_dtypes=["float32"])
    space = GemmTemplate.match([x, w, b], OPS["Conv"](ctx), [None, wv, None], host_target())
    base = {**space.default_config(), "b": "pixels", "block": "14x2"}
    same = [{**base, "kc": kc} for kc in (128, 256, 512)]  # all >= the 64-channel run
    m = Measurer(space, sample_seconds=1e-4, samples=1)
    first = m.measure(same)
    assert first[0] is first[1] is first[2]
    other = m.measure([same[1], {**base, "kc": 576}])
    assert other[0] is first[0] and other[1] is not first[0]


@pytest.mark.parametrize("c,h,k,kh,pads", [
    (64, 10, 32, 3, (1, 1, 1, 1)),   # K = 576 = 9 taps x a 64-channel run
    (150, 5, 33, 3, (1, 1, 1, 1)),   # a run of 150 channels: K blocks below and above it
    (96, 7, 48, 1, (0, 0, 0, 0)),    # 1x1: the run is all of K
])
def test_canonical_configs_are_exactly_the_configs_that_build_one_kernel(c, h, k, kh, pads):
    import numpy as np

    from lowering.loop_ir import format_kernel
    from lowering.ops import OPS, OpContext
    from lowering.templates.gemm import GemmTemplate

    x = te.placeholder((1, c, h, h), "float32", "x")
    w = te.placeholder((k, c, kh, kh), "float32", "w")
    wv = np.random.default_rng(0).standard_normal((k, c, kh, kh)).astype(np.float32)
    oh = h + pads[0] + pads[2] - kh + 1
    ctx = OpContext(node="n", op_type="Conv", attrs={"pads": list(pads)}, inputs=[x, w],
                    consts=[None, wv], out_shapes=[(1, k, oh, oh)], out_dtypes=["float32"])
    space = GemmTemplate.match([x, w], OPS["Conv"](ctx), [None, wv], host_target())
    by_kernel: dict[str, set[str]] = {}
    by_canonical: dict[str, set[str]] = {}
    for cfg in all_configs(space.knobs):
        key = config_key(cfg)
        by_kernel.setdefault(format_kernel(space.build(cfg).kernel), set()).add(key)
        by_canonical.setdefault(config_key(space.canonical(cfg)), set()).add(key)
    assert sorted(map(sorted, by_kernel.values())) == sorted(map(sorted, by_canonical.values()))
    assert len(by_canonical) < space_size(space.knobs)  # pixel mode has duplicates to fold


def test_anneal_measures_each_canonical_class_once() -> None:
    space = _Synthetic({"x0": 5, "x1": 6, "x2": 1, "x3": 7}, options=4)

    def canonical(c: Config) -> Config:  # x3 does not matter
        return {**c, "x3": 0}

    seen: list[str] = []

    def evaluate(configs: list[Config]) -> list[float]:
        seen.extend(config_key(canonical(c)) for c in configs)
        return [space.true_time(canonical(c)) for c in configs]

    result = anneal(space.knobs, evaluate, space.cost, [space.default_config()],
                    budget_s=1e9, rng=random.Random(0), canonical=canonical)
    assert len(seen) == len(set(seen)) == len(result.measured)  # no class twice
    assert len(seen) > 4 ** 2  # and it went on through the classes (64 of them)
    assert canonical(result.best) == {"x0": 3, "x1": 3, "x2": 1, "x3": 0}


def test_the_cost_model_takes_a_vector_loop_that_runs_nothing() -> None:
    """A vector loop whose count is read at run time (NonMaxSuppression's overlap tests
    against the boxes kept so far) is estimated at 0 trips: it costs nothing, not a
    division by zero."""
    from lowering.loop_ir import Buffer, BufLoad, For, Kernel, Store
    from lowering.search.cost_model import stage_seconds
    from targets.cpu.target import NAMED_TARGETS

    i, q = te.Var("i"), te.Var("q")
    count = Buffer("n", "int64", (1,), "input")
    out = Buffer("o", "float32", (8,), "output")
    loop = For(i, te.Const(8, "int64"), "serial", For(
        q, BufLoad(count, te.Const(0, "int64")), "vectorize",
        Store(out, q, te.Const(1.0, "float32"))))
    (seconds,) = stage_seconds(Kernel("k", [count, out], [loop]),
                               NAMED_TARGETS["zen3"].machine)
    assert 0 <= seconds < 1e-6


def test_a_parallel_loop_costs_no_start_on_one_thread() -> None:
    """The runtime calls a parallel loop's body directly on one thread (and for one
    iteration): only on several threads does the loop pay for waking the pool."""
    from types import SimpleNamespace

    from lowering.loop_ir import For, Seq
    from lowering.search.cost_model import PARALLEL_OVERHEAD_S, threaded_seconds

    def kernel(n: int) -> SimpleNamespace:
        return SimpleNamespace(stages=[For(te.Var("i"), te.Const(n, "int64"), "parallel",
                                           Seq([]))])

    assert threaded_seconds(kernel(8), [1e-3], 1) == 1e-3
    assert threaded_seconds(kernel(1), [1e-3], 2) == 1e-3
    assert threaded_seconds(kernel(8), [1e-3], 2) == pytest.approx(0.5e-3 + PARALLEL_OVERHEAD_S)


def _vector_loop_extents(stmt) -> list[int]:
    from lowering.loop_ir import For, walk

    return [st.extent.value for st in walk(stmt) if isinstance(st, For) and st.kind == "vectorize"]


@pytest.mark.parametrize("target", ["cpu-avx512", "cpu-avx2"])
@pytest.mark.parametrize("side, vector", [(7, 49), (28, 784), (112, 112)])
def test_short_contiguous_rows_are_vectorised_as_one_loop(target: str, side: int,
                                                          vector: int) -> None:
    """A bias and ReLU over NCHW planes: rows of 7 or 28 (under four vectors) run as ONE
    vector loop over the plane, which every access walks end to end; a 28-long loop LLVM
    unrolled fully and then vectorised the loop around it with gathers and scatters (128x28x28:
    0.087 ms against 0.009 as one loop, on a Zen 4 core). Long rows keep their own loop, and
    so does a stage whose rows are not contiguous in an input (a transpose)."""
    x = te.placeholder((1, 16, side, side), "float32", "x")
    b = te.placeholder((1, 16, 1, 1), "float32", "b")
    y = te.compute(x.shape, lambda n, c, h, w: te.maximum(x[n, c, h, w] + b[n, c, 0, 0],
                                                          te.const(0.0)), name="bias_relu")
    space = _space([x, b], [y], NAMED_TARGETS[target])
    kernel = space.build(space.model_best_config()).kernel
    assert _vector_loop_extents(Seq(kernel.stages)) == [vector]
    # the plane's loop stays a loop (interleave 1): fully unrolled, a 49-long one became
    # gathers over the channels (an SE scale over 440x7x7: 3.2x slower than rows of 7)
    assert ("# vectorize x1" in format_kernel(kernel)) == (vector != side)
    t = te.compute(x.shape, lambda n, c, h, w: x[n, c, w, h], name="transpose")
    space = _space([x], [t], NAMED_TARGETS[target])
    kernel = space.build(space.default_config()).kernel
    assert side * side not in _vector_loop_extents(Seq(kernel.stages))


@pytest.mark.parametrize("target", ["cpu-avx512", "zen5", "cpu-avx2"])
def test_a_short_strided_inner_loop_beats_gathers_and_scatters(target: str) -> None:
    """Winograd's output transpose at 14x14 ([4, 4, 256, 1, 4, 4] -> [1, 256, 4, 4, 4, 4]):
    its innermost output loop (4 long) reads 16 KiB apart. Vectorising the 256-long channel
    loop instead makes gathers and scatters, measured 10-20x slower than the short loop's
    scalar moves. The model used to price each of those scalar moves as a lane's worth and
    picked the gathers."""
    x = te.placeholder((4, 4, 256, 1, 4, 4), "float32", "x")
    perm = [3, 2, 4, 0, 5, 1]
    inverse = [perm.index(d) for d in range(6)]
    y = te.compute(tuple(x.shape[p] for p in perm),
                   lambda *i: x[tuple(i[inverse[d]] for d in range(6))], name="transpose")
    space = _space([x], [y], NAMED_TARGETS[target])
    gathers = {"s0.vec": 4, "s0.fuse": 0}
    short = {"s0.vec": 0, "s0.fuse": 0}
    assert space.cost(short) < 0.8 * space.cost(gathers)
    assert space.model_best_config()["s0.vec"] == 0
