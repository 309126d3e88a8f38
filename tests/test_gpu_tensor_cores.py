"""GPU tensor cores: reductions matched against a matrix instruction's description
(`intrinsics.MmaInstruction`, `tensorize.match_mma`) and computed on it (`mma_tile`,
`lower._mma`). The matcher maps MatMul (float16, bfloat16), batched MatMul and a 1x1
convolution onto the instruction's loops and refuses float32 (by default; tf32 on request
is test_gpu_tf32.py's), int8, other combiners and shapes that would mostly compute padding,
with a reason. Kernels and compiled
models run on PoCL in their OpenCL form, where the instruction is its described loops (the
tiling, staging, barriers, edges and epilogue around it are the CUDA kernel's), against numpy
and onnxruntime; the CUDA form goes through nvcc + ptxas sm_90 and its PTX holds the WMMA
instructions. Only the sm_90 machine has instructions, so only cuda offers the knob."""

from __future__ import annotations

import shutil
from dataclasses import replace

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from program_runner import load_graph

from aotc.compiler import compile_model
from lowering import te
from lowering.intrinsics import MMA_INSTRUCTIONS
from lowering.lower import lower_schedule
from lowering.machine import GPU_MACHINES
from lowering.schedule import Schedule
from lowering.search.gpu_space import GpuDefaultSpace
from lowering.search.space import Config, ScheduleSpace
from lowering.search.tuner import Tuner
from lowering.tensorize import MmaMatch, Refused, match_mma
from targets.gpu.codegen import cuda_to_ptx, module_of
from targets.gpu.opencl_device import opencl_available
from targets.gpu.prelude import prelude
from targets.gpu.render import render_kernel
from targets.gpu.target import gpu_target

needs_opencl = pytest.mark.skipif(not opencl_available(),
                                  reason="no OpenCL device (apt-get install pocl-opencl-icd)")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None or shutil.which("ptxas") is None,
                                reason="nvcc and ptxas not installed")
F16 = MMA_INSTRUCTIONS["wmma_f16_16x16x16"]
BF16 = MMA_INSTRUCTIONS["wmma_bf16_16x16x16"]
_NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def _matmul(m: int, k: int, n: int, dtype: str = "float16", out: str | None = None):
    a = te.placeholder((m, k), dtype, "a")
    b = te.placeholder((k, n), dtype, "b")
    r = te.reduce_axis(k, "r")
    c = te.compute((m, n), lambda i, j: te.reduce_sum(a[i, r.var] * b[r.var, j], [r]),
                   name="c")
    if out is not None:  # products in `out` (an integer MatMul's int32)
        c = te.compute((m, n), lambda i, j: te.reduce_sum(
            te.cast(out, a[i, r.var]) * te.cast(out, b[r.var, j]), [r]), name="c")
    return a, b, c


def _match(t: te.Tensor, instr=F16) -> MmaMatch:
    found = match_mma(t, instr)
    assert isinstance(found, MmaMatch), found
    return found


def test_instruction_description() -> None:
    """The description is data: the loops, which of them each operand is indexed by, the
    accumulator's share per lane, the routines' names."""
    assert F16.loops == (("i", 16, "spatial"), ("j", 16, "spatial"), ("kk", 16, "reduce"))
    assert F16.operand_axes == (("i", "kk"), ("kk", "j"))
    assert F16.per_lane == 8 and F16.accumulator == "float32"
    assert F16.routine("mma") == "aotc_mma_wmma_f16_16x16x16_mma"
    assert BF16.operand == "bfloat16" and BF16.min_sm == 80


def test_match_matmul_f16_and_bf16() -> None:
    _, _, c = _matmul(64, 32, 48)
    got = _match(c)
    assert (got.m, got.n, got.batch, got.k, got.a, got.extents) == ((0,), (1,), (), (0,), 0,
                                                                    (64, 48, 32))
    _, _, c = _matmul(40, 50, 37, "bfloat16")
    assert _match(c, BF16).extents == (40, 37, 50)
    # the wrong instruction for the type: refused, naming both
    why = match_mma(c, F16)
    assert isinstance(why, Refused) and "bfloat16" in why.reason and "float16" in why.reason


def test_match_operands_in_either_order_and_batched() -> None:
    """A product written B * A still maps A (the factor that uses the rows) onto the
    instruction's A; a batch axis both operands use is a batch."""
    a = te.placeholder((3, 19, 40), "float16", "a")
    b = te.placeholder((3, 40, 23), "float16", "b")
    r = te.reduce_axis(40, "r")
    c = te.compute((3, 19, 23), lambda q, i, j: te.reduce_sum(b[q, r.var, j] * a[q, i, r.var],
                                                              [r]), name="c")
    got = _match(c)
    assert (got.m, got.n, got.batch, got.a, got.extents) == ((1,), (2,), (0,), 1, (19, 23, 40))


def test_match_conv1x1_f16() -> None:
    """A 1x1 convolution: the output channels are i, the pixels (batch and both spatial
    axes, which the weights ignore) fused into j, the input channels kk."""
    x = te.placeholder((2, 40, 9, 10), "float16", "x")
    w = te.placeholder((24, 40, 1, 1), "float16", "w")
    c, kh, kw = te.reduce_axis(40, "c"), te.reduce_axis(1, "kh"), te.reduce_axis(1, "kw")
    y = te.compute((2, 24, 9, 10), lambda b, o, h, v: te.reduce_sum(
        te.cast("float32", x[b, c.var, h + kh.var, v + kw.var])
        * te.cast("float32", w[o, c.var, kh.var, kw.var]), [c, kh, kw]), name="y")
    got = _match(y)
    assert (got.m, got.n, got.batch, got.k, got.extents) == ((1,), (0, 2, 3), (), (0,),
                                                             (24, 180, 40))


def test_refusals_name_the_reason() -> None:
    """float32 (no tf32 unless asked), int8 products into int32, a max reduction, and a
    product too small for the fragments are refused, each saying why."""
    _, _, c = _matmul(64, 64, 64, "float32")
    why = match_mma(c, F16)
    assert isinstance(why, Refused) and not why and "float32" in why.reason
    _, _, c = _matmul(64, 64, 64, "int8", out="int32")
    why = match_mma(c, F16)
    assert isinstance(why, Refused) and "int32" in why.reason
    a = te.placeholder((64, 64), "float16", "a")
    r = te.reduce_axis(64, "r")
    mx = te.compute((64,), lambda i: te.reduce_max(a[i, r.var], [r]), name="mx")
    why = match_mma(mx, F16)
    assert isinstance(why, Refused) and "max reduction" in why.reason
    _, _, c = _matmul(5, 7, 3)
    why = match_mma(c, F16)
    assert isinstance(why, Refused) and "fills" in why.reason and "5 x 3 x 7" in why.reason
    # a product whose factors both use every output axis (an element-wise product summed)
    u = te.placeholder((64, 64, 64), "float16", "u")
    r = te.reduce_axis(64, "r")
    dot = te.compute((64, 64), lambda i, j: te.reduce_sum(u[i, j, r.var] * u[j, i, r.var],
                                                          [r]), name="dot")
    why = match_mma(dot, F16)
    assert isinstance(why, Refused) and "no output axis" in why.reason


def test_machines_and_knob() -> None:
    """sm_90 has the instructions (tf32 only on request: test_gpu_tf32.py), Mali and generic
    OpenCL none; the space offers `sI.mma` (mma tiles first, 0 = off) for a float16 MatMul
    on cuda only, never for float32 by default."""
    assert set(GPU_MACHINES["sm_90"].mma) == {"wmma_f16_16x16x16", "wmma_bf16_16x16x16",
                                              "wmma_tf32_16x16x8"}
    assert GPU_MACHINES["mali-valhall"].mma == () and GPU_MACHINES["opencl-generic"].mma == ()
    a, b, c = _matmul(256, 128, 256)
    for name, has in (("cuda", True), ("mali", False), ("opencl", False)):
        space = GpuDefaultSpace([a, b], [c], [], gpu_target(name))
        knobs = {k.name: k.options for k in space.knobs}
        assert ("s0.mma" in knobs) is has, name
        if has:
            assert knobs["s0.mma"][-1] == 0 and knobs["s0.mma"][0] == [2, 2, 2]
            on, off = space.default_config(), {**space.default_config(), "s0.mma": 0}
            assert space.cost(on) < space.cost(off)  # tensor cores win at this size
    a, b, c = _matmul(256, 128, 256, "float32")
    space = GpuDefaultSpace([a, b], [c], [], gpu_target("cuda"))
    assert "s0.mma" not in {k.name for k in space.knobs}


def _mma_kernel(t: te.Tensor, inputs, warps=(2, 2), ksteps=2, instr=F16):
    sched = Schedule([t])
    sched[t].mma_tile(_match(t, instr), warps, ksteps)
    return lower_schedule("mm", inputs, [t], sched)


def test_kernel_structure() -> None:
    """Per chunk: a barrier, the A and B copies, a barrier, the instruction per step; the
    fragment filled first and stored to local memory, a barrier, the guarded writes. The
    body calls the routines in both dialects alike; the local arrays passed to them are
    32-byte aligned (WMMA's loads need it)."""
    a, b, c = _matmul(40, 50, 37)
    kern = _mma_kernel(c, [a, b])
    text = render_kernel(kern).body
    assert text.count("AOTC_BARRIER;") == 3
    assert "aotc_mma_wmma_f16_16x16x16_acc f0;" in text
    assert text.count("__attribute__((aligned(32)))") == 3
    assert "aotc_mma_wmma_f16_16x16x16_fill(&f0" in text
    assert "aotc_mma_wmma_f16_16x16x16_mma(&f0, l0 + " in text
    assert "aotc_mma_wmma_f16_16x16x16_store(l2 + " in text
    rendered = render_kernel(kern)
    assert rendered.mma == ("wmma_f16_16x16x16",)
    assert "nvcuda::wmma::mma_sync" in prelude("cuda", False, rendered.mma)
    assert "kk < 16" in prelude("opencl", False, rendered.mma)
    assert "wmma" not in prelude("cuda")  # only modules that call an instruction


@pytest.mark.opencl
@needs_opencl
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape", [(64, 64, 64), (40, 50, 37), (100, 33, 70), (16, 16, 16)])
@pytest.mark.parametrize("warps,ksteps", [((2, 2), 2), ((1, 1), 1), ((2, 4), 2)])
def test_mma_kernel_matches_numpy(dtype, shape, warps, ksteps) -> None:
    """Partial fragments at every edge (rows, columns, a short last chunk), block tiles
    larger than the matrix; float32 accumulation, one rounding at the store."""
    from targets.gpu.opencl_device import run_kernel

    m, k, n = shape
    a, b, c = _matmul(m, k, n, dtype)
    instr = F16 if dtype == "float16" else BF16
    kern = _mma_kernel(c, [a, b], warps, ksteps, instr)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((m, k)).astype(_NP[dtype])
    y = rng.standard_normal((k, n)).astype(_NP[dtype])
    got, = run_kernel(kern, [x, y])
    want = (x.astype(np.float32) @ y.astype(np.float32)).astype(_NP[dtype])
    ulp = 2.0 ** -10 if dtype == "float16" else 2.0 ** -7
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32),
                               rtol=ulp, atol=1e-3)


def _graph(nodes, inputs, output, elem, inits=()):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, elem, s)
                                       for n, s in inputs],
                          [helper.make_tensor_value_info(output[0], elem, output[1])],
                          list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _models():
    f16 = TensorProto.FLOAT16
    out = {}
    for m, k, n in ((64, 64, 64), (40, 50, 37), (100, 33, 70), (128, 96, 80)):
        out[f"matmul{m}x{k}x{n}"] = _graph([helper.make_node("MatMul", ["a", "b"], ["y"])],
                                           [("a", [m, k]), ("b", [k, n])], ("y", [m, n]), f16)
    out["batched_matmul"] = _graph([helper.make_node("MatMul", ["a", "b"], ["y"])],
                                   [("a", [3, 19, 40]), ("b", [3, 40, 23])], ("y", [3, 19, 23]),
                                   f16)
    rng = np.random.default_rng(7)
    w = rng.standard_normal((24, 40, 1, 1)).astype(np.float16)
    out["conv1x1"] = _graph([helper.make_node("Conv", ["x", "w"], ["y"])],
                            [("x", [1, 40, 9, 10])], ("y", [1, 24, 9, 10]), f16,
                            [helper.make_tensor("w", f16, w.shape, w.ravel())])
    return out


def _float32_twin(model):
    """The model in float32 (inputs, weights, output): onnxruntime's reference for
    operators its CPU provider lacks in float16, run on the float16 values."""
    from onnx import numpy_helper

    m = type(model)()
    m.CopyFrom(model)
    for v in [*m.graph.input, *m.graph.output]:
        v.type.tensor_type.elem_type = TensorProto.FLOAT
    for i, init in enumerate(m.graph.initializer):
        arr = numpy_helper.to_array(init).astype(np.float32)
        m.graph.initializer[i].CopyFrom(numpy_helper.from_array(arr, init.name))
    return m


class _Mma(Tuner):
    """The space's default configuration: the first matrix-instruction tile wherever one
    matched (the knob's first option)."""

    def choose(self, space: ScheduleSpace) -> Config:
        return space.default_config()


def _compiled(name: str):
    model = _models()[name]
    cuda = compile_model(load_graph(model), gpu_target("cuda"), name="m", tuner=_Mma())
    assert cuda.gpu is not None and cuda.gpu.mma == ("wmma_f16_16x16x16",)
    return model, cuda


@pytest.mark.opencl
@needs_opencl
@needs_nvcc
@pytest.mark.parametrize("name", sorted(_models()))
def test_compiled_models_match_onnxruntime(name: str) -> None:
    """float16 MatMul (shapes multiple of 16 and not), batched MatMul and a 1x1 Conv
    compiled for cuda (nvcc + ptxas sm_90 inside the compile; the PTX has the WMMA
    instructions), then run in their OpenCL form on PoCL (the same bodies; the prelude's
    routines the described loops) against onnxruntime, within float16 rounding of a float32
    accumulation."""
    from targets.gpu.opencl_program import run_program

    model, cuda = _compiled(name)
    ptx = cuda.kernel_object.decode()
    assert ".target sm_90" in ptx
    assert "wmma.mma.sync.aligned.row.row.m16n16k16.f32.f32" in ptx
    assert "wmma.load.a.sync" in ptx and "wmma.store.d.sync" in ptx
    ocl = cuda.gpu.in_dialect("opencl")
    head = prelude("cuda", cuda.gpu.uses_f64, cuda.gpu.mma)
    assert ocl.source[len(prelude("opencl", ocl.uses_f64, ocl.mma)):] == cuda.gpu.source[len(head):]
    rng = np.random.default_rng(8)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
             .astype(np.float16) for i in model.graph.input}
    if name.startswith("conv"):
        twin = _float32_twin(model)
        want = ort.InferenceSession(twin.SerializeToString()).run(
            None, {k: v.astype(np.float32) for k, v in feeds.items()})[0].astype(np.float16)
    else:
        want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    got = run_program(replace(cuda, gpu=ocl), list(feeds.values()))[0]
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32),
                               rtol=2 ** -9, atol=2e-3)


@needs_nvcc
def test_bf16_cuda_form_passes_ptxas() -> None:
    """The bfloat16 instruction's CUDA form: nvcc + ptxas sm_90, bf16 WMMA in the PTX."""
    a, b, c = _matmul(40, 50, 37, "bfloat16")
    mod = module_of([render_kernel(_mma_kernel(c, [a, b], instr=BF16))], "cuda")
    ptx = cuda_to_ptx(mod.source, "sm_90")
    assert "wmma.mma.sync.aligned.row.row.m16n16k16.f32.bf16.bf16.f32" in ptx
    assert "wmma.load.b.sync.aligned.row.m16n16k16" in ptx
