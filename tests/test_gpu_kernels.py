"""GPU targets: every sample model compiled for `opencl` runs on PoCL (OpenCL on this CPU) and
matches onnxruntime; the CUDA rendering of the same kernels differs only in its prelude and
compiles to PTX that ptxas accepts for sm_90."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from program_runner import load_graph

from aotc.compiler import compile_model
from aotc.errors import AotcError
from lowering import te
from lowering.gpu_schedule import gpu_default_schedule
from lowering.lower import lower_kernel
from lowering.machine import GPU_MACHINES
from targets.gpu.opencl_device import opencl_available
from targets.gpu.prelude import prelude
from targets.gpu.render import render_kernel, render_module
from targets.gpu.target import gpu_target

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ["mlp", "resnet_tiny", "mobilenet_tiny", "transformer_tiny", "unet_tiny"]

needs_opencl = pytest.mark.skipif(not opencl_available(),
                                  reason="no OpenCL device (apt-get install pocl-opencl-icd)")


def _feeds(path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in ort.InferenceSession(str(path)).get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        feeds[i.name] = (rng.integers(0, 10, shape).astype(np.int64) if "int64" in i.type
                         else rng.standard_normal(shape).astype(np.float32))
    return feeds


@pytest.mark.opencl
@needs_opencl
@pytest.mark.parametrize("name", SAMPLES)
def test_sample_runs_on_opencl(name: str) -> None:
    from targets.gpu.opencl_program import run_program

    path = ROOT / "models" / f"{name}.onnx"
    program = compile_model(load_graph(path), gpu_target("opencl"), name="m", file=str(path))
    assert program.gpu is not None and program.kernel_object == b""
    feeds = _feeds(path)
    want = ort.InferenceSession(str(path)).run(None, feeds)
    got = run_program(program, list(feeds.values()))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.opencl
@needs_opencl
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("name", SAMPLES)
def test_cuda_kernels_run_in_their_opencl_form(name: str) -> None:
    """The kernels the CUDA target emits, with the OpenCL prelude in place of CUDA's (the one
    thing the dialects change), run on PoCL and match onnxruntime."""
    from dataclasses import replace

    from targets.gpu.opencl_program import run_program

    path = ROOT / "models" / f"{name}.onnx"
    cuda = compile_model(load_graph(path), gpu_target("cuda"), name="m", file=str(path))
    assert cuda.gpu is not None and cuda.gpu.dialect == "cuda"
    ocl = cuda.gpu.in_dialect("opencl")
    head_cuda, head_ocl = prelude("cuda", ocl.uses_f64), prelude("opencl", ocl.uses_f64)
    assert cuda.gpu.source[len(head_cuda):] == ocl.source[len(head_ocl):]
    assert "__global" not in ocl.source[len(head_ocl):]
    feeds = _feeds(path, seed=3)
    want = ort.InferenceSession(str(path)).run(None, feeds)
    got = run_program(replace(cuda, gpu=ocl), list(feeds.values()))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("name", SAMPLES)
def test_sample_compiles_to_ptx(name: str) -> None:
    path = ROOT / "models" / f"{name}.onnx"
    program = compile_model(load_graph(path), gpu_target("cuda"), name="m", file=str(path))
    ptx = program.kernel_object.decode()
    assert ".target sm_90" in ptx
    assert program.gpu is not None
    for launches in program.gpu.launches.values():
        for launch in launches:
            assert f".entry {launch.function}(" in ptx


@pytest.mark.opencl
@needs_opencl
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "int32",
                                   "int8", "uint8"])
def test_reduction_and_division_semantics(dtype: str) -> None:
    """A sum over a non-multiple of the block, a floor modulo of negative integers and the
    16-bit float conversions, against numpy."""
    import ml_dtypes  # noqa: F401

    from targets.gpu.opencl_device import run_kernel

    n, k = 203, 37
    a = te.placeholder((n, k), dtype, "a")
    r = te.reduce_axis(k, "r")
    s = te.compute((n,), lambda i: te.reduce_sum(a[i, r.var], [r]), name="s")
    kern = lower_kernel("red", [a], [s], lambda t: gpu_default_schedule(
        t, GPU_MACHINES["opencl-generic"]))
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((n, k)) * 3).astype(np.dtype(dtype)) if "int" not in dtype \
        else rng.integers(-4 if dtype[0] == "i" else 0, 5, (n, k)).astype(dtype)
    got, = run_kernel(kern, [x])
    want = x.astype(np.float64).sum(axis=1)
    tol = {"float16": 0.2, "bfloat16": 1.0}.get(dtype, 1e-3)
    if "int" in dtype:
        want = want.astype(dtype)
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=0.02, atol=tol)


@pytest.mark.opencl
@needs_opencl
def test_half_conversions_round_to_nearest_even() -> None:
    """Every float16 and bfloat16 rounding case (normals, subnormals, ties, overflow, NaN):
    a float32 → 16-bit cast and back, against ml_dtypes/numpy."""
    import ml_dtypes

    from targets.gpu.opencl_device import run_kernel

    rng = np.random.default_rng(2)
    bits = np.concatenate([rng.integers(0, 1 << 32, 20000, dtype=np.uint64).astype(np.uint32),
                           np.array([0x477FEFFF, 0x477FF000, 0x33000000, 0x33000001, 0x387FE000,
                                     0x387FF000, 0x7F800000, 0xFF800000, 0x7FC00001, 0x80000000,
                                     0x3F800000, 0x3F801000, 0x3F803000], np.uint32)])
    x = bits.view(np.float32)
    src = te.placeholder((x.size,), "float32", "x")
    for dt, np_t in (("float16", np.float16), ("bfloat16", ml_dtypes.bfloat16)):
        y = te.compute((x.size,), lambda i, dt=dt: te.cast(dt, src[i]), name="y", dtype=dt)
        kern = lower_kernel("cvt", [src], [y], lambda t: gpu_default_schedule(
            t, GPU_MACHINES["opencl-generic"]))
        got, = run_kernel(kern, [x])
        want = x.astype(np_t)
        g, w = got.view(np.uint16), want.view(np.uint16)
        nan = np.isnan(x)
        np.testing.assert_array_equal(g[~nan], w[~nan], err_msg=dt)
        assert np.isnan(got[nan].astype(np.float32)).all()


def test_unsupported_nodes_are_named() -> None:
    """Control flow does not compile for GPU targets yet: a user error naming the node."""
    import onnx
    from onnx import TensorProto, helper

    then = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "t", [],
                             [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["z"])], "e", [],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])])
    g = helper.make_graph(
        [helper.make_node("If", ["c"], ["out"], name="branchy", then_branch=then,
                          else_branch=other)], "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    onnx.checker.check_model(model)
    with pytest.raises(AotcError, match="branchy"):
        compile_model(load_graph(model), gpu_target("opencl"), name="m")


def test_gpu_target_names() -> None:
    assert gpu_target("cuda").arch == "sm_90"
    assert gpu_target("cuda:sm_80").arch == "sm_80"
    assert gpu_target("mali").machine.local_memory == 0
    with pytest.raises(AotcError):
        gpu_target("cuda:80")
    with pytest.raises(AotcError):
        gpu_target("vulkan")


def test_module_prelude_per_dialect() -> None:
    a = te.placeholder((8,), "float32", "a")
    b = te.compute((8,), lambda i: a[i] * 2.0, name="b")
    k = render_kernel(lower_kernel("k", [a], [b], lambda t: gpu_default_schedule(
        t, GPU_MACHINES["sm_90"])))
    ocl, cuda = render_module([k], "opencl"), render_module([k], "cuda")
    assert ocl[len(prelude("opencl")):] == cuda[len(prelude("cuda")):]
    assert "__kernel" in ocl and "__global__" in cuda


def _matmul(m: int, k: int, n: int, dtype: str = "float32"):
    a = te.placeholder((m, k), dtype, "a")
    b = te.placeholder((k, n), dtype, "b")
    r = te.reduce_axis(k, "r")
    c = te.compute((m, n), lambda i, j: te.reduce_sum(a[i, r.var] * b[r.var, j], [r]), name="c")
    return a, b, c


def test_register_tile_axes_come_from_the_loads() -> None:
    """A matrix product tiles rows x columns; a convolution output channels x pixels; an
    element-wise stage and a row reduction (each load depends on both axes) nothing."""
    from lowering.gpu_schedule import tile_axes

    _, _, c = _matmul(8, 8, 8)
    assert tile_axes(c) == (0, 1)
    x = te.placeholder((1, 4, 10, 10), "float32", "x")
    w = te.placeholder((8, 4, 3, 3), "float32", "w")
    rc, ry, rx = te.reduce_axis(4, "rc"), te.reduce_axis(3, "ry"), te.reduce_axis(3, "rx")
    conv = te.compute((1, 8, 8, 8), lambda n, f, y, xx: te.reduce_sum(
        x[n, rc.var, y + ry.var, xx + rx.var] * w[f, rc.var, ry.var, rx.var], [rc, ry, rx]),
        name="conv")
    assert tile_axes(conv) == (1, 3)
    q = te.reduce_axis(8, "q")
    row_sums = te.compute((8, 8), lambda i, j: te.reduce_sum(c[i, q.var] * c[j, q.var], [q]),
                          name="gram")
    assert tile_axes(row_sums) == (0, 1)  # c[i, q] ignores j, c[j, q] ignores i
    z = te.placeholder((8, 8, 8), "float32", "z")
    sums = te.compute((8, 8), lambda i, j: te.reduce_sum(z[i, j, q.var], [q]), name="sums")
    assert tile_axes(sums) is None  # its one load depends on both axes
    ew = te.compute((8, 8), lambda i, j: c[i, j] * 2.0, name="ew")
    assert tile_axes(ew) is None


@pytest.mark.parametrize("tile", [(4, 4), (2, 4), (4, 8), (1, 4)])
def test_register_tile_keeps_partial_results_in_an_array(tile: tuple[int, int]) -> None:
    """The tiled product's reduce loop reads and writes only the register array; the output
    is stored once per element, after the reduction."""
    _, _, c = _matmul(37, 50, 29)
    a, b = c.op.body.body.a.tensor, c.op.body.body.b.tensor  # type: ignore[union-attr]
    k = render_kernel(lower_kernel("mm", [a, b], [c], lambda t: gpu_default_schedule(
        t, GPU_MACHINES["mali-valhall"], tile)))
    body = k.body
    assert f"[{tile[0] * tile[1]}];" in body
    # one access of the output in all: the store after the reduce loop (over r < 50)
    assert body.count("b2[") == 1
    assert body.index("b2[") > body.index("< ((i64)50)")


@pytest.mark.opencl
@needs_opencl
@pytest.mark.parametrize("tile", [(1, 1), (2, 2), (4, 4), (4, 8), (8, 4)])
@pytest.mark.parametrize("shape", [(37, 50, 29), (64, 16, 64), (3, 7, 5)])
def test_register_tiles_match_numpy(tile: tuple[int, int], shape: tuple[int, int, int]) -> None:
    """Partial tiles at both edges, tiles larger than an axis, several thread counts."""
    from targets.gpu.opencl_device import run_kernel

    m, k, n = shape
    a, b, c = _matmul(m, k, n)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((m, k)).astype(np.float32)
    y = rng.standard_normal((k, n)).astype(np.float32)
    for threads in (None, 7):
        kern = lower_kernel("mm", [a, b], [c], lambda t, th=threads: gpu_default_schedule(
            t, GPU_MACHINES["opencl-generic"], tile, th))
        got, = run_kernel(kern, [x, y])
        np.testing.assert_allclose(got, x @ y, rtol=1e-4, atol=1e-4)


@pytest.mark.opencl
@needs_opencl
@pytest.mark.parametrize("combiner", ["sum", "max"])
@pytest.mark.parametrize("out_shape", [(1, 6), (1,)])
def test_split_reductions_match_numpy(combiner: str, out_shape: tuple[int, ...]) -> None:
    """Few outputs over many values (a global pooling, a reduction to one value): every
    partials option of the space, over a count no option divides, against numpy."""
    from lowering.search.gpu_space import GpuDefaultSpace
    from targets.gpu.opencl_device import run_kernel

    x = te.placeholder((1, 6, 53, 61), "float32", "x")
    rng = np.random.default_rng(5)
    xs = rng.standard_normal((1, 6, 53, 61)).astype(np.float32)
    if out_shape == (1, 6):
        ry, rx = te.reduce_axis(53, "ry"), te.reduce_axis(61, "rx")
        out = te.compute(out_shape, lambda n, c: te.reduce(combiner, x[n, c, ry.var, rx.var],
                                                           [ry, rx]), name="pool")
        axes: tuple[int, ...] = (2, 3)
    else:
        ra, rb, rc = te.reduce_axis(6, "a"), te.reduce_axis(53, "b"), te.reduce_axis(61, "c")
        out = te.compute(out_shape, lambda n: te.reduce(combiner, x[n, ra.var, rb.var, rc.var],
                                                        [ra, rb, rc]), name="all")
        axes = (1, 2, 3)
    want = xs.sum(axis=axes) if combiner == "sum" else xs.max(axis=axes)
    space = GpuDefaultSpace([x], [out], [None], gpu_target("cuda"))
    knob = next(k for k in space.knobs if k.name == "s0.partials")
    assert 0 in knob.options and len(knob.options) >= 3
    for partials in knob.options:
        kernel = space.build({**space.default_config(), "s0.partials": partials}).kernel
        assert len(kernel.stages) == (2 if partials else 1)
        got, = run_kernel(kernel, [xs])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


@pytest.mark.opencl
@needs_opencl
def test_tuning_measures_on_the_opencl_device(tmp_path: Path) -> None:
    """`--tune` on an OpenCL target times candidates on the device (PoCL here), logs them,
    and the tuned model still matches onnxruntime."""
    from lowering.search.tuner import Tuner
    from targets.gpu.opencl_program import run_program

    path = ROOT / "models" / "resnet_tiny.onnx"
    tuner = Tuner(3.0, tmp_path / "log.jsonl", seed=1)
    target = gpu_target("mali")
    assert target.runs_here() and not gpu_target("cuda").runs_here()
    program = compile_model(load_graph(path), target, name="m", file=str(path), tuner=tuner)
    assert tuner.measure_calls > 0 and tuner.results
    assert (tmp_path / "log.jsonl").read_text().count("gpu-default") > 0
    feeds = _feeds(path, seed=7)
    want = ort.InferenceSession(str(path)).run(None, feeds)
    got = run_program(program, list(feeds.values()))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
