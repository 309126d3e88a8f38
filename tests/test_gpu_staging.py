"""GPU local memory and barriers. Staging: a register-tiled reduction whose block's threads
copy the operand slices of each reduction chunk into local memory between barriers
(`gpu_schedule.stage_tiles`, `Schedule.stage`). Tree reductions
(`StageSchedule.tree_reduce`): a block's threads combine one output's values in one launch. Staged kernels run on PoCL against numpy and onnxruntime (partial block
tiles at every edge, a convolution with padding and stride), have one local array per staged
operand and a barrier on either side of each chunk's copies, and their CUDA form passes ptxas
and runs in its OpenCL form. Tree reductions match numpy and the one-thread reduction's NaN
behaviour, and onnxruntime through ReduceSum/Max/Mean models."""

from __future__ import annotations

import shutil
from dataclasses import replace

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from program_runner import load_graph

from aotc.compiler import compile_model
from lowering import te
from lowering.gpu_schedule import stage_tiles, staged_bytes, staged_loads
from lowering.loop_ir import Barrier, For, Seq, walk
from lowering.lower import lower_schedule
from lowering.machine import GPU_MACHINES
from lowering.schedule import Schedule
from lowering.search.gpu_space import GpuDefaultSpace
from lowering.search.space import Config, ScheduleSpace
from lowering.search.tuner import Tuner
from targets.gpu.opencl_device import opencl_available
from targets.gpu.prelude import prelude
from targets.gpu.render import render_kernel
from targets.gpu.target import gpu_target

needs_opencl = pytest.mark.skipif(not opencl_available(),
                                  reason="no OpenCL device (apt-get install pocl-opencl-icd)")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None or shutil.which("ptxas") is None,
                                reason="nvcc and ptxas not installed")
GENERIC = GPU_MACHINES["opencl-generic"]


def _matmul(m: int, k: int, n: int):
    a = te.placeholder((m, k), "float32", "a")
    b = te.placeholder((k, n), "float32", "b")
    r = te.reduce_axis(k, "r")
    c = te.compute((m, n), lambda i, j: te.reduce_sum(a[i, r.var] * b[r.var, j], [r]), name="c")
    return a, b, c


def _staged_matmul(m: int, k: int, n: int, tile=(4, 4), threads=None, chunk=8):
    a, b, c = _matmul(m, k, n)
    sched = Schedule([c])
    assert stage_tiles(sched, c, GENERIC, tile, threads, chunk)
    return a, b, lower_schedule("mm", [a, b], [c], sched)


def test_staged_kernel_structure() -> None:
    """One local array per staged operand (sized by the block tile and the chunk), copied at
    the top of the chunk loop between two barriers; the thread loop is the whole block (no
    guard around the barriers), the register tile's loops do the edge guarding."""
    _, _, kern = _staged_matmul(37, 50, 29)
    stage = kern.stages[0]
    assert isinstance(stage, For) and stage.kind == "block"
    thread = stage.body
    assert isinstance(thread, For) and thread.kind == "thread"
    assert thread.extent.value == 64  # type: ignore[attr-defined]
    stmts = list(walk(stage))
    assert sum(isinstance(s, Barrier) for s in stmts) == 2
    chunk_loop = next(s for s in stmts if isinstance(s, For) and isinstance(s.body, Seq)
                      and isinstance(s.body.stmts[0], Barrier))
    body = chunk_loop.body.stmts  # type: ignore[attr-defined]
    assert isinstance(body[0], Barrier) and isinstance(body[3], Barrier)
    copies = body[1:3]
    local = [c.body.buf for c in copies]  # type: ignore[attr-defined]
    assert [b.role for b in local] == ["local", "local"]
    # A: 32 rows of the block tile x a chunk of 8; B: 8 x all 29 columns (the block tile's
    # 32 is wider than the matrix)
    assert [b.shape for b in local] == [(32, 8), (8, 29)]
    assert all(b not in kern.buffers for b in local)  # not kernel arguments
    text = render_kernel(kern).body
    assert text.count("AOTC_LOCAL f32 l") == 2 and text.count("AOTC_BARRIER;") == 2
    assert "AOTC_LOCAL f32 l0[256];" in text and "AOTC_LOCAL f32 l1[232];" in text


def test_staged_loads_and_footprint() -> None:
    """Both operands of a product are staged; the footprint is the block tile's slices."""
    _, _, c = _matmul(256, 64, 256)
    assert [ld.tensor.name for ld in staged_loads(c)] == ["a", "b"]
    assert staged_bytes(c, (4, 4), (8, 8), 16) == 2 * 32 * 16 * 4
    assert staged_bytes(c, (4, 8), (16, 16), 32) == (64 * 32 + 32 * 128) * 4
    x = te.placeholder((8, 8, 8), "float32", "z")
    q = te.reduce_axis(8, "q")
    sums = te.compute((8, 8), lambda i, j: te.reduce_sum(x[i, j, q.var], [q]), name="sums")
    assert staged_loads(sums) == []


@pytest.mark.opencl
@needs_opencl
@pytest.mark.parametrize("shape", [(37, 50, 29), (64, 16, 64), (3, 7, 5), (130, 70, 97),
                                   (2, 40, 300)])
@pytest.mark.parametrize("tile,threads,chunk", [((4, 4), None, 8), ((2, 4), 16, 16),
                                                ((1, 1), 64, 32), ((8, 4), 128, 5)])
def test_staged_matmul_matches_numpy(shape, tile, threads, chunk) -> None:
    """Partial block tiles along rows and columns, a last chunk shorter than the others,
    block tiles larger than the matrix, threads of a block past the output's edge."""
    from targets.gpu.opencl_device import run_kernel

    m, k, n = shape
    _, _, kern = _staged_matmul(m, k, n, tile, threads, chunk)
    rng = np.random.default_rng(6)
    x = rng.standard_normal((m, k)).astype(np.float32)
    y = rng.standard_normal((k, n)).astype(np.float32)
    got, = run_kernel(kern, [x, y])
    np.testing.assert_allclose(got, x @ y, rtol=1e-4, atol=1e-4)


def _model(nodes, inputs, output, inits=()):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                       for n, s in inputs],
                          [helper.make_tensor_value_info(output[0], TensorProto.FLOAT,
                                                         output[1])], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _const(name: str, a: np.ndarray):
    return helper.make_tensor(name, TensorProto.FLOAT, a.shape, a.ravel())


def _models():
    rng = np.random.default_rng(7)
    out = {}
    for m, k, n in ((37, 50, 29), (128, 96, 64), (5, 300, 17)):
        out[f"matmul{m}x{k}x{n}"] = _model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                                           [("a", [m, k]), ("b", [k, n])], ("y", [m, n]))
    w = rng.standard_normal((45, 70)).astype(np.float32)
    bias = rng.standard_normal((45,)).astype(np.float32)
    out["gemm_transB_bias"] = _model(
        [helper.make_node("Gemm", ["a", "w", "bias"], ["y"], transB=1, alpha=0.5)],
        [("a", [33, 70])], ("y", [33, 45]), [_const("w", w), _const("bias", bias)])
    out["batched_matmul"] = _model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                                   [("a", [3, 19, 40]), ("b", [3, 40, 23])], ("y", [3, 19, 23]))
    wc = rng.standard_normal((12, 5, 3, 3)).astype(np.float32)
    bc = rng.standard_normal((12,)).astype(np.float32)
    out["conv_pad1_stride2"] = _model(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1])],
        [("x", [2, 5, 13, 11])], ("y", [2, 12, 7, 6]), [_const("w", wc), _const("b", bc)])
    w1 = rng.standard_normal((24, 40, 1, 1)).astype(np.float32)
    out["conv1x1"] = _model([helper.make_node("Conv", ["x", "w"], ["y"])],
                            [("x", [1, 40, 9, 10])], ("y", [1, 24, 9, 10]), [_const("w", w1)])
    w5 = rng.standard_normal((6, 3, 5, 5)).astype(np.float32)
    out["conv5x5_pad2"] = _model(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[2, 1, 2, 1])],
        [("x", [1, 3, 17, 20])], ("y", [1, 6, 17, 18]), [_const("w", w5)])
    return out


def _feeds(model) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(8)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
            .astype(np.float32) for i in model.graph.input}


class _Staged(Tuner):
    """A tuner choosing each space's default configuration with staging on (the
    first chunk), so that every register-tiled reduction is staged."""

    def choose(self, space: ScheduleSpace) -> Config:
        cfg = space.default_config()
        return {k: (v if not k.endswith(".partials") else 0) for k, v in cfg.items()}


@pytest.mark.opencl
@needs_opencl
@pytest.mark.parametrize("name", sorted(_models()))
def test_staged_models_match_onnxruntime(name: str) -> None:
    """MatMul, batched MatMul, Gemm (transposed weights, alpha, bias), convolutions (padding,
    stride, 1x1, 5x5 with uneven padding), staged (checked in the source), on PoCL."""
    from targets.gpu.opencl_program import run_program

    model = _models()[name]
    program = compile_model(load_graph(model), gpu_target("opencl"), name="m",
                            tuner=_Staged())
    assert program.gpu is not None
    assert program.gpu.source.count("AOTC_BARRIER;") >= 2
    feeds = _feeds(model)
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    got = run_program(program, list(feeds.values()))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-4)


@pytest.mark.opencl
@needs_opencl
@needs_nvcc
@pytest.mark.parametrize("name", ["conv_pad1_stride2", "gemm_transB_bias"])
def test_staged_cuda_passes_ptxas_and_runs_in_opencl_form(name: str) -> None:
    """The CUDA rendering (`__shared__`, `__syncthreads()`) compiles to PTX that ptxas
    accepts for sm_90 (codegen.cuda_to_ptx runs it); with the OpenCL prelude in its place
    the same kernels run on PoCL and match onnxruntime."""
    from targets.gpu.opencl_program import run_program

    model = _models()[name]
    cuda = compile_model(load_graph(model), gpu_target("cuda"), name="m",
                         tuner=_Staged())
    assert cuda.gpu is not None and ".target sm_90" in cuda.kernel_object.decode()
    body = cuda.gpu.source[len(prelude("cuda", cuda.gpu.uses_f64)):]
    assert "AOTC_LOCAL" in body and "AOTC_BARRIER;" in body
    assert "#define AOTC_LOCAL __shared__" in cuda.gpu.source
    assert "#define AOTC_BARRIER __syncthreads()" in cuda.gpu.source
    ocl = cuda.gpu.in_dialect("opencl")
    assert "#define AOTC_BARRIER barrier(CLK_LOCAL_MEM_FENCE)" in ocl.source
    feeds = _feeds(model)
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    got = run_program(replace(cuda, gpu=ocl), list(feeds.values()))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-4)


def test_stage_knob_and_cost() -> None:
    """The stage knob exists where the machine has local memory (not on Mali); a copy that
    does not fit local memory builds unstaged; for a large product on sm_90 the cost model
    counts the device loads staging saves and prefers it."""
    a, b, c = _matmul(1024, 1024, 1024)
    cuda = GpuDefaultSpace([a, b], [c], [None, None], gpu_target("cuda"))
    knob = next(k for k in cuda.knobs if k.name == "s0.stage")
    assert 0 in knob.options and knob.options[0] > 0
    mali = GpuDefaultSpace([a, b], [c], [None, None], gpu_target("mali"))
    assert all(k.name != "s0.stage" for k in mali.knobs)
    cfg = {**cuda.default_config(), "s0.tile": [4, 8], "threads": 256}
    assert cuda.cost({**cfg, "s0.stage": 32}) < cuda.cost({**cfg, "s0.stage": 0})
    small = replace(GENERIC, local_memory=1024)
    sched = Schedule([c])
    assert not stage_tiles(sched, c, small, (4, 4), 64, 16)  # 2 x 32 x 16 floats > 1 KiB
    assert stage_tiles(Schedule([c]), c, GENERIC, (4, 4), 64, 16)
    target = gpu_target("opencl")
    tiny = replace(target, machine=small)
    space = GpuDefaultSpace([a, b], [c], [None, None], tiny)
    cfg = {**space.default_config(), "s0.tile": [4, 4], "threads": 64, "s0.stage": 16}
    assert space._staged(cfg, 0, 64) is None
    assert not any(isinstance(s, Barrier) for st in space.build(cfg).kernel.stages
                   for s in walk(st))


# ---- block-level tree reductions (StageSchedule.tree_reduce) ----

def _pool(combiner: str, out_shape: tuple[int, ...]):
    x = te.placeholder((1, 6, 53, 61), "float32", "x")
    if out_shape == (1, 6):
        ry, rx = te.reduce_axis(53, "ry"), te.reduce_axis(61, "rx")
        out = te.compute(out_shape, lambda n, c: te.reduce(combiner, x[n, c, ry.var, rx.var],
                                                           [ry, rx]), name="pool")
    else:
        ra, rb, rc = te.reduce_axis(6, "a"), te.reduce_axis(53, "b"), te.reduce_axis(61, "c")
        out = te.compute(out_shape, lambda n: te.reduce(combiner, x[n, ra.var, rb.var, rc.var],
                                                        [ra, rb, rc]), name="all")
    return x, out


def test_tree_reduction_structure() -> None:
    """One launch: a block per output, a local array of one slot per thread, a barrier after
    the strided partials and after each of the log2(threads) halvings."""
    x, out = _pool("sum", (1, 6))
    sched = Schedule([out])
    sched[out].tree_reduce(64)
    kern = lower_schedule("t", [x], [out], sched)
    assert len(kern.stages) == 1
    stmts = list(walk(kern.stages[0]))
    assert sum(isinstance(s, Barrier) for s in stmts) == 1 + 6
    r = render_kernel(kern)
    assert [(la.blocks, la.threads) for la in r.launches] == [(6, 64)]
    assert r.body.count("AOTC_LOCAL f32 l0[64];") == 1


@pytest.mark.opencl
@needs_opencl
@pytest.mark.parametrize("combiner", ["sum", "max", "max_nan", "min"])
@pytest.mark.parametrize("out_shape", [(1, 6), (1,)])
@pytest.mark.parametrize("threads", [2, 64, 256])
def test_tree_reductions_match_numpy(combiner: str, out_shape: tuple[int, ...],
                                     threads: int) -> None:
    """Sums and extrema over a count no thread count divides, one output and several; with
    NaNs (one in a plane, a plane of NaNs) the result is the one-thread reduction's: "max"
    and "min" ignore a NaN (fmax/fmin), "max_nan" propagates it."""
    from targets.gpu.opencl_device import run_kernel

    x, out = _pool(combiner, out_shape)
    rng = np.random.default_rng(9)
    xs = rng.standard_normal((1, 6, 53, 61)).astype(np.float32)
    axes = (2, 3) if out_shape == (1, 6) else (1, 2, 3)
    want = {"sum": np.sum, "min": np.min}.get(combiner, np.max)(xs, axis=axes)
    sched = Schedule([out])
    sched[out].tree_reduce(threads)
    kern = lower_schedule("t", [x], [out], sched)
    got, = run_kernel(kern, [xs])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    if combiner != "sum":
        xs[0, 2, 5, 7] = np.nan
        xs[0, 4] = np.nan
        serial = lower_schedule("s", [x], [out], Schedule([out]))  # no primitive: one thread
        want, = run_kernel(serial, [xs])
        got, = run_kernel(kern, [xs])
        np.testing.assert_array_equal(got, want)


def _reduce_model(op: str, shape: list[int], axes: list[int]):
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)
    out = [d for i, d in enumerate(shape) if i not in axes]
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
                          [helper.make_tensor("axes", TensorProto.INT64, [len(axes)], axes)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


class _Tree(Tuner):
    """A tuner choosing the tree form (its largest thread count) wherever the space has it."""

    def choose(self, space: ScheduleSpace) -> Config:
        cfg = space.default_config()
        for k in space.knobs:
            if k.name.endswith(".tree"):
                cfg[k.name] = max(k.options)  # type: ignore[type-var]
        return cfg


@pytest.mark.opencl
@needs_opencl
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMean"])
@pytest.mark.parametrize("dialect", ["opencl", "cuda"])
def test_tree_reduction_models_match_onnxruntime(op: str, dialect: str) -> None:
    """ReduceSum/Max/Mean to few outputs compiled with the tree form, NaNs in the input,
    against onnxruntime on PoCL; for cuda the PTX passes ptxas (codegen.cuda_to_ptx) and the
    kernels run in their OpenCL form."""
    if dialect == "cuda" and shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed")
    from targets.gpu.opencl_program import run_program

    model = _reduce_model(op, [2, 3, 40, 50], [2, 3])
    program = compile_model(load_graph(model), gpu_target(dialect), name="m", tuner=_Tree())
    assert program.gpu is not None
    assert "AOTC_BARRIER;" in program.gpu.source
    gpu = program.gpu.in_dialect("opencl")
    rng = np.random.default_rng(10)
    xs = rng.standard_normal((2, 3, 40, 50)).astype(np.float32)
    xs[1, 1, 3, 4] = np.nan
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": xs})
    got = run_program(replace(program, gpu=gpu), [xs])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-4)


def test_tree_knob() -> None:
    """The tree form is a knob of few-output reductions where the machine has local memory;
    it makes the partials knob irrelevant (one class of configurations)."""
    x, out = _pool("sum", (1, 6))
    space = GpuDefaultSpace([x], [out], [None], gpu_target("cuda"))
    knob = next(k for k in space.knobs if k.name == "s0.tree")
    assert knob.options[0] == 0 and {64, 256, 1024} <= set(knob.options)
    cfg = {**space.default_config(), "s0.tree": 256}
    assert space.canonical(cfg) == space.canonical({**cfg, "s0.partials": 1024})
    assert len(space.build(cfg).kernel.stages) == 1
    assert space.cost(cfg) > 0
    mali = GpuDefaultSpace([x], [out], [None], gpu_target("mali"))
    assert all(k.name != "s0.tree" for k in mali.knobs)


# ---- float4 register tiles (Mali: gpu_schedule.vector_columns) ----

MALI = GPU_MACHINES["mali-valhall"]


@pytest.mark.opencl
@needs_opencl
@pytest.mark.parametrize("shape,tile", [((37, 50, 29), (4, 4)), ((64, 16, 64), (2, 8)),
                                        ((3, 7, 8), (1, 4)), ((33, 20, 40), (4, 8))])
@pytest.mark.parametrize("transposed", [False, True])
def test_float4_tiles_match_numpy(shape, tile, transposed: bool) -> None:
    """A Mali tile of 4 or 8 columns holds float4 accumulators, loads the operand that moves
    with the columns with vload4 and stores with vstore4 (partial tiles at the edge take the
    scalar form); with B read transposed (not contiguous in the columns) it stays scalar."""
    from lowering.gpu_schedule import gpu_default_schedule
    from lowering.lower import lower_kernel
    from targets.gpu.opencl_device import run_kernel

    m, k, n = shape
    a = te.placeholder((m, k), "float32", "a")
    b = te.placeholder((n, k) if transposed else (k, n), "float32", "b")
    r = te.reduce_axis(k, "r")
    c = te.compute((m, n), lambda i, j: te.reduce_sum(
        a[i, r.var] * (b[j, r.var] if transposed else b[r.var, j]), [r]), name="c")
    kern = lower_kernel("mm", [a, b], [c], lambda t: gpu_default_schedule(t, MALI, tile))
    body = render_kernel(kern).body
    assert (body.count("aotc_vload4(") == 1 and body.count("aotc_vstore4(") == 1) != transposed
    rng = np.random.default_rng(11)
    x = rng.standard_normal((m, k)).astype(np.float32)
    y = rng.standard_normal(b.shape).astype(np.float32)
    got, = run_kernel(kern, [x, y])
    np.testing.assert_allclose(got, x @ (y.T if transposed else y), rtol=1e-4, atol=1e-4)


@pytest.mark.opencl
@needs_opencl
@pytest.mark.parametrize("name", ["conv_pad1_stride2", "conv1x1", "matmul128x96x64",
                                  "gemm_transB_bias"])
def test_float4_models_on_mali_match_onnxruntime(name: str) -> None:
    """Compiled for mali (its cost model's tiles), on PoCL, against onnxruntime."""
    from targets.gpu.opencl_program import run_program

    model = _models()[name]
    program = compile_model(load_graph(model), gpu_target("mali"), name="m")
    assert program.gpu is not None and "AOTC_BARRIER;" not in program.gpu.source
    feeds = _feeds(model)
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    got = run_program(program, list(feeds.values()))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-4)


@needs_nvcc
def test_float4_tiles_compile_as_cuda() -> None:
    """The float4 body under CUDA's prelude (float4 arithmetic defined there, loads and
    stores element by element) compiles to PTX that ptxas accepts for sm_90."""
    from lowering.gpu_schedule import gpu_default_schedule
    from lowering.lower import lower_kernel
    from targets.gpu.codegen import cuda_to_ptx
    from targets.gpu.render import render_module

    a, b, c = _matmul(33, 20, 40)
    kern = lower_kernel("mm", [a, b], [c], lambda t: gpu_default_schedule(t, MALI, (4, 8)))
    source = render_module([render_kernel(kern)], "cuda")
    assert "aotc_vload4(" in source
    assert ".entry mm_s0(" in cuda_to_ptx(source, "sm_90")
