"""int8 on GPUs through a 4-way integer dot product (`intrinsics.GpuIntDot`: Mali's
`cl_arm_integer_dot_product_int8`, CUDA's `__dp4a`): the matcher (`tensorize.match_int_dot`)
takes int32 sums of products of int8/uint8 values less zero points and refuses other types;
the rewritten stage (reduce axis split into words of 4, zero points as correction products)
runs on PoCL, where the kernel source's `#else` branch (the portable definition) stands in for
the extension, and its integer results are exact against numpy; quantized MatMul and
convolution models (onnxruntime.quantization QDQ) compiled for mali match onnxruntime's int8
run exactly; the CUDA form passes nvcc + ptxas sm_90 with `dp4a` in the PTX."""

from __future__ import annotations

import logging
import shutil

import numpy as np
import pytest
import quant_models as qm
from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
from program_runner import load_graph, reference_outputs

from aotc.compiler import compile_model
from aotc.passes import run_passes
from lowering import te
from lowering.intrinsics import GPU_INT_DOTS
from lowering.machine import GPU_MACHINES
from lowering.search.gpu_space import GpuDefaultSpace
from lowering.tensorize import IntDotMatch, Refused, match_int_dot
from targets.gpu.codegen import cuda_to_ptx, module_of
from targets.gpu.opencl_device import opencl_available
from targets.gpu.prelude import prelude
from targets.gpu.render import render_kernel
from targets.gpu.target import gpu_target

logging.getLogger().setLevel(logging.ERROR)  # onnxruntime.quantization's pre-processing hint
needs_opencl = pytest.mark.skipif(not opencl_available(),
                                  reason="no OpenCL device (apt-get install pocl-opencl-icd)")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None or shutil.which("ptxas") is None,
                                reason="nvcc and ptxas not installed")
S8, U8 = GPU_INT_DOTS["dot4_s8"], GPU_INT_DOTS["dot4_u8"]


def _qmatmul(m: int, k: int, n: int, xt: str = "uint8", wt: str = "int8",
             zx: int | None = 3, zw: int | None = None, out: str = "int32"):
    """`sum_k (x - zx) * (w - zw)` as the quantization ops compose it (int32 views less the
    zero points, a zero point of None left out)."""
    x = te.placeholder((m, k), xt, "x")
    w = te.placeholder((k, n), wt, "w")
    r = te.reduce_axis(k, "r")

    def view(v: te.Expr, z: int | None) -> te.Expr:
        f = te.cast(out, v)
        return f if z is None else f - te.Const(z, out)

    c = te.compute((m, n), lambda i, j: te.reduce_sum(
        view(x[i, r.var], zx) * view(w[r.var, j], zw), [r]), name="c")
    return x, w, c


def test_description() -> None:
    """The instruction is data: 4 values per word, their types, the int32 result, and its
    spellings (the Arm built-in and extension, CUDA's __dp4a from sm_61)."""
    assert S8.group == 4 and S8.types == ("int8", "int8") and S8.accumulator == "int32"
    assert U8.types == ("uint8", "uint8") and U8.routine == "aotc_dot4_u8"
    assert S8.opencl == "arm_dot" and S8.opencl_extension == "cl_arm_integer_dot_product_int8"
    assert S8.cuda == "__dp4a" and S8.min_sm == 61
    assert GPU_MACHINES["mali-valhall"].dots == ("dot4_s8", "dot4_u8")
    assert GPU_MACHINES["sm_90"].dots and not GPU_MACHINES["opencl-generic"].dots


@pytest.mark.parametrize("xt,wt", [("int8", "int8"), ("uint8", "int8"), ("uint8", "uint8"),
                                   ("int8", "uint8")])
def test_matcher_accepts_8_bit_products_into_int32(xt: str, wt: str) -> None:
    """Any pair of int8/uint8 operands maps onto either signedness (a value of the other
    type moved by 128 into it, the shift a zero point); the corrections count the nonzero
    zero points in the instruction's type."""
    _, _, c = _qmatmul(8, 36, 8, xt, wt, zx=None, zw=None)
    for instr in (S8, U8):
        got = match_int_dot(c, instr)
        assert isinstance(got, IntDotMatch), got
        shifts = sum(t != instr.element for t in (xt, wt))
        assert got.corrections == shifts
        assert got.axis == 0
        body = got.body()
        assert [ax.extent for ax in body.axes] == [9]  # 36 values in words of 4


def test_matcher_refuses_other_types() -> None:
    for args in (dict(xt="int16", wt="int8"), dict(xt="int32", wt="int32"),
                 dict(xt="float32", wt="float32", zx=None, out="float32")):
        _, _, c = _qmatmul(4, 16, 4, **args)  # type: ignore[arg-type]
        why = match_int_dot(c, S8)
        assert isinstance(why, Refused) and why.reason, args
    _, _, c = _qmatmul(4, 16, 4, out="int64")
    assert "int64" in match_int_dot(c, S8).reason  # type: ignore[union-attr]
    x = te.placeholder((4, 16), "int8", "x")
    r = te.reduce_axis(16, "r")
    mx = te.compute((4,), lambda i: te.reduce("max", te.cast("int32", x[i, r.var]), [r]),
                    name="mx")
    assert "max" in match_int_dot(mx, S8).reason  # type: ignore[union-attr]
    _, _, c = _qmatmul(4, 3, 4)
    assert "fewer than 4" in match_int_dot(c, S8).reason  # type: ignore[union-attr]


def _space(c: te.Tensor, inputs, target: str = "mali") -> GpuDefaultSpace:
    return GpuDefaultSpace(inputs, [c], {}, gpu_target(target))


@pytest.mark.opencl
@needs_opencl
@pytest.mark.parametrize("xt,wt,zx,zw", [("uint8", "int8", 3, None), ("int8", "int8", None, None),
                                         ("uint8", "uint8", 200, 7), ("int8", "uint8", -5, 128)])
@pytest.mark.parametrize("k", [64, 37])
@pytest.mark.parametrize("tile", [None, [2, 4]])
def test_dot_kernel_is_exact(xt, wt, zx, zw, k, tile) -> None:
    """The rewritten stage on PoCL (the portable branch of the same source) equals numpy's
    integer product exactly: zero points on either side (0, 1 or 2 corrections), a reduction
    length that is not a multiple of 4 (the last word's tail zero), register tiles."""
    from targets.gpu.opencl_device import run_kernel

    x, w, c = _qmatmul(13, k, 10, xt, wt, zx, zw)
    space = _space(c, [x, w])
    cfg = space.default_config()
    assert cfg["s0.dot"] == 1
    if tile is not None:
        cfg["s0.tile"] = tile
    kern = space.build(cfg).kernel
    rng = np.random.default_rng(5)
    lo, hi = te.int_range(xt)
    xv = rng.integers(lo, hi + 1, (13, k)).astype(xt)
    lo, hi = te.int_range(wt)
    wv = rng.integers(lo, hi + 1, (k, 10)).astype(wt)
    got, = run_kernel(kern, [xv, wv])
    want = (xv.astype(np.int64) - (zx or 0)) @ (wv.astype(np.int64) - (zw or 0))
    np.testing.assert_array_equal(got, want.astype(np.int32))
    source = module_of([render_kernel(kern)], "opencl").source
    assert "aotc_dot4_" in source.split("AOTC_KERNEL mm")[-1] or "aotc_dot4_" in source


def test_kernel_source_has_both_branches() -> None:
    """OpenCL: the extension's built-in under its macro (the pragma enabling it), the
    portable definition of the same function otherwise; CUDA: __dp4a."""
    x, w, c = _qmatmul(8, 32, 8, "int8", "int8", None, None)
    space = _space(c, [x, w])
    mod = module_of([render_kernel(space.build(space.default_config()).kernel)], "opencl")
    assert mod.dots == ("dot4_s8",)
    src = mod.source
    ext = "cl_arm_integer_dot_product_int8"
    head, _, rest = src.partition(f"#ifdef {ext}\n")
    assert rest, "no #ifdef of the extension"
    with_ext, _, rest = rest.partition("#else\n")
    without, _, body = rest.partition("#endif\n")
    assert f"#pragma OPENCL EXTENSION {ext} : enable" in with_ext
    assert "arm_dot(as_char4(a), as_char4(b))" in with_ext
    assert "aotc_dot4_s8(u32 a, u32 b)" in without and "arm_dot" not in without
    assert "aotc_dot4_s8(" in body
    cuda = prelude("cuda", False, (), ("dot4_s8", "dot4_u8"))
    assert "__dp4a((int)a, (int)b, 0)" in cuda and "#ifdef" not in cuda


@needs_nvcc
def test_cuda_form_passes_ptxas_with_dp4a() -> None:
    x, w, c = _qmatmul(16, 40, 12, "uint8", "int8", 3, None)
    space = _space(c, [x, w], "cuda")
    assert space.dot[0] is not None
    mod = module_of([render_kernel(space.build(space.default_config()).kernel)], "cuda")
    assert mod.dots
    ptx = cuda_to_ptx(mod.source, "sm_90")
    assert "dp4a" in ptx


def test_no_dot_below_sm_61_or_on_generic_opencl() -> None:
    x, w, c = _qmatmul(8, 32, 8)
    assert _space(c, [x, w], "cuda:sm_60").dot == [None]
    assert _space(c, [x, w], "opencl").dot == [None]


def _uint8_qdq(model):
    """quantize_static QDQ with uint8 activations (onnxruntime's default) and int8 weights."""
    reader = qm._Reader(model.graph.input[0].name, qm.sample_inputs(model, 16, seed=7))
    return qm._quantized(model, lambda src, dst: quantize_static(
        src, dst, reader, quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8))


_MODELS = {
    "mlp_s8": lambda: qm.static_qdq(qm.block(attention=False)),
    "cnn_s8": lambda: qm.static_qdq(qm.cnn()),
    "cnn_per_channel": lambda: qm.static_qdq(qm.cnn(), per_channel=True),
    "mlp_u8": lambda: _uint8_qdq(qm.block(attention=False)),
    "cnn_u8": lambda: _uint8_qdq(qm.cnn()),
}


@pytest.mark.opencl
@needs_opencl
@pytest.mark.parametrize("name", sorted(_MODELS))
def test_quantized_models_on_mali_match_onnxruntime(name: str) -> None:
    """Quantized MatMul and convolution models compiled for mali: every integer product on
    the dot instruction (QLinearMatMul, QLinearConv with its padding read through), run on
    PoCL; the outputs equal onnxruntime's int8 run exactly (integer sums, requantized as
    onnxruntime does)."""
    from targets.gpu.opencl_program import run_program

    model = _MODELS[name]()
    graph = run_passes(load_graph(model, passes=False), ())
    program = compile_model(graph, gpu_target("mali"))
    assert program.gpu is not None and program.gpu.dots
    expected = "dot4_s8"  # int8 weights: the signed form (uint8 activations shifted by 128)
    assert program.gpu.dots == (expected,)
    src = program.gpu.source
    products = sum(1 for k in src.split("\nAOTC_KERNEL ")[1:] if "aotc_dot4_s8(" in k)
    assert products >= (5 if name.startswith("cnn") else 2)
    for x in qm.sample_inputs(model, 3, seed=3):
        got = run_program(program, [x])[0]
        np.testing.assert_array_equal(got, reference_outputs(model, [x])[0])
