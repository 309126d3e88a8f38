"""float32 products on tf32 tensor cores, only on the user's request (`aotc optimize
--allow-tf32`, `GpuTarget.allow_tf32`). The instruction is data (`wmma_tf32_16x16x8`:
float32 operands rounded to tf32, to nearest with ties away from zero as CUDA's
`wmma::__float_to_tf32`, then exact products summed in float32); without the request the
matcher refuses it with the reason and float32 kernels never call it. Its OpenCL form rounds
A and B the same way, so on PoCL the results are tf32's: checked against numpy on operands
rounded alike (tight) and against the float32 product (within tf32's rounding bound). The
CUDA form goes through nvcc + ptxas (sm_80, sm_90) and its PTX holds the tf32 WMMA
instructions and the conversions; no GPU runs it here."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from program_runner import load_graph

from aotc.compiler import compile_model
from aotc.verify import matrix_unit_tolerance
from lowering import te
from lowering.intrinsics import MMA_INSTRUCTIONS
from lowering.lower import lower_schedule
from lowering.machine import GPU_MACHINES
from lowering.schedule import Schedule
from lowering.search.gpu_space import GpuDefaultSpace, mma_bytes
from lowering.search.space import Config, ScheduleSpace
from lowering.search.tuner import Tuner
from lowering.tensorize import MmaMatch, Refused, match_mma
from targets.gpu.codegen import cuda_to_ptx, module_of
from targets.gpu.opencl_device import opencl_available
from targets.gpu.prelude import prelude
from targets.gpu.render import render_kernel
from targets.gpu.target import gpu_target

ROOT = Path(__file__).resolve().parent.parent
needs_opencl = pytest.mark.skipif(not opencl_available(),
                                  reason="no OpenCL device (apt-get install pocl-opencl-icd)")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None or shutil.which("ptxas") is None,
                                reason="nvcc and ptxas not installed")
TF32 = MMA_INSTRUCTIONS["wmma_tf32_16x16x8"]
U = 2.0 ** -11  # tf32's unit roundoff (10 stored mantissa bits, rounded to nearest)
PTX_MMA = "wmma.mma.sync.aligned.row.row.m16n16k8.f32.tf32.tf32.f32"


def tf32(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to tf32 on their bits, as the OpenCL routine does."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32)
    special = (u & 0x7F800000) == 0x7F800000
    return np.where(special, u, (u + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def tf32_by_value(x: np.ndarray) -> np.ndarray:
    """The same rounding defined on values (finite inputs): the nearest multiple of the tf32
    quantum at x's exponent (2^(e - 10), subnormals at e = -126), ties away from zero."""
    x = np.asarray(x, np.float64)
    _, e = np.frexp(x)
    q = np.ldexp(1.0, np.maximum(e - 1, -126) - 10)
    with np.errstate(over="ignore"):
        return (np.sign(x) * np.floor(np.abs(x) / q + 0.5) * q).astype(np.float32)


def _matmul(m: int, k: int, n: int, dtype: str = "float32"):
    a = te.placeholder((m, k), dtype, "a")
    b = te.placeholder((k, n), dtype, "b")
    r = te.reduce_axis(k, "r")
    c = te.compute((m, n), lambda i, j: te.reduce_sum(a[i, r.var] * b[r.var, j], [r]),
                   name="c")
    return a, b, c


def _kernel(m: int, k: int, n: int, warps=(2, 2), ksteps=2):
    a, b, c = _matmul(m, k, n)
    found = match_mma(c, TF32, allow_opt_in=True)
    assert isinstance(found, MmaMatch), found
    sched = Schedule([c])
    sched[c].mma_tile(found, warps, ksteps)
    return lower_schedule("mm", [a, b], [c], sched)


def _check_tf32(got: np.ndarray, want: np.ndarray, exact: np.ndarray,
                magnitude: np.ndarray) -> None:
    """`got` against `want`, the product of tf32-rounded operands (float64; tight: float32
    accumulation only), and against `exact`, the float32 product (every operand's relative
    error at most U, so each product's at most 2U + U^2 of |a||b|, summed in `magnitude`),
    and visibly not float32's."""
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    slack = (2 * U + U * U) * magnitude + 1e-5 * (1 + np.abs(exact))
    assert np.all(np.abs(got - exact) <= slack)
    assert np.abs(got - exact).max() > 50 * np.abs(got - want).max()  # tf32's, not float32's


def test_instruction_description() -> None:
    """The instruction as data: 16x16x8, float32 operands rounded to tf32, opt-in, sm_80,
    half the 16-bit peak; sm_90's machine lists it after f16 and bf16."""
    assert TF32.loops == (("i", 16, "spatial"), ("j", 16, "spatial"), ("kk", 8, "reduce"))
    assert (TF32.operand, TF32.rounds_to, TF32.opt_in, TF32.min_sm) == ("float32", "tf32",
                                                                      True, 80)
    assert TF32.per_lane == 8 and TF32.accumulator == "float32" and TF32.peak_share == 0.5
    assert GPU_MACHINES["sm_90"].mma[-1] == TF32.name
    assert not any(MMA_INSTRUCTIONS[n].opt_in for n in GPU_MACHINES["sm_90"].mma[:-1])


def test_match_refuses_tf32_without_request() -> None:
    """Without the request: refused, saying it rounds and how to ask; with it: float32
    MatMul matches. float16 never matches tf32, float32 never the 16-bit instructions."""
    _, _, c = _matmul(64, 48, 40)
    why = match_mma(c, TF32)
    assert isinstance(why, Refused) and not why
    assert "tf32" in why.reason and "--allow-tf32" in why.reason
    got = match_mma(c, TF32, allow_opt_in=True)
    assert isinstance(got, MmaMatch) and got.extents == (64, 40, 48)
    _, _, h = _matmul(64, 48, 40, "float16")
    why = match_mma(h, TF32, allow_opt_in=True)
    assert isinstance(why, Refused) and "float16" in why.reason
    for name in ("wmma_f16_16x16x16", "wmma_bf16_16x16x16"):
        why = match_mma(c, MMA_INSTRUCTIONS[name], allow_opt_in=True)
        assert isinstance(why, Refused) and "float32" in why.reason


def test_knob_only_on_request() -> None:
    """`sI.mma` for a float32 MatMul: on cuda with allow_tf32 only (tf32 tiles, 4-byte
    operands in local memory, cheaper than the float32 schedule at this size); never
    without it, never on cuda:sm_75 (no tf32 before sm_80), opencl or mali."""
    a, b, c = _matmul(256, 128, 256)

    def knobs(target) -> dict:
        return {k.name: k.options for k in GpuDefaultSpace([a, b], [c], [], target).knobs}

    assert "s0.mma" not in knobs(gpu_target("cuda"))
    for name in ("cuda:sm_75", "opencl", "mali"):
        assert "s0.mma" not in knobs(replace(gpu_target(name), allow_tf32=True)), name
    target = replace(gpu_target("cuda"), allow_tf32=True)
    space = GpuDefaultSpace([a, b], [c], [], target)
    found = space.mma[0]
    assert found is not None and found.instr is TF32
    assert mma_bytes(found, (2, 2, 2)) == 4 * (32 * 16 + 16 * 32) + 4 * 32 * 32
    on = space.default_config()
    assert on["s0.mma"] == [2, 2, 2]
    assert space.cost(on) < space.cost({**on, "s0.mma": 0})


def test_prelude_rounds_in_both_dialects() -> None:
    """CUDA: tf32 fragments loaded from float and converted with __float_to_tf32; OpenCL:
    the rounding function, applied to A's and B's values in the loops; neither appears in a
    module that calls no tf32 instruction."""
    cuda = prelude("cuda", False, (TF32.name,))
    assert "nvcuda::wmma::precision::tf32, nvcuda::wmma::row_major> fa" in cuda
    assert "load_matrix_sync(fa, (const float*)a" in cuda
    assert cuda.count("nvcuda::wmma::__float_to_tf32(") == 2
    assert "fragment<nvcuda::wmma::accumulator, 16, 16, 8, float>" in cuda
    ocl = prelude("opencl", False, (TF32.name,))
    assert "aotc_f32_to_tf32(a[i * lda + kk]) * aotc_f32_to_tf32(b[kk * ldb + j])" in ocl
    assert "__local const f32* a" in ocl
    for text in (prelude("cuda", False, ("wmma_f16_16x16x16",)),
                 prelude("opencl", False, ("wmma_f16_16x16x16",))):
        assert "tf32" not in text


def test_reference_rounding() -> None:
    """The bit formula the tests' reference (and the OpenCL routine) use is rounding to the
    nearest tf32 value with ties away from zero, subnormals included."""
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(20000), rng.standard_normal(2000) * 1e-39,
                        rng.standard_normal(2000) * 1e30]).astype(np.float32)
    np.testing.assert_array_equal(tf32(x), tf32_by_value(x))
    # ties: 1 + 2^-11 (halfway between 1 and 1 + 2^-10) goes up, and its negative down
    tie = np.array([1 + 2.0 ** -11, -(1 + 2.0 ** -11), 1 + 3 * 2.0 ** -11], np.float32)
    np.testing.assert_array_equal(tf32(tie), [1 + 2.0 ** -10, -(1 + 2.0 ** -10),
                                              1 + 2 * 2.0 ** -10])


def _special_values() -> np.ndarray:
    bits = np.array([0x3F801000, 0xBF801000, 0x3F800FFF, 0x3F803000, 0x00001000, 0x80001FFF,
                     0x00000FFF, 0x7F7FF000, 0xFF7FEFFF, 0x7F800000, 0xFF800000, 0x7FC00001,
                     0x7F800001, 0x00000000, 0x80000000], np.uint32)
    return bits.view(np.float32)


@pytest.mark.opencl
@needs_opencl
def test_opencl_rounding_function() -> None:
    """The prelude's aotc_f32_to_tf32 on PoCL, bit for bit against the reference: ties away
    from zero, subnormals, the largest values rounding to infinity, infinities and NaN kept."""
    import pyopencl as cl

    from targets.gpu.opencl_device import opencl_queue

    ctx, queue = opencl_queue()
    src = prelude("opencl", False, (TF32.name,)) + (
        "__kernel void r(__global const f32* x, __global f32* y) "
        "{ y[get_global_id(0)] = aotc_f32_to_tf32(x[get_global_id(0)]); }\n")
    x = np.concatenate([_special_values(), np.random.default_rng(1).standard_normal(4096)
                        .astype(np.float32)])
    program = cl.Program(ctx, src).build()
    xs = cl.Buffer(ctx, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=x)
    ys = cl.Buffer(ctx, cl.mem_flags.WRITE_ONLY, size=x.nbytes)
    program.r(queue, (x.size,), None, xs, ys)
    got = np.empty_like(x)
    cl.enqueue_copy(queue, got, ys)
    queue.finish()
    want = tf32(x)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))
    assert np.isinf(got[7]) and got[8:9].view(np.uint32)[0] == 0xFF7FE000  # overflow, not


@pytest.mark.opencl
@needs_opencl
def test_instruction_rounds_operands_on_pocl() -> None:
    """Through the instruction itself: A times an identity is A rounded to tf32, exactly
    (ties, subnormals, negatives; products by 1 and sums with 0 are exact)."""
    from targets.gpu.opencl_device import run_kernel

    rng = np.random.default_rng(2)
    x = rng.standard_normal((16, 16)).astype(np.float32)
    x.reshape(-1)[:7] = _special_values()[:7]
    got, = run_kernel(_kernel(16, 16, 16, (1, 1), 1), [x, np.eye(16, dtype=np.float32)])
    np.testing.assert_array_equal(got.view(np.uint32), tf32(x).view(np.uint32))
    assert not np.array_equal(got, x)


@pytest.mark.opencl
@needs_opencl
@pytest.mark.parametrize("shape,warps,ksteps", [((64, 64, 64), (2, 2), 2),
                                               ((40, 50, 37), (1, 1), 1),
                                               ((100, 33, 70), (2, 4), 2)])
def test_mma_kernel_matches_tf32_reference(shape, warps, ksteps) -> None:
    """Partial fragments at every edge, block tiles larger than the matrix: the kernel's
    float32 MatMul equals numpy's product of the tf32-rounded operands up to float32
    accumulation, and the float32 product within tf32's rounding bound."""
    from targets.gpu.opencl_device import run_kernel

    m, k, n = shape
    rng = np.random.default_rng(3)
    x = rng.standard_normal((m, k)).astype(np.float32)
    y = rng.standard_normal((k, n)).astype(np.float32)
    got, = run_kernel(_kernel(m, k, n, warps, ksteps), [x, y])
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    _check_tf32(got, tf32(x).astype(np.float64) @ tf32(y).astype(np.float64), x64 @ y64,
                np.abs(x64) @ np.abs(y64))


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_cuda_form_passes_ptxas(arch: str) -> None:
    """The CUDA form through nvcc + ptxas: tf32 WMMA loads and mma, the conversions
    (cvt.rna.tf32.f32) and the float32 accumulator's store."""
    mod = module_of([render_kernel(_kernel(40, 50, 37))], "cuda")
    assert mod.mma == (TF32.name,)
    ptx = cuda_to_ptx(mod.source, arch)
    assert f".target {arch}" in ptx and PTX_MMA in ptx
    assert "wmma.load.a.sync.aligned.row.m16n16k8" in ptx and "cvt.rna.tf32.f32" in ptx
    assert "wmma.store.d.sync.aligned.row.m16n16k8" in ptx


def _graph(node, inputs, output, inits=()):
    f = TensorProto.FLOAT
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, f, s) for n, s in inputs],
                          [helper.make_tensor_value_info(output[0], f, output[1])], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _models():
    out = {}
    for m, k, n in ((64, 64, 64), (40, 50, 37), (128, 96, 80)):
        out[f"matmul{m}x{k}x{n}"] = _graph(helper.make_node("MatMul", ["a", "b"], ["y"]),
                                           [("a", [m, k]), ("b", [k, n])], ("y", [m, n]))
    out["batched_matmul"] = _graph(helper.make_node("MatMul", ["a", "b"], ["y"]),
                                   [("a", [3, 19, 40]), ("b", [3, 40, 23])], ("y", [3, 19, 23]))
    w = np.random.default_rng(7).standard_normal((24, 40, 1, 1)).astype(np.float32)
    out["conv1x1"] = _graph(helper.make_node("Conv", ["x", "w"], ["y"]),
                            [("x", [2, 40, 9, 10])], ("y", [2, 24, 9, 10]),
                            [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel())])
    return out


class _Default(Tuner):
    """The space's default configuration: the first matrix-instruction tile wherever one
    matched."""

    def choose(self, space: ScheduleSpace) -> Config:
        return space.default_config()


def _reference(name: str, model, feeds: dict[str, np.ndarray]):
    """(product of tf32-rounded operands, (float32 product, sum of |a||b|)) in float64."""
    if name.startswith("conv"):
        from onnx import numpy_helper

        w = numpy_helper.to_array(model.graph.initializer[0])[:, :, 0, 0]
        x = feeds["x"]

        def prod(p, q):
            return np.einsum("oc,bchw->bohw", p.astype(np.float64), q.astype(np.float64))
        return prod(tf32(w), tf32(x)), (prod(w, x), prod(np.abs(w), np.abs(x)))
    a, b = feeds["a"].astype(np.float64), feeds["b"].astype(np.float64)
    return (tf32(feeds["a"]).astype(np.float64) @ tf32(feeds["b"]).astype(np.float64),
            (a @ b, np.abs(a) @ np.abs(b)))


@pytest.mark.opencl
@needs_opencl
@needs_nvcc
@pytest.mark.parametrize("name", sorted(_models()))
def test_compiled_models_on_pocl(name: str) -> None:
    """float32 MatMul (shapes multiples of 16 and not), batched MatMul and a 1x1 Conv
    compiled for cuda with allow_tf32 (nvcc + ptxas sm_90 inside the compile; the PTX holds
    tf32 WMMA), run in their OpenCL form on PoCL: tf32's results (the reference on rounded
    operands), within tf32's bound of onnxruntime's float32 ones."""
    from targets.gpu.opencl_program import run_program

    model = _models()[name]
    target = replace(gpu_target("cuda"), allow_tf32=True)
    cuda = compile_model(load_graph(model), target, name="m", tuner=_Default())
    assert cuda.gpu is not None and cuda.gpu.mma == (TF32.name,) and cuda.allow_tf32
    assert PTX_MMA in cuda.kernel_object.decode()
    rng = np.random.default_rng(8)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
             .astype(np.float32) for i in model.graph.input}
    got = run_program(replace(cuda, gpu=cuda.gpu.in_dialect("opencl")), list(feeds.values()))[0]
    ours, (exact, magnitude) = _reference(name, model, feeds)
    onnx_out = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_allclose(onnx_out, exact, rtol=1e-5, atol=1e-5)
    _check_tf32(got, ours, onnx_out.astype(np.float64), magnitude)


@needs_nvcc
def test_flag_off_means_no_tf32() -> None:
    """Without the request, a float32 MatMul compiled for cuda (even with every knob at its
    first option) calls no matrix instruction and its CUDA source has no tf32; with it, the
    cost model alone puts it on tf32."""
    model = _models()["matmul128x96x80"]
    for tuner in (_Default(), Tuner()):
        off = compile_model(load_graph(model), gpu_target("cuda"), name="m", tuner=tuner)
        assert off.gpu is not None and off.gpu.mma == () and not off.allow_tf32
        assert "tf32" not in off.gpu.source and "tf32" not in off.kernel_object.decode()
    on = compile_model(load_graph(model), replace(gpu_target("cuda"), allow_tf32=True),
                       name="m", tuner=Tuner())
    assert on.gpu is not None and on.gpu.mma == (TF32.name,)
    assert "__float_to_tf32" in on.gpu.source


def _aotc(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aotc", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT)


@needs_nvcc
def test_cli_flag_recorded(tmp_path: Path) -> None:
    """`aotc optimize --allow-tf32 --target cuda`: the manifest records the option and the
    instruction the kernels call, the header says so; without the flag both say no. On a
    CPU target the flag is accepted and changes nothing (the help says so)."""
    model = tmp_path / "mm.onnx"
    model.write_bytes(_models()["matmul128x96x80"].SerializeToString())
    for flag, want in ((["--allow-tf32"], True), ([], False)):
        out = tmp_path / f"b{want}"
        proc = _aotc("optimize", model, "-o", out, "--target", "cuda", *flag)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        manifest = json.loads((out / "aotc_bundle.json").read_text())
        assert manifest["allow_tf32"] is want
        assert manifest["mma"] == ([TF32.name] if want else [])
        assert ("Compiled with --allow-tf32" in (out / "model.h").read_text()) is want
        # aotc verify compares a tf32 bundle at float16's tolerance (same 10 mantissa bits)
        assert matrix_unit_tolerance(manifest) == (8 * 2.0 ** -10 if want else 0.0)
    cpu = [tmp_path / "c0", tmp_path / "c1"]
    for out, flag in zip(cpu, ([], ["--allow-tf32"]), strict=True):
        proc = _aotc("optimize", model, "-o", out, *flag)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (cpu[0] / "model_kernels.ll").read_text() == (cpu[1] / "model_kernels.ll").read_text()
    assert "allow_tf32" not in json.loads((cpu[1] / "aotc_bundle.json").read_text())
    assert "--allow-tf32" in _aotc("optimize", "--help").stdout
