"""The tensorized GEMM template: which computations it matches, and that every schedule it can
build (each register block, K blocking, operand mode, parallel axis) computes what onnxruntime
and numpy compute, through the whole compiler and on single kernels."""

import ctypes
import functools
import itertools
import math
import pathlib
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from program_runner import check_model, check_node  # noqa: E402

from lowering import te  # noqa: E402
from lowering.intrinsics import CONV_PREFIX, GemmBlock, conv_routine, gemm_blocks  # noqa: E402
from lowering.loop_ir import (  # noqa: E402
    BufLoad,
    Call,
    For,
    Prefetch,
    Seq,
    Store,
    format_stmt,
    map_exprs,
)
from lowering.ops import OPS, OpContext  # noqa: E402
from lowering.ops.linalg.product import matrix_product  # noqa: E402
from lowering.search.tuner import Tuner  # noqa: E402
from lowering.templates.gemm import GemmSpace, GemmTemplate, analyze  # noqa: E402
from targets.cpu.codegen import ModuleBuilder, optimize_and_emit  # noqa: E402
from targets.cpu.measure import kernel_arguments, kernel_function, link_serial  # noqa: E402
from targets.cpu.microkernels import routine_ir  # noqa: E402
from targets.cpu.target import NAMED_TARGETS, host_target  # noqa: E402

RNG = np.random.default_rng(1)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def op_outputs(op, inputs, consts, out_shape, **attrs):
    ctx = OpContext(node="n", op_type=op, attrs=attrs, inputs=inputs, consts=consts,
                    out_shapes=[out_shape], out_dtypes=["float32"])
    return OPS[op](ctx)


def general_conv(n, c, h, w, k, kh, kw, pads=(0, 0, 0, 0), stride=1, dilation=1, group=1):
    x = te.placeholder((n, c, h, w), "float32", "x")
    wt = te.placeholder((k, c // group, kh, kw), "float32", "w")
    b = te.placeholder((k,), "float32", "b")
    oh = (h + pads[0] + pads[2] - dilation * (kh - 1) - 1) // stride + 1
    ow = (w + pads[1] + pads[3] - dilation * (kw - 1) - 1) // stride + 1
    wv = rand(k, c // group, kh, kw)
    out = op_outputs("Conv", [x, wt, b], [None, wv, None], (n, k, oh, ow), pads=list(pads),
                     strides=[stride, stride], dilations=[dilation, dilation], group=group)[0]
    return [x, wt, b], out, wv


def general_conv_ref(x, w, b, pads, stride, dilation, group):
    n, c, h, wd = x.shape
    k, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3]))).astype(np.float64)
    oh = (h + pads[0] + pads[2] - dilation * (kh - 1) - 1) // stride + 1
    ow = (wd + pads[1] + pads[3] - dilation * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, k, oh, ow))
    kg = k // group
    for g in range(group):
        for r in range(kh):
            for s in range(kw):
                r0, s0 = r * dilation, s * dilation
                patch = xp[:, g * cg:(g + 1) * cg, r0:r0 + stride * oh:stride,
                           s0:s0 + stride * ow:stride]
                out[:, g * kg:(g + 1) * kg] += np.einsum(
                    "nchw,kc->nkhw", patch, w[g * kg:(g + 1) * kg, :, r, s])
    return (out + b[None, :, None, None]).astype(np.float32)


# matching -----------------------------------------------------------------------------------

def test_matmul_groups():
    a = te.placeholder((2, 40, 64), "float32", "a")
    b = te.placeholder((2, 64, 50), "float32", "b")
    out = op_outputs("MatMul", [a, b], [None, None], (2, 40, 50))[0]
    pat = analyze([out])
    assert pat is not None
    assert (pat.batch.size, pat.m.size, pat.n.size, pat.k.size) == (2, 40, 50, 64)
    assert pat.a.tensor is a and pat.b.tensor is b


@pytest.mark.parametrize("target_name", ["cpu-avx2", "cpu-avx512", "aarch64"])
def test_packing_copies_compile_without_llvm_warnings(target_name, capfd):
    """Every register block's packed-A kernel compiles without LLVM's "loop not vectorized"
    warning on stderr: a copy LLVM cannot vectorize (6x2's 6-row A panels on AVX2, shorter
    than a vector and no power of two) is not asked to be."""
    target = NAMED_TARGETS[target_name]
    a = te.placeholder((100, 64), "float32", "a")  # rows no block divides: a partial panel
    b = te.placeholder((64, 80), "float32", "b")
    bw = rand(64, 80)
    out = op_outputs("MatMul", [a, b], [None, bw], (100, 80))[0]
    space = GemmTemplate.match([a, b], [out], [None, bw], target)
    assert space is not None
    mb = ModuleBuilder(target)
    for i, blk in enumerate(space.blocks):
        cfg = {**space.default_config(), "block": blk.name, "a": "pack"}
        mb.add_kernel(space.build(space.canonical(cfg), f"k{i}").kernel)
    optimize_and_emit(mb.text(), target)
    assert "not vectorized" not in capfd.readouterr().err


def test_conv_is_implicit_gemm():
    ins, out, _ = general_conv(1, 16, 20, 20, 32, 3, 3, (1, 1, 1, 1))
    pat = analyze([out])
    assert pat is not None
    # M = output channels, N = output pixels (oh, ow), K = input channels x window
    assert (pat.m.size, pat.n.size, pat.k.size) == (32, 400, 16 * 9)
    assert pat.a.tensor is ins[1]
    assert len(pat.pre) == 1  # the padded copy of the input


def test_grouped_conv_is_a_batched_gemm():
    """A grouped convolution (RegNet, ResNeXt: several channels per group) splits its channel
    axis into the group, a batch axis both operands read, and the channel within it (M); the
    weights are packed per group. Depthwise convolutions (one channel per group) stay with
    their own template."""
    ins, out, _ = general_conv(1, 48, 14, 14, 96, 3, 3, (1, 1, 1, 1), group=6)
    pat = analyze([out])
    assert pat is not None and pat.group is not None
    assert (pat.batch.extents, pat.m.size, pat.n.size, pat.k.size) == ([1, 6], 16, 196, 72)
    assert pat.a.tensor is ins[1]
    # the bias, read at group x 16 + channel, is added by the micro-kernel to finished tiles
    space = GemmTemplate.match(ins, [out], [None, rand(96, 8, 3, 3), None],
                               NAMED_TARGETS["cpu-avx512"])
    assert space.fused_epilogue is not None and space.fused_epilogue.bias is ins[2]


def test_grouped_conv_runs_in_pixel_mode_on_avx2():
    """RegNetY's 8 channels per group fill one AVX2 vector: the cost model takes pixel mode
    (the group's windows read in place, its channels in the vector) over packing every window
    of the group (RegNetY-400MF's first grouped layer on a Zen 3: 2.43 -> 0.73 ms)."""
    ins, out, wv = general_conv(1, 48, 56, 56, 48, 3, 3, (1, 1, 1, 1), group=6)
    space = GemmTemplate.match(ins, [out], [None, wv, None], NAMED_TARGETS["cpu-avx2"])
    assert "pixels" in next(k.options for k in space.knobs if k.name == "b")
    config = Tuner().choose(space)
    assert (config["b"], config["block"]) == ("pixels", "14x1")


@pytest.mark.parametrize("c,h,k,kh,group,stride", [
    (16, 9, 24, 3, 2, 1),    # two groups, 12 output channels each: ragged M tiles
    (48, 14, 48, 3, 6, 2),   # RegNet's 8 channels per group, stride 2
    (32, 16, 64, 1, 4, 1),   # a grouped 1x1 (ShuffleNet, ResNeXt)
])
def test_every_grouped_conv_schedule(c, h, k, kh, group, stride, run_target):
    pads = (kh // 2,) * 4
    ins, out, wv = general_conv(1, c, h, h, k, kh, kh, pads, stride=stride, group=group)
    space = GemmTemplate.match(ins, [out], [None, wv, None], run_target)
    assert space is not None and space.pat.group is not None
    xv, bv = rand(1, c, h, h), rand(k)
    ref = general_conv_ref(xv, wv, bv, pads, stride, 1, group)
    configs = all_configs(space)
    for cfg, got in zip(configs, run_all(space, configs, [xv, wv, bv]), strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3, err_msg=str(cfg))


def test_grouped_conv_with_relu_against_ort():
    """Through the whole compiler: Conv(group=4) + Relu, and a batch of 2."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 32, 12, 12])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64, 6, 6])
    inits = [numpy_helper.from_array(rand(64, 8, 3, 3), "w"),
             numpy_helper.from_array(rand(64), "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2],
                              group=4),
             helper.make_node("Relu", ["c"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 13)])
    check_model(model, [rand(2, 32, 12, 12)])


def test_no_match_for_depthwise_and_matvec():
    _, dw, _ = general_conv(1, 32, 20, 20, 32, 3, 3, (1, 1, 1, 1), group=32)
    assert analyze([dw]) is None
    a = te.placeholder((300, 400), "float32", "a")
    v = te.placeholder((400,), "float32", "v")
    mv = op_outputs("MatMul", [a, v], [None, None], (300,))[0]
    assert analyze([mv]) is None


def test_register_blocks_fit_the_target():
    for t in (host_target(), NAMED_TARGETS["cpu-avx2"], NAMED_TARGETS["aarch64"]):
        for blk in gemm_blocks(t):
            assert blk.mr * blk.nv + blk.nv + 1 <= t.vector_registers
            assert blk.lanes == t.vector_lanes_f32


def test_micro_kernel_prefetches_b_rows_ahead(fitted_target):
    """B rows of window and direct operands lie a feature-map plane apart, too far for the
    hardware prefetchers: the full-tile loop prefetches every line of a row some k ahead."""
    from targets.cpu.microkernels import PREFETCH_ROWS, routine_ir
    blk = gemm_blocks(fitted_target)[0]
    text, decls = routine_ir(blk.routine, fitted_target)
    full_loop = text[text.index("full.body:"):text.index("full.exit:")]
    assert full_loop.count("@llvm.prefetch") == (blk.nr * 4 + 63) // 64 + 1
    assert f"mul i64 %b_ks, {PREFETCH_ROWS}" in text
    assert any("llvm.prefetch" in d for d in decls)


@pytest.mark.parametrize("target", ["cpu-avx512", "cpu-avx2", "aarch64"])
def test_conv_micro_kernel_prefetches_its_weights_ahead(target):
    """Pixel mode's weight panel streams from L2/L3 (ResNet-50's 7x7 and 14x14 layers ran
    0.69-0.84x the time with it): each k step prefetches every line of the NR weights
    PREFETCH_WEIGHT_STEPS steps ahead, besides the input rows it prefetched before."""
    from targets.cpu.microkernels import PREFETCH_WEIGHT_STEPS
    t = NAMED_TARGETS[target]
    blk = GemmBlock(6, 2, t.vector_lanes_f32)
    text, _ = routine_ir(conv_routine(blk), t)
    assert f"mul i64 %b_ks, {PREFETCH_WEIGHT_STEPS}" in text
    weight_lines = max(1, blk.nr * 4 // 64)
    input_rows = 3  # first, middle and last row of the tile
    loops = text.split(".body:")[1:]  # each k loop's body (tap loops and tails)
    full = [body.split(".exit:")[0] for body in loops if "masked.load" not in body.split(".exit:")[0]]
    assert full and all(b.count("@llvm.prefetch") == weight_lines + input_rows for b in full
                        if "@llvm.fma" in b)


@pytest.mark.parametrize("target", ["cpu-avx512", "cpu-avx2", "aarch64"])
def test_conv_micro_kernel_loads_whole_weight_vectors_on_partial_channel_tiles(target):
    """The packed weight panel is zero past the last channel, so a tile of fewer channels
    than NR (ResNet-50's 512 channels in 4x3's tiles of 24) runs the same k loop as a whole
    one: only its stores take masks. (AVX2's masked loads held their masks in registers the
    tile needed and spilled its accumulators on every k step.)"""
    t = NAMED_TARGETS[target]
    blk = GemmBlock(4, 3, t.vector_lanes_f32)
    text, _ = routine_ir(conv_routine(blk), t)
    bodies = [body.split(".exit:")[0] for body in text.split(".body:")[1:]]
    k_loops = [b for b in bodies if "@llvm.fma" in b]
    assert len(k_loops) == 2  # all rows, fewer rows
    assert not any("masked.load" in b for b in k_loops)
    assert "masked.store" in text  # the partial tile's stores


def test_cost_model_choices_for_network_layers(fitted_target):
    """Choices of the fitted cost model that measurements on a Cascade Lake core back by a wide
    margin (benchmarks/RESULTS.md, "cost model"): a 1x1 stride-1 convolution reads B in place
    (1.0 ms vs 1.4 ms packed for 256->64 channels at 56x56), and a 1024^3 GEMM reads A in
    place, does not split K and runs N panels (or chunks of them) outermost (16.7 ms vs
    25-36 ms)."""
    ins, out, wv = general_conv(1, 256, 56, 56, 64, 1, 1)
    space = GemmTemplate.match(ins, [out], [None, wv, None], fitted_target)
    assert space.cost({**space.default_config(), "b": "direct"}) < space.cost(
        {**space.default_config(), "b": "pack"})
    a = te.placeholder((1024, 1024), "float32", "a")
    b = te.placeholder((1024, 1024), "float32", "b")
    mm = op_outputs("MatMul", [a, b], [None, None], (1024, 1024))[0]
    space = GemmTemplate.match([a, b], [mm], [None, rand(1024, 1024)], fitted_target)
    best = min((dict(zip([k.name for k in space.knobs], c, strict=True))
                for c in itertools.product(*[k.options for k in space.knobs])), key=space.cost)
    assert (best["a"], best["kc"]) == ("direct", 1024) and best["parallel"] in ("n", "blocked")


def test_cost_model_scales_packing_by_the_vector_width():
    """Packing copies fewer elements per instruction with 8-lane vectors: on AVX2 ResNet-50's
    3x3 layers at 28 and 14 run in pixel mode (measured 1.1-1.3x faster than packed), as
    they do on AVX-512."""
    ins, out, wv = general_conv(1, 128, 28, 28, 128, 3, 3, (1, 1, 1, 1))
    for name in ("cpu-avx2", "cpu-avx512"):
        space = GemmTemplate.match(ins, [out], [None, wv, None], NAMED_TARGETS[name])
        assert space.default_config()["b"] == "pixels", name
    space = GemmTemplate.match(ins, [out], [None, wv, None], NAMED_TARGETS["cpu-avx2"])
    pack = {**space.default_config(), "b": "pack", "block": "4x3", "kc": 256}
    assert space.cost(pack) > space.cost({**pack, "b": "pixels", "block": "6x2"})


def test_direct_mode_counts_the_lines_its_rows_span():
    """B read in place caches whole lines: on 28x28 planes (rows start on a line) a 16-float
    micro-panel row spans one line and a 24-float one two; on 14x14 planes (196 floats, rows
    start mid-line) a 24-float row spans ~2.4 lines (2.1 with the short last tile), so a K
    block of 256 rows of 4x3's panel outgrows L1 and the model prefers 128 on ResNet-50's
    1024->256 at 14x14 for AVX2 (measured 1.1-1.2x faster than 256 on a Zen 4 core running
    AVX2 code)."""
    t = NAMED_TARGETS["cpu-avx2"]
    ins, out, wv = general_conv(1, 128, 28, 28, 512, 1, 1)
    space = GemmTemplate.match(ins, [out], [None, wv, None], t)
    blocks = {b.name: b for b in space.blocks}
    full_tiles = 784 // 24 * 2 * 64 + 64  # 32 tiles of two lines, the 16-float last of one
    assert space.direct_row_bytes(blocks["6x2"]) == 64
    assert space.direct_row_bytes(blocks["4x3"]) == full_tiles / 33
    ins, out, wv = general_conv(1, 1024, 14, 14, 256, 1, 1)
    space = GemmTemplate.match(ins, [out], [None, wv, None], t)
    blk = {b.name: b for b in space.blocks}["4x3"]
    assert 2.0 * 64 < space.direct_row_bytes(blk) < 2.5 * 64  # 8 whole tiles, one of 4
    direct = {**space.default_config(), "b": "direct", "block": "4x3", "parallel": "n"}
    assert space.cost({**direct, "kc": 128}) < space.cost({**direct, "kc": 256})


def test_cost_model_keeps_blocks_of_an_in_place_a_to_few_rows(fitted_target):
    """A GEMM whose A (activations) is read in place: every block row is a stream of lines of
    its own, and 14-row blocks measured 5-40 % slower than 6-9 rows at K >= 512 in either
    loop order and K blocking (GEMM 512: 2.39-2.51 ms against 6x4's 2.17-2.30). The model
    picks a block of at most A_STREAMS_OVERLAPPED rows there, and charges packing A (a
    transposing copy, 0.66-0.72 ms for 512x512) more than reading it in place."""
    from lowering.templates.gemm import A_STREAMS_OVERLAPPED
    a = te.placeholder((512, 512), "float32", "a")
    b = te.placeholder((512, 512), "float32", "b")
    mm = op_outputs("MatMul", [a, b], [None, None], (512, 512))[0]
    space = GemmTemplate.match([a, b], [mm], [None, rand(512, 512)], fitted_target)
    cfg = space.default_config()
    assert cfg["a"] == "direct" and space.block(cfg).mr <= A_STREAMS_OVERLAPPED
    for blk in ("14x2", "6x4"):
        direct = {**cfg, "block": blk, "a": "direct"}
        assert space.cost(direct) < space.cost({**direct, "a": "pack"})
    assert space.cost({**cfg, "block": "14x2", "kc": 128, "parallel": "m"}) > space.cost(cfg)


@pytest.mark.parametrize("target_name", ["cpu-avx2", "cpu-avx512"])
def test_cost_of_a_batched_product_is_the_batch_times_one_product(target_name):
    """B products of one shape cost B times one (Winograd's 36 per-pixel products, attention's
    per-head ones): its FMA work counted once per batch, not B^2 times (the model had read
    Winograd's [36: 128x128] x [128x16] product at 12 ms against 0.17 ms measured)."""
    target = NAMED_TARGETS[target_name]
    costs = []
    for batch in (1, 36):
        a = te.placeholder((batch, 128, 128), "float32", "a")
        b = te.placeholder((batch, 128, 16), "float32", "b")
        mm = op_outputs("MatMul", [a, b], [None, None], (batch, 128, 16))[0]
        space = GemmTemplate.match([a, b], [mm], [None, None], target)
        assert space is not None and space.pat.batch.size == batch
        configs = [dict(zip([k.name for k in space.knobs], combo, strict=True))
                   for combo in itertools.product(*[k.options for k in space.knobs])]
        costs.append([space.cost(cfg) for cfg in configs])
    for one, many in zip(*costs, strict=True):
        assert many == pytest.approx(36 * one, rel=0.01)


def test_cost_model_charges_strided_packing_as_a_gather(fitted_target):
    """A stride-2 1x1 projection (ResNet-50's 256->512 at 56x56) packs by gathering every other
    pixel, which costs more per element than a run copy (one-layer bundles: pixel mode 0.90x
    of packing in the M-outer order, which the model had ranked first). A stride-1 layer's
    packing is no gather."""
    ins, out, wv = general_conv(1, 256, 56, 56, 512, 1, 1, stride=2)
    space = GemmTemplate.match(ins, [out], [None, wv, None], fitted_target)
    assert space.b_gathers and space.default_config()["b"] == "pixels"
    ins, out, wv = general_conv(1, 64, 56, 56, 64, 3, 3, pads=(1, 1, 1, 1))
    assert not GemmTemplate.match(ins, [out], [None, wv, None], fitted_target).b_gathers


def test_cost_model_packs_small_k_pointwise_layers_with_large_outputs_in_m_order(fitted_target):
    """A 1x1 convolution whose output outgrows L2 and whose K is small is bound by writing the
    output: the model packs its input and runs M tiles outermost, so that the loop writes a few
    whole rows at a time (MobileNetV2's 16->96 at 112x112: 0.63x of the in-place N-outer
    schedule in a one-layer bundle). With a large input (ResNet-50's 256->128 at 56x56) the
    packed input would be re-read from memory per M tile, and it stays in place."""
    ins, out, wv = general_conv(1, 16, 112, 112, 96, 1, 1)
    cfg = GemmTemplate.match(ins, [out], [None, wv, None], fitted_target).default_config()
    assert (cfg["b"], cfg["parallel"]) == ("pack", "m")
    ins, out, wv = general_conv(1, 256, 56, 56, 128, 1, 1)
    cfg = GemmTemplate.match(ins, [out], [None, wv, None], fitted_target).default_config()
    assert cfg["b"] == "direct"
    ins, out, wv = general_conv(1, 16, 28, 28, 96, 1, 1)  # the output fits L2: no write-back term
    space = GemmTemplate.match(ins, [out], [None, wv, None], fitted_target)
    cfg = space.default_config()
    assert space._write_back(cfg, 1) == 0.0

# every configuration of a space computes the same result -------------------------------------

def at_lengths(space: GemmSpace, configs):
    """Every configuration built into one object (one LLVM run, one link); returns
    run(arrays, length=None) -> each configuration's output, its kernels called with `dims` at
    `length` for a space over a run-time dimension (buffers laid out for the bound). Outputs
    start as NaN, so an element no kernel writes fails a comparison."""
    built = [space.build(cfg, f"kt{i}") for i, cfg in enumerate(configs)]
    mb = ModuleBuilder(space.target)
    for b in built:
        mb.add_kernel(b.kernel)
    obj, _ = optimize_and_emit(mb.text(), space.target)
    lib = link_serial(obj)
    n_in = len(space.inputs)

    def run(arrays, length: int | None = None):
        dims = (ctypes.c_int64 * 1)(length) if length is not None else None
        results = []
        for b in built:
            inputs = [b.const_transforms[i](a) if i in b.const_transforms else a
                      for i, a in enumerate(arrays)]
            args, ptrs = kernel_arguments(b.kernel, inputs)
            for a, buf in zip(args, b.kernel.buffers, strict=True):
                assert a.shape == tuple(buf.shape)
            for a in args[n_in:]:
                a.fill(np.nan)
            assert kernel_function(lib, b.kernel.name)(None, ptrs, dims) == 0
            results.append(args[n_in])
        return results

    return run


def run_all(space: GemmSpace, configs, arrays):
    """Build every configuration into one object (one LLVM run, one link) and run each; outputs
    start as NaN so that an element no kernel writes fails the comparison."""
    return at_lengths(space, configs)(arrays)


def two_blocks(space) -> tuple[str, str]:
    """A tall and a wide register block of the space's target: 14x2 and 6x4 with 32 vector
    registers, else the target's first two."""
    options = dict((k.name, k.options) for k in space.knobs)["block"]
    if {"14x2", "6x4"} <= set(options):
        return ("14x2", "6x4")
    return tuple(options[:2])


def all_configs(space):
    """Every option of every knob at least once (the rest at the cost model's choice), plus
    a few random combinations."""
    base = space.default_config()
    seen = []
    for knob in space.knobs:
        for opt in knob.options:
            cfg = {**base, knob.name: opt}
            if cfg not in seen:
                seen.append(cfg)
    rng = np.random.default_rng(0)
    for _ in range(4):
        cfg = {k.name: k.options[rng.integers(len(k.options))] for k in space.knobs}
        if cfg not in seen:
            seen.append(cfg)
    return seen


def test_every_matmul_schedule(run_target):
    m, k, n = 37, 300, 53
    a = te.placeholder((m, k), "float32", "a")
    b = te.placeholder((k, n), "float32", "b")
    out = op_outputs("MatMul", [a, b], [None, None], (m, n))[0]
    av, bv = rand(m, k), rand(k, n)
    for consts in ([None, None], [None, bv]):
        space = GemmTemplate.match([a, b], [out], consts, run_target)
        assert space is not None
        configs = list(all_configs(space))
        assert len(configs) > 8 and len(space.knobs) == 6
        for cfg, got in zip(configs, run_all(space, configs, [av, bv]), strict=True):
            np.testing.assert_allclose(got, av @ bv, rtol=1e-4, atol=1e-3, err_msg=str(cfg))


def test_every_conv_schedule(run_target):
    ins, out, wv = general_conv(1, 6, 11, 11, 20, 3, 3, (1, 1, 1, 1), stride=2)
    xv, bv = rand(1, 6, 11, 11), rand(20)
    space = GemmTemplate.match(ins, [out], [None, wv, None], run_target)
    assert space is not None
    configs = list(all_configs(space))
    ref = general_conv_ref(xv, wv, bv, (1, 1, 1, 1), 2, 1, 1)
    for cfg, got in zip(configs, run_all(space, configs, [xv, wv, bv]), strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3, err_msg=str(cfg))


@pytest.mark.parametrize("act", [None, "tanh"])
def test_m_outer_order_runs_chunks_of_n_panels_when_b_outgrows_half_of_l2(
        act, fitted_target, run_target):
    """With B larger than half of L2, the M-outer order runs M tiles within chunks of N
    panels that fit a quarter of it (on a 1 MiB L2 a ragged last chunk: 162 panels in chunks
    of 12), for every K blocking, mode of B and block; with a fused epilogue and with one
    applied in place per chunk (tanh)."""
    ins, out, wv = general_conv(1, 160, 72, 72, 20, 1, 1)
    y = out if act is None else te.compute(out.shape, lambda *i: te.Unary(act, out[i]), act)
    space = GemmTemplate.match(ins, [y], [None, wv, None], fitted_target)
    assert space.chunk_panels(space.block({"block": "14x2"})) == 12
    cfg = {"block": "14x2", "kc": 160, "a": "const", "b": "direct", "parallel": "m"}
    loops = [f for f in _nodes(space.build(cfg).kernel.stages[-1], For)]
    assert loops[0].extent.value == 14 * 2, format_stmt(loops[0])  # chunks x M tiles

    space = GemmTemplate.match(ins, [y], [None, wv, None], run_target)
    blocks = two_blocks(space)
    blk = space.block({"block": blocks[0]})
    assert space.chunk_panels(blk) < -(-72 * 72 // blk.nr)  # chunked on this target's L2 too
    xv, bv = rand(1, 160, 72, 72), rand(20)
    want = general_conv_ref(xv, wv, bv, (0, 0, 0, 0), 1, 1, 1)
    want = want if act is None else np.tanh(want)
    configs = [{"block": blk, "kc": kc, "a": "const", "b": b, "parallel": "m"}
               for blk in blocks for kc in (160, 128) for b in ("direct", "pack")]
    for cfg, got in zip(configs, run_all(space, configs, [xv, wv, bv]), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3, err_msg=str(cfg))


@pytest.mark.parametrize("target", ["cpu-avx2", "aarch64"])
def test_other_targets_compile(target):
    t = NAMED_TARGETS[target]
    ins, out, wv = general_conv(1, 8, 9, 9, 24, 3, 3, (1, 1, 1, 1))
    space = GemmTemplate.match(ins, [out], [None, wv, None], t)
    assert space is not None
    mb = ModuleBuilder(t)
    base = space.default_config()
    for i, cfg in enumerate({**base, "block": b} for b in space.knobs[0].options):
        mb.add_kernel(space.build(cfg, f"kt{i}").kernel)
    obj, _ = optimize_and_emit(mb.text(), t)
    assert len(obj) > 0


# through the whole compiler, against onnxruntime ---------------------------------------------

@pytest.mark.parametrize("a_shape,b_shape,const_b", [
    ((37, 53), (53, 290), True),
    ((37, 53), (53, 290), False),
    ((1, 128), (128, 300), True),
    ((2, 33, 40), (2, 40, 70), False),     # batched, both operands at run time
    ((3, 20, 64), (64, 50), True),         # batch broadcast against constant weights
    ((2, 4, 50, 64), (2, 4, 64, 50), False),  # attention-like scores
])
def test_matmul_against_ort(a_shape, b_shape, const_b):
    check_node("MatMul", [rand(*a_shape), rand(*b_shape)], consts={1} if const_b else set())


@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_gemm_transposes_against_ort(trans_a, trans_b):
    m, k, n = 45, 70, 130
    a = rand(k, m) if trans_a else rand(m, k)
    b = rand(n, k) if trans_b else rand(k, n)
    check_node("Gemm", [a, b, rand(n)], consts={1, 2}, transA=trans_a, transB=trans_b,
               alpha=0.5, beta=2.0)


@pytest.mark.parametrize("shape,kernel,attrs", [
    ((1, 16, 20, 20), (32, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 16, 20, 20), (32, 16, 3, 3), {"pads": [1, 1, 1, 1]}),           # batch 2
    ((1, 32, 15, 15), (64, 32, 1, 1), {}),                                  # 1x1 direct
    ((1, 32, 15, 15), (64, 32, 1, 1), {"strides": [2, 2]}),                 # 1x1 stride 2
    ((1, 3, 33, 33), (24, 3, 7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]}),  # stem
    ((1, 16, 17, 17), (32, 8, 3, 3), {"pads": [1, 1, 1, 1], "group": 2}),   # grouped
    ((1, 16, 17, 17), (24, 16, 3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    ((1, 16, 12, 20), (24, 16, 3, 5), {"pads": [1, 2, 1, 2]}),              # non-square
])
def test_conv_against_ort(shape, kernel, attrs):
    check_node("Conv", [rand(*shape), rand(*kernel), rand(kernel[0])], consts={1, 2}, **attrs)


def test_conv_with_relu_and_residual_against_ort():
    """Conv + bias + residual Add + Relu: the epilogue runs in the GEMM kernel."""
    w = numpy_helper.from_array(rand(32, 32, 3, 3), "w")
    b = numpy_helper.from_array(rand(32), "b")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c", "x"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 14, 14])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 14, 14])],
                          [w, b])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    model = onnx.shape_inference.infer_shapes(model)
    check_model(model, [rand(1, 32, 14, 14)])


@pytest.mark.parametrize("c,h,k,kh,act", [
    (24, 9, 40, 1, "Relu"),   # 1x1: direct and pack modes; 40 channels: a short last M tile
    (150, 6, 33, 1, "Clip"),  # K blocks below K = 150: the epilogue on the last one only
    (16, 8, 20, 3, "Relu"),   # 3x3: pack mode (window mode keeps its own pass)
])
def test_gemm_kernel_fuses_bias_residual_and_clamps_in_every_schedule(c, h, k, kh, act, run_target):
    """clamp(conv + bias + residual) is applied by the GEMM micro-kernel to the finished tile
    in registers (rows being output channels) wherever the tile is stored into the output,
    and every direct/pack schedule agrees with numpy."""
    pads = (kh // 2,) * 4
    ins, conv, wv = general_conv(1, c, h, h, k, kh, kh, pads)
    res = te.placeholder(conv.shape, "float32", "res")
    lo, hi = (0.0, None) if act == "Relu" else (-0.5, 1.5)

    def clamped(*i):  # one output stage, as the fusion pass hands Add + Relu/Clip over
        e = conv[i] + res[i]
        for bound, cmp in ((lo, "lt"), (hi, "gt")):
            if bound is not None:
                c = te.Const(bound, "float32")
                e = te.select(te.Binary(cmp, e, c), c, e)
        return e

    y = te.compute(conv.shape, clamped, "epilogue")
    inputs = [*ins, res]
    space = GemmTemplate.match(inputs, [y], [None, wv, None, None], run_target)
    fe = space.fused_epilogue
    assert fe is not None and fe.bias is ins[2] and fe.residual is res
    knobs = {kb.name: kb.options for kb in space.knobs}
    configs = [{**space.default_config(), "block": blk, "kc": kc, "b": b, "parallel": par}
               for blk in two_blocks(space) for kc in knobs["kc"] for par in ("m", "n")
               for b in ("direct", "pack") if b in knobs["b"]]
    xv, bv, rv = rand(1, c, h, h), rand(k), rand(*conv.shape)
    ref = np.clip(general_conv_ref(xv, wv, bv, pads, 1, 1, 1) + rv, lo, hi if hi else np.inf)
    for cfg, got in zip(configs, run_all(space, configs, [xv, wv, bv, rv]), strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3, err_msg=str(cfg))
        if cfg["parallel"] == "m":  # (N order on these widths accumulates in a line-pitched
            kernel = space.build(cfg).kernel  # scratch, and the epilogue copies it out)
            out_buf = next(b for b in kernel.buffers if b.role == "output")
            assert not any(_stores_to(st, out_buf) for st in kernel.stages), cfg


@pytest.mark.parametrize("m,k,n,residual,act", [
    (40, 96, 72, False, None),     # + bias[n]: a linear layer; 72 columns: a masked last panel
    (33, 150, 50, False, "Relu"),  # K blocks below 150: the epilogue on the last one only
    (16, 64, 24, True, None),      # + residual: BERT's output projections, left to the pass
])
def test_gemm_kernel_fuses_a_bias_per_column(m, k, n, residual, act, run_target):
    """A MatMul's + bias[n] (+ ReLU) is applied by the GEMM micro-kernel to the finished
    tile, the bias a vector per column vector (flag 2), in every schedule; no pass over the
    output is left where tiles are stored straight into it. With a residual too, the pass
    does it all, as before."""
    a = te.placeholder((m, k), "float32", "a")
    b = te.placeholder((k, n), "float32", "b")
    bias = te.placeholder((n,), "float32", "bias")
    res = te.placeholder((m, n), "float32", "res")
    prod = matrix_product(a, b)

    def epilogue(i, j):
        e = prod[i, j] + bias[j]
        if residual:
            e = e + res[i, j]
        if act == "Relu":
            zero = te.Const(0.0, "float32")
            e = te.select(te.Binary("lt", e, zero), zero, e)
        return e

    y = te.compute((m, n), epilogue, "epilogue")
    inputs = [a, b, bias, *([res] if residual else [])]
    bw = rand(k, n)
    space = GemmTemplate.match(inputs, [y], [None, bw, None, None][:len(inputs)], run_target)
    fe = space.fused_epilogue
    if residual:  # the residual stays in the pass over the output (see _clamped_bias)
        assert fe is None
    else:
        assert fe is not None and fe.bias is bias and fe.bias_on_columns and fe.residual is None
    knobs = {kb.name: kb.options for kb in space.knobs}
    configs = [{**space.default_config(), "block": blk, "kc": kc, "a": am, "parallel": par}
               for blk in two_blocks(space) for kc in knobs["kc"] for par in knobs["parallel"]
               for am in knobs["a"]]
    av, biasv, rv = rand(m, k), rand(n), rand(m, n)
    ref = av @ bw + biasv + (rv if residual else 0)
    if act == "Relu":
        ref = np.maximum(ref, 0)
    arrays = [av, bw, biasv, *([rv] if residual else [])]
    for cfg, got in zip(configs, run_all(space, configs, arrays), strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4, err_msg=str(cfg))
        if space._fuses_epilogue(space.canonical(cfg)):
            kernel = space.build(space.canonical(cfg)).kernel
            out_buf = next(x for x in kernel.buffers if x.role == "output")
            assert not any(_stores_to(st, out_buf) for st in kernel.stages), cfg


def run_in_place(space: GemmSpace, configs, arrays, res_index: int):
    """Build and run each configuration with its output written over input `res_index`
    (one buffer passed for both, as the memory plan does); returns what that buffer holds."""
    built = [space.build(cfg, f"ip{i}") for i, cfg in enumerate(configs)]
    mb = ModuleBuilder(space.target)
    for b in built:
        mb.add_kernel(b.kernel)
    lib = link_serial(optimize_and_emit(mb.text(), space.target)[0])
    results = []
    out_index = len(space.inputs)
    for b in built:
        inputs = [b.const_transforms[i](a) if i in b.const_transforms else a.copy()
                  for i, a in enumerate(arrays)]  # a copy: each run overwrites its residual
        args, ptrs = kernel_arguments(b.kernel, inputs)
        ptrs[out_index] = ptrs[res_index]
        assert kernel_function(lib, b.kernel.name)(None, ptrs, None) == 0
        results.append(args[res_index])
    return results


@pytest.mark.parametrize("kh, modes", [(1, ("direct", "pack")), (3, ("pixels",))])
def test_residual_may_be_overwritten_by_the_output_when_the_tile_finishes_in_one_call(
        kh, modes, run_target):
    """in_place_input names the residual exactly for the schedules whose micro-kernel reads
    each residual element right before storing the output there (one K block; pixel mode at
    any K block); those schedules, run with one buffer as residual and output, agree with
    numpy."""
    c, h, k = 150, 9, 40
    pads = (kh // 2,) * 4
    ins, conv, wv = general_conv(1, c, h, h, k, kh, kh, pads)
    res = te.placeholder(conv.shape, "float32", "res")
    zero = te.Const(0.0, "float32")
    y = te.compute(conv.shape, lambda *i: te.select(te.Binary("lt", conv[i] + res[i], zero),
                                                    zero, conv[i] + res[i]), "epilogue")
    space = GemmTemplate.match([*ins, res], [y], [None, wv, None, None], run_target)
    assert space.fused_epilogue is not None and space.fused_epilogue.residual is res
    knobs = {kb.name: kb.options for kb in space.knobs}
    configs = [{**space.default_config(), "block": blk, "kc": kc, "b": b, "parallel": par}
               for blk in two_blocks(space) for kc in knobs["kc"] for par in ("m", "n")
               for b in modes]
    in_place = [cfg for cfg in configs if space.in_place_input(cfg) == 3]
    for cfg in configs:
        one_call = cfg["b"] == "pixels" or (cfg["kc"] >= space.pat.k.size and (
            cfg["parallel"] == "m" or space.pat.n.size % run_target.vector_lanes_f32 == 0))
        assert (cfg in in_place) == one_call, cfg
    assert in_place
    for cfg in in_place:
        # the micro-kernel alone touches residual and output (its parameters carry no noalias);
        # no loop of the kernel itself, whose accesses carry alias scopes, loads or stores them
        kernel = space.build(cfg).kernel
        res_buf, out_buf = kernel.buffers[3], kernel.buffers[4]
        loaded: list = []
        for st in kernel.stages:
            map_exprs(st, functools.partial(_collect_loads, out=loaded))
        assert not any(_stores_to(st, out_buf) for st in kernel.stages), cfg
        assert all(b is not res_buf for b in loaded), cfg
    xv, bv, rv = rand(1, c, h, h), rand(k), rand(*conv.shape)
    ref = np.maximum(general_conv_ref(xv, wv, bv, pads, 1, 1, 1) + rv, 0)
    for cfg, got in zip(in_place, run_in_place(space, in_place, [xv, wv, bv, rv], 3),
                        strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3, err_msg=str(cfg))


def _collect_loads(e, out: list):
    """Appends the buffer of every BufLoad in `e` to `out`; returns `e` (for map_exprs)."""
    if isinstance(e, BufLoad):
        out.append(e.buf)
        _collect_loads(e.index, out)
    for ch in te.children(e):
        _collect_loads(ch, out)
    return e


def _stores_to(stmt, buf) -> bool:
    if isinstance(stmt, Store):
        return stmt.buf is buf
    if isinstance(stmt, For):
        return _stores_to(stmt.body, buf)
    if isinstance(stmt, Seq):
        return any(_stores_to(x, buf) for x in stmt.stmts)
    return False


def test_padding_folded_into_packing_only_for_strided_windows_without_row_taps(run_target):
    """A stride-2 window reads each input element ~2 times: when it has no taps along the row
    (k x 1), its padding copy is folded into the im2col packing (no scratch for it). With taps
    along the row (3x3), the packing reads a residue-split copy instead (see the test below),
    made from the padded copy. A 3x3 stride-1 window reads it 9 times: the copy is kept."""
    for kw, stride, folded in ((1, 2, True), (3, 2, False), (3, 1, False)):
        pads = (1, kw // 2, 1, kw // 2)
        ins, out, wv = general_conv(1, 8, 18, 18, 16, 3, kw, pads, stride=stride)
        space = GemmTemplate.match(ins, [out], [None, wv, None], run_target)
        cfg = {**space.default_config(), "b": "pack"}
        kernel = space.build(cfg).kernel
        scratch = [b.shape for b in kernel.buffers if b.role == "scratch"]
        oh, ow = out.shape[2:]
        span = (1, 8, (oh - 1) * stride + 3, (ow - 1) * stride + kw)  # the padded copy
        assert (span not in scratch) == folded, scratch
        xv, bv = rand(1, 8, 18, 18), rand(16)
        got = run_all(space, [cfg], [xv, wv, bv])[0]
        np.testing.assert_allclose(got, general_conv_ref(xv, wv, bv, pads, stride, 1, 1),
                                   rtol=1e-4, atol=1e-3)


def _nodes(stmt, kind):
    if isinstance(stmt, kind):
        yield stmt
    if isinstance(stmt, For):
        yield from _nodes(stmt.body, kind)
    if isinstance(stmt, Seq):
        for x in stmt.stmts:
            yield from _nodes(x, kind)


def test_pointwise_packing_copies_one_run_per_row_and_prefetches_the_next_tile(
        fitted_target, run_target):
    """A 1x1 convolution's input holds a tile's pixels contiguously across image rows: its
    im2col packing copies one run of NR per k row (not one per image row the tile spans) and
    prefetches the next tile's run of that row (each k row is its own stream). Numerics are
    checked against the reference for a ragged last tile."""
    ins, out, wv = general_conv(1, 16, 10, 10, 24, 1, 1)
    for target in (fitted_target, run_target):
        space = GemmTemplate.match(ins, [out], [None, wv, None], target)
        name = two_blocks(space)[1]
        blk = space.block({"block": name})
        cfg = {**space.default_config(), "b": "pack", "parallel": "m", "block": name}
        pack = space.build(cfg).kernel.stages[0]
        copies = [f for f in _nodes(pack, For) if f.kind == "vectorize"]
        assert len(copies) == 1 and f"min({blk.nr}" in format_stmt(copies[0]).replace(" ", ""), \
            format_stmt(pack)
        ahead = list(_nodes(pack, Prefetch))
        assert len(ahead) == blk.nr * 4 // 64, format_stmt(pack)  # the next tile's run's lines
    xv, bv = rand(1, 16, 10, 10), rand(24)
    got = run_all(space, [cfg], [xv, wv, bv])[0]
    np.testing.assert_allclose(got, general_conv_ref(xv, wv, bv, (0, 0, 0, 0), 1, 1, 1),
                               rtol=1e-4, atol=1e-3)


# window mode: convolutions without im2col ----------------------------------------------------

def test_window_found_for_unit_stride_convolutions(fitted_target):
    ins, out, wv = general_conv(1, 16, 20, 20, 32, 3, 3, pads=(1, 1, 1, 1))
    space = GemmTemplate.match(ins, [out], [None, wv, None], fitted_target)
    w = space.window
    assert w is not None and "window" in dict((k.name, k.options) for k in space.knobs)["b"]
    # the run is the input channels; the taps step by the padded row (22) and by one
    assert w.run_extent == 16 and w.run_stride == 22 * 22
    assert sorted((e, c) for _, e, c in w.taps) == [(3, 1), (3, 22)]
    assert (w.out_row, w.row, w.rows, w.size) == (20, 22, 20, 19 * 22 + 20)
    # dilation 2 and a non-square kernel keep the window; their taps step further
    ins, out, wv = general_conv(1, 8, 12, 40, 8, 3, 5, pads=(2, 4, 2, 4), dilation=2)
    w = GemmTemplate.match(ins, [out], [None, wv, None], fitted_target).window
    assert w is not None and sorted(c for _, _, c in w.taps) == [2, 2 * 48]


def test_no_window_for_strided_pointwise_or_tiny_images(fitted_target):
    cases = [
        general_conv(1, 16, 20, 20, 32, 3, 3, pads=(1, 1, 1, 1), stride=2),  # stride 2
        general_conv(1, 16, 20, 20, 32, 1, 1),  # 1x1: read in place ("direct")
        general_conv(1, 16, 4, 4, 32, 3, 3, pads=(1, 1, 1, 1)),  # 22 columns for 16 pixels
    ]
    for ins, out, wv in cases:
        space = GemmTemplate.match(ins, [out], [None, wv, None], fitted_target)
        assert space.window is None
        assert "window" not in dict((k.name, k.options) for k in space.knobs)["b"]


@pytest.mark.parametrize("n,c,h,w,k,kh,kw,pads,dilation,group", [
    (1, 150, 9, 9, 20, 3, 3, (1, 1, 1, 1), 1, 1),   # run split into K blocks (kc < 150)
    (2, 12, 10, 10, 16, 3, 3, (1, 1, 1, 1), 1, 1),  # batch 2
    (1, 8, 12, 40, 8, 3, 5, (2, 4, 2, 4), 2, 1),    # dilated, non-square, odd padding
    (1, 10, 14, 14, 6, 3, 3, (0, 0, 0, 0), 1, 1),   # no padding: B is the input itself
])
def test_every_window_schedule(n, c, h, w, k, kh, kw, pads, dilation, group, run_target):
    ins, out, wv = general_conv(n, c, h, w, k, kh, kw, pads, dilation=dilation, group=group)
    space = GemmTemplate.match(ins, [out], [None, wv, None], run_target)
    assert space is not None and space.window is not None
    configs = [cfg for cfg in all_configs(space) if cfg["b"] == "window"]
    configs += [{**configs[0], "block": b} for b in space.knobs[0].options]
    configs += [{**configs[0], "kc": kc, "parallel": par}
                for kc in space.knobs[1].options for par in ("n", "m")]
    xv, bv = rand(n, c, h, w), rand(k)
    ref = general_conv_ref(xv, wv, bv, pads, 1, dilation, group)
    for cfg, got in zip(configs, run_all(space, configs, [xv, wv, bv]), strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3, err_msg=str(cfg))


@pytest.mark.parametrize("target", ["cpu-avx2", "aarch64"])
def test_window_mode_compiles_for_other_targets(target):
    t = NAMED_TARGETS[target]
    ins, out, wv = general_conv(1, 8, 9, 9, 24, 3, 3, pads=(1, 1, 1, 1))
    space = GemmTemplate.match(ins, [out], [None, wv, None], t)
    mb = ModuleBuilder(t)
    for i, blk in enumerate(space.knobs[0].options):
        mb.add_kernel(space.build({**space.default_config(), "b": "window", "block": blk},
                                  f"kw{i}").kernel)
    obj, _ = optimize_and_emit(mb.text(), t)
    assert len(obj) > 0


@pytest.mark.parametrize("c,h,w,k,kh,kw,pads,stride,dilation", [
    (3, 30, 30, 16, 7, 7, (3, 3, 3, 3), 2, 1),     # ResNet stem
    (8, 17, 23, 12, 5, 3, (2, 1, 2, 1), 3, 1),     # stride 3, odd widths
    (6, 19, 19, 10, 3, 3, (2, 2, 2, 2), 2, 2),     # dilated
])
def test_strided_window_packs_from_a_split_input(c, h, w, k, kh, kw, pads, stride, dilation,
                                                 run_target):
    """A window with stride s along the row is packed from a copy of its input split by column
    residue ([q][..][j] = x[.., s*j + q]), so the packing copies contiguous runs; every packed
    schedule still computes the convolution. 1x1 strided windows are packed directly."""
    ins, out, wv = general_conv(1, c, h, w, k, kh, kw, pads, stride=stride, dilation=dilation)
    space = GemmTemplate.match(ins, [out], [None, wv, None], run_target)
    configs = [cfg for cfg in all_configs(space) if cfg["b"] == "pack"]
    for cfg in configs:
        kernel = space.build(cfg).kernel
        split = [b for b in kernel.buffers if b.role == "scratch" and len(b.shape) == 5
                 and b.shape[0] == stride]
        assert len(split) == 1, [b.shape for b in kernel.buffers]
    xv, bv = rand(1, c, h, w), rand(k)
    ref = general_conv_ref(xv, wv, bv, pads, stride, dilation, 1)
    for cfg, got in zip(configs, run_all(space, configs, [xv, wv, bv]), strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3, err_msg=str(cfg))
    ins, out, wv = general_conv(1, 64, 20, 20, 32, 1, 1, stride=2)
    space = GemmTemplate.match(ins, [out], [None, wv, None], run_target)
    kernel = space.build({**space.default_config(), "b": "pack"}).kernel
    assert not [b for b in kernel.buffers if b.role == "scratch" and len(b.shape) == 5]


# pixel mode: output pixels in the micro-kernel's rows, channels in its vectors ---------------

def test_pixel_mode_found_for_convolutions(fitted_target):
    cases = [
        (general_conv(1, 16, 20, 20, 32, 3, 3, pads=(1, 1, 1, 1)), (1, 22)),
        (general_conv(1, 16, 20, 20, 32, 3, 3, pads=(1, 1, 1, 1), stride=2), (2, 2 * 21)),  # the padding stops at the last column read
        (general_conv(1, 32, 7, 7, 64, 1, 1), (1, 7)),
    ]
    for (ins, out, wv), (col_stride, row) in cases:
        space = GemmTemplate.match(ins, [out], [None, wv, None], fitted_target)
        assert "pixels" in dict((k.name, k.options) for k in space.knobs)["b"]
        assert (space.pixels.col_stride, space.pixels.row) == (col_stride, row)
    # an RGB stem: the micro-kernel's k loop walks the filter width (7 taps one float apart),
    # the three channels and the filter rows are its taps; the cost model picks it over im2col
    ins, out, wv = general_conv(1, 3, 224, 224, 64, 7, 7, (3, 3, 3, 3), stride=2)
    space = GemmTemplate.match(ins, [out], [None, wv, None], fitted_target)
    w = space.pixels
    assert (w.run_extent, w.run_stride) == (7, 1)
    assert sorted((e, c) for _, e, c in w.taps) == [(3, 229 * 229), (7, 229)]  # padded to 229
    assert space.default_config()["b"] == "pixels"


@pytest.mark.parametrize("n,c,h,w,k,kh,kw,pads,stride,dilation", [
    (1, 20, 13, 13, 40, 3, 3, (1, 1, 1, 1), 1, 1),   # rows of 13: ragged tiles, 40 channels
    (1, 24, 15, 15, 20, 3, 3, (1, 1, 1, 1), 2, 1),   # stride 2
    (2, 16, 12, 40, 8, 3, 5, (2, 4, 2, 4), 1, 2),    # batch 2, dilated, non-square
    (1, 32, 7, 7, 48, 1, 1, (0, 0, 0, 0), 1, 1),     # 1x1 on 7x7: tiles span output rows
    (1, 150, 5, 5, 33, 3, 3, (1, 1, 1, 1), 1, 1),    # channel blocks (kc < 150), 5x5 image
    (1, 3, 30, 30, 16, 7, 7, (3, 3, 3, 3), 2, 1),    # RGB stem: the filter width is the run
])
def test_every_pixel_schedule(n, c, h, w, k, kh, kw, pads, stride, dilation, run_target):
    ins, out, wv = general_conv(n, c, h, w, k, kh, kw, pads, stride=stride, dilation=dilation)
    space = GemmTemplate.match(ins, [out], [None, wv, None], run_target)
    base = {**space.default_config(), "b": "pixels", "parallel": "n"}
    configs = [{**base, "block": blk, "kc": kc}
               for blk in space.knobs[0].options for kc in space.knobs[1].options]
    xv, bv = rand(n, c, h, w), rand(k)
    ref = general_conv_ref(xv, wv, bv, pads, stride, dilation, 1)
    for cfg, got in zip(configs, run_all(space, configs, [xv, wv, bv]), strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3, err_msg=str(cfg))


def _outer_kinds(kernel) -> list[str]:
    """The kinds of the pixel loop (`pf`) of a pixel-mode kernel."""
    found = []

    def walk(st):
        if isinstance(st, For):
            if st.var.name == "pf":
                found.append(st.kind)
            walk(st.body)
        elif isinstance(st, Seq):
            for x in st.stmts:
                walk(x)
    for st in kernel.stages:
        walk(st)
    return found


@pytest.mark.parametrize("cores", [1, 2])
def test_small_convolutions_share_pixel_blocks_of_equal_rows(cores):
    """A convolution whose multiply-adds take long enough at the core's FMA peak to be worth
    sharing (cost_model.worth_parallel) runs its pixel blocks in parallel, sized so that each
    thread gets the same rows: 16 -> 32 channels, 3x3/2 onto 8x8 (295K multiply-adds, 5 us on
    a Zen 4 core) on two cores in blocks of 4 rows, not PIXELS_PER_BLOCK's 6 + 2 (which
    left the second thread a third of the work); on one core serial, in blocks of 6. A 1x1
    of 32K multiply-adds stays serial."""
    zen4 = NAMED_TARGETS["zen4"]
    target = zen4.with_machine(zen4.machine.with_cores(cores))
    ins, out, wv = general_conv(1, 16, 16, 16, 32, 3, 3, (1, 1, 1, 1), stride=2)
    space = GemmTemplate.match(ins, [out], [None, wv, None], target)
    assert space.parallel_threads() == cores
    for blk in space.knobs[0].options:
        cfg = {**space.default_config(), "b": "pixels", "block": blk, "kc": 144}
        tiling = space.pixel_tiling(cfg)
        items = math.ceil(32 / space.block(cfg).nr)
        if tiling.g == 1:  # blocks of whole rows
            assert tiling.groups == 8
            if cores == 2:
                assert 8 % tiling.gb == 0 and items * tiling.blocks % 2 == 0, blk
            else:
                assert tiling.gb == min(8, math.ceil(48 / 8)), blk
        kinds = _outer_kinds(space.build(cfg).kernel)
        assert kinds == ["parallel" if cores == 2 and items * tiling.blocks > 1 else "serial"]
    ins, out, wv = general_conv(1, 16, 8, 8, 32, 1, 1)
    assert GemmTemplate.match(ins, [out], [None, wv, None], target).parallel_threads() == 1


def test_pixel_mode_on_one_core_costs_its_one_core_time():
    """On one core the busiest thread has every row: pixel mode's threaded cost is its
    one-core cost even when an image's last block is short (16 rows in blocks of 3: six
    blocks, the last of one row). Counted as six full blocks, 16x1 on a 16 -> 16 3x3 layer at
    16x16 cost 1.125x its time, and the rank by one-core plus threaded time took a window
    schedule that ran 2x slower (resnet_tiny's first stage on a Zen 4 core). On two cores
    the blocks are balanced (eight of two rows) and the busiest thread has half."""
    zen4 = NAMED_TARGETS["zen4"]
    for cores, blocks, busiest_rows in ((1, 6, 16), (2, 8, 8)):
        target = zen4.with_machine(zen4.machine.with_cores(cores))
        ins, out, wv = general_conv(1, 16, 16, 16, 16, 3, 3, (1, 1, 1, 1))
        space = GemmTemplate.match(ins, [out], [None, wv, None], target)
        cfg = {**space.default_config(), "b": "pixels", "block": "16x1", "kc": 144}
        tiling = space.pixel_tiling(cfg)
        assert (tiling.groups, tiling.blocks) == (16, blocks)
        cost = space.cost(cfg)
        assert space.threaded_cost(cfg) == pytest.approx(cost * busiest_rows / 16)


def test_balanced_pixel_blocks_compute_the_convolution(run_target):
    """Pixel blocks balanced over two threads (a 14-row and a 9-row image, rows of 7 pixels
    spanning tiles) give the reference's values, through a parallel loop split unevenly."""
    target = run_target.with_machine(run_target.machine.with_cores(2))
    for h, w, stride in ((14, 14, 1), (17, 15, 2)):
        ins, out, wv = general_conv(1, 24, h, w, 40, 3, 3, (1, 1, 1, 1), stride=stride)
        space = GemmTemplate.match(ins, [out], [None, wv, None], target)
        assert space.parallel_threads() == 2
        configs = [{**space.default_config(), "b": "pixels", "block": blk, "kc": kc}
                   for blk in space.knobs[0].options[:3] for kc in (32, 216)]
        xv, bv = rand(1, 24, h, w), rand(40)
        ref = general_conv_ref(xv, wv, bv, (1, 1, 1, 1), stride, 1, 1)
        for cfg, got in zip(configs, run_all(space, configs, [xv, wv, bv]), strict=True):
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3, err_msg=str(cfg))


def _swish_conv(target, c: int, h: int, k: int):
    """A 1x1 convolution whose output stage is x * sigmoid(x): an epilogue pixel mode cannot
    fuse into its micro-kernel, so it runs over each finished block of tiles."""
    ins, conv, wv = general_conv(1, c, h, h, k, 1, 1)
    y = te.compute(conv.shape, lambda *i: conv[i] * te.Unary("sigmoid", conv[i]), "swish")
    space = GemmTemplate.match(ins, [y], [None, wv, None], target)
    return space, wv


def _vector_loops(stmt):
    if isinstance(stmt, For):
        if stmt.kind == "vectorize":
            yield stmt
        yield from _vector_loops(stmt.body)
    elif isinstance(stmt, Seq):
        for x in stmt.stmts:
            yield from _vector_loops(x)


@pytest.mark.parametrize("name, masked", [("zen4", True), ("cpu-avx2", False)])
def test_pixel_epilogue_runs_full_vectors_over_balanced_blocks(name, masked):
    """Pixel blocks balanced over two cores (112 -> 672 at 14x14: 7 of the 14 rows per
    block) leave the epilogue's loop a run-time trip count (98 pixels, or fewer in the last
    block); on AVX-512 it runs with a masked last vector, which keeps LLVM's vectorizer at full
    width: with a scalar remainder it chose 4 lanes for a sigmoid (xmm), a third slower at
    one thread than the unbalanced kernel. On AVX2 (masked moves microcoded on AMD) the
    remainder stays scalar."""
    base = NAMED_TARGETS[name]
    target = base.with_machine(base.machine.with_cores(2))
    space, _ = _swish_conv(target, 112, 14, 672)
    cfg = {**space.default_config(), "b": "pixels", "block": "14x2" if masked else "6x2",
           "kc": 112}
    tiling = space.pixel_tiling(cfg)
    assert tiling.blocks > 1  # balanced: blocks of part of the image
    kernel = space.build(cfg).kernel
    loops = [lp for st in kernel.stages for lp in _vector_loops(st)]
    assert loops and all(lp.masked_tail == masked for lp in loops)
    if masked:  # every sigmoid's divide on whole 16-lane vectors
        mb = ModuleBuilder(target)
        mb.add_kernel(kernel)
        obj = optimize_and_emit(mb.text(), target)[0]
        path = pathlib.Path(tempfile.mkdtemp()) / "k.o"
        path.write_bytes(obj)
        asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(path)],
                             capture_output=True, text=True, check=True).stdout
        divides = re.findall(r"vdiv[ps]s\s+(%[xyz]mm)", asm)
        assert divides and set(divides) == {"%zmm"}, divides


def test_pixel_epilogue_over_balanced_blocks_computes_the_swish(run_target):
    """The same epilogue (masked or scalar tail, as the host has) against numpy, over blocks
    balanced for two cores and a channel count that leaves a short last tile."""
    target = run_target.with_machine(run_target.machine.with_cores(2))
    space, wv = _swish_conv(target, 40, 14, 72)
    configs = [{**space.default_config(), "b": "pixels", "block": blk, "kc": 40}
               for blk in space.knobs[0].options[:3]]
    xv, bv = rand(1, 40, 14, 14), rand(72)
    conv = general_conv_ref(xv, wv, bv, (0, 0, 0, 0), 1, 1, 1).astype(np.float64)
    ref = conv / (1 + np.exp(-conv))
    for cfg, got in zip(configs, run_all(space, configs, [xv, wv, bv]), strict=True):
        assert space.pixel_tiling(cfg).blocks > 1, cfg
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4, err_msg=str(cfg))


def _calls(stmt):
    if isinstance(stmt, For):
        yield from _calls(stmt.body)
    elif isinstance(stmt, Seq):
        for x in stmt.stmts:
            yield from _calls(x)
    elif isinstance(stmt, Call):
        yield stmt.func


@pytest.mark.parametrize("size,block,rows", [
    (7, "14x2", {14, 7}),   # two output rows per tile; the image's last row alone
    (13, "6x4", {6, 1}),    # rows of 13: two tiles of 6 and one of 1 per row
    (14, "14x2", {14}),     # whole rows: no short tile
    (5, "14x2", {10, 5}),   # rows of 5: two per tile, so full tiles hold 10
])
def test_pixel_mode_short_tiles_run_a_shorter_micro_kernel(size, block, rows):
    """No rows past an image's end are computed and dropped: the last tile of a row (or of
    the image, when a tile spans rows) calls a micro-kernel of just the rows it has."""
    target = NAMED_TARGETS["cpu-avx512"]
    ins, out, wv = general_conv(1, 32, size, size, 32, 1, 1)
    space = GemmTemplate.match(ins, [out], [None, wv, None], target)
    kernel = space.build({**space.default_config(), "b": "pixels", "block": block,
                          "kc": 32, "parallel": "n"}).kernel
    nv = int(block.split("x")[1])
    names = [c.removesuffix("n") for st in kernel.stages for c in _calls(st)]
    assert set(names) == {f"{CONV_PREFIX}{r}x{nv}v16" for r in rows}


@pytest.mark.parametrize("size, kh, stride, near", [
    (14, 1, 1, True),    # a tile of 14 pixels in one row, one float apart: within a line
    (29, 3, 2, False),   # two floats apart: 26 floats from first to last
    (7, 1, 1, False),    # a tile spans two output rows
])
def test_pixel_tiles_within_a_line_prefetch_their_input_from_two_rows(size, kh, stride, near):
    """The convolution micro-kernel prefetches the input column of a k step from its first,
    middle and last row; a tile whose pixels lie in one output row less than a line apart
    calls the `near` variant, which leaves out the middle row (its lines are the others')."""
    target = NAMED_TARGETS["cpu-avx512"]
    ins, out, wv = general_conv(1, 32, size, size, 32, kh, kh, (kh // 2,) * 4, stride=stride)
    space = GemmTemplate.match(ins, [out], [None, wv, None], target)
    kernel = space.build({**space.default_config(), "b": "pixels", "block": "14x2",
                          "kc": space.pat.k.size, "parallel": "n"}).kernel
    names = {c for st in kernel.stages for c in _calls(st)} - {f"{CONV_PREFIX}1x2v16n"}
    assert names and all(n.endswith("n") == near for n in names), names  # (a 1-pixel tail:
    # always within a line)
    far, close = (routine_ir(conv_routine(GemmBlock(14, 2, 16), v), target)[0]
                  for v in (False, True))
    assert far.count("@llvm.prefetch") > close.count("@llvm.prefetch")


def test_pixel_mode_with_relu_and_residual_against_ort():
    """The epilogue runs in place over the transposed tiles: bias, residual add and ReLU."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 14, 14])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 14, 14])
    inits = [numpy_helper.from_array(rand(32, 32, 3, 3) * 0.1, "w"),
             numpy_helper.from_array(rand(32), "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "x"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 13)])
    ins, out, wv = general_conv(1, 32, 14, 14, 32, 3, 3, (1, 1, 1, 1))
    space = GemmTemplate.match(ins, [out], [None, wv, None], host_target())
    assert space.default_config()["b"] == "pixels"
    check_model(model, [rand(1, 32, 14, 14)])
    # the fused node's computation: the residual and the ReLU go into the tile store
    res = te.placeholder(out.shape, "float32", "res")
    y = te.compute(out.shape, lambda *i: te.select(te.lt(out[i] + res[i], 0.0), 0.0,
                                                   out[i] + res[i]), "add_relu")
    space = GemmTemplate.match([*ins, res], [y], [None, wv, None, None], host_target())
    fused = space.fused_epilogue
    assert fused is not None and fused.residual is res and (fused.lo, fused.hi) == (0.0, None)
    xv, bv, rv = rand(1, 32, 14, 14), rand(32), rand(1, 32, 14, 14)
    want = np.maximum(general_conv_ref(xv, wv, bv, (1, 1, 1, 1), 1, 1, 1) + rv, 0)
    configs = [{**space.default_config(), "b": "pixels", "kc": kc}
               for kc in space.knobs[1].options]
    for cfg, got in zip(configs, run_all(space, configs, [xv, wv, bv, rv]), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3, err_msg=str(cfg))


@pytest.mark.parametrize("target", ["cpu-avx2", "aarch64"])
def test_pixel_mode_compiles_for_other_targets(target):
    """Narrower vectors transpose in 8x8 or 4x4 blocks, and blocks taller than a vector
    transpose in several."""
    t = NAMED_TARGETS[target]
    ins, out, wv = general_conv(1, 16, 9, 9, 24, 3, 3, pads=(1, 1, 1, 1))
    space = GemmTemplate.match(ins, [out], [None, wv, None], t)
    assert any(int(b.split("x")[0]) > t.vector_lanes_f32 for b in space.knobs[0].options)
    mb = ModuleBuilder(t)
    for i, blk in enumerate(space.knobs[0].options):
        for kc in space.knobs[1].options:
            mb.add_kernel(space.build({**space.default_config(), "b": "pixels", "block": blk,
                                       "kc": kc}, f"kp{i}_{kc}").kernel)
    obj, _ = optimize_and_emit(mb.text(), t)
    assert len(obj) > 0


@pytest.mark.parametrize("act,bias", [("Relu", True), ("Clip", True), ("Clip", False),
                                      (None, False)])
def test_pixel_mode_fuses_bias_and_clamps_into_the_micro_kernel(act, bias):
    """Bias, ReLU and Clip are applied to the finished tile in registers (no pass over the
    output afterwards); a residual add is not (test above)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 24, 9, 9])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 40, 9, 9])
    inits = [numpy_helper.from_array(rand(40, 24, 3, 3), "w")]
    conv_in = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rand(40), "b"))
        conv_in.append("b")
    nodes = [helper.make_node("Conv", conv_in, ["c" if act else "y"], pads=[1, 1, 1, 1])]
    if act == "Relu":
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    elif act == "Clip":
        inits += [numpy_helper.from_array(np.array(-0.5, np.float32), "lo"),
                  numpy_helper.from_array(np.array(6.0, np.float32), "hi")]
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 13)])
    check_model(model, [rand(1, 24, 9, 9) * 3])
    # the space the compiler sees for the fused node, and the bounds it found
    ins, out, wv = general_conv(1, 24, 9, 9, 40, 3, 3, (1, 1, 1, 1))
    space = GemmTemplate.match(ins, [out], [None, wv, None], host_target())
    assert space.fused_epilogue is not None and space.fused_epilogue.bias is ins[2]
    kernel = space.build({**space.default_config(), "b": "pixels"}).kernel
    out_buf = next(b for b in kernel.buffers if b.role == "output")

    def stores_to_output(s):
        if isinstance(s, Store):
            return int(s.buf is out_buf)
        if isinstance(s, For):
            return stores_to_output(s.body)
        if isinstance(s, Seq):
            return sum(stores_to_output(x) for x in s.stmts)
        return 0

    assert sum(stores_to_output(st) for st in kernel.stages) == 0  # only the micro-kernel


def test_pixel_mode_epilogue_that_is_not_fused_runs_in_place(run_target):
    """An epilogue other than bias/clamps/residual (here tanh) is applied by a pass over each
    finished block of tiles, for every K blocking."""
    ins, out, wv = general_conv(1, 20, 11, 11, 36, 3, 3, (1, 1, 1, 1), stride=2)
    y = te.compute(out.shape, lambda *i: te.Unary("tanh", out[i]), "tanh")
    space = GemmTemplate.match(ins, [y], [None, wv, None], run_target)
    assert space.fused_epilogue is None
    xv, bv = rand(1, 20, 11, 11), rand(36)
    want = np.tanh(general_conv_ref(xv, wv, bv, (1, 1, 1, 1), 2, 1, 1))
    configs = [{**space.default_config(), "b": "pixels", "kc": kc, "block": blk}
               for kc in space.knobs[1].options for blk in space.knobs[0].options[:3]]
    for cfg, got in zip(configs, run_all(space, configs, [xv, wv, bv]), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=str(cfg))


@pytest.mark.parametrize("n,c,hw,stride,offered", [
    (1, 32, 56, 2, True),    # a strided window over 58x58 planes
    (2, 16, 50, 2, True),    # batch 2; rows of 50 (the copy's last block of a row is short)
    (1, 32, 28, 2, False),   # planes too small (measured slower there)
    (1, 32, 56, 1, False),   # unit stride
    (1, 24, 56, 2, None),    # offered where 24 channels are whole vectors (8 lanes, not 16)
])
def test_channels_last_copy_for_strided_windows_on_large_planes(n, c, hw, stride, offered,
                                                                run_target):
    """Pixel mode may write its padding copy channels-last (knob `layout`): offered for
    strided windows over large planes, and every schedule with it computes the convolution
    (the transposing copy's padding rows, columns and short blocks included)."""
    ins, out, wv = general_conv(n, c, hw, hw, 24, 3, 3, (1, 1, 1, 1), stride=stride)
    space = GemmTemplate.match(ins, [out], [None, wv, None], run_target)
    layouts = dict((k.name, k.options) for k in space.knobs)["layout"]
    if offered is None:
        offered = c % run_target.vector_lanes_f32 == 0
    assert ("channels_last" in layouts) == offered
    if not offered:
        return
    base = {**space.default_config(), "b": "pixels", "layout": "channels_last"}
    configs = [{**base, "block": b, "kc": kc} for b in space.knobs[0].options[:3]
               for kc in space.knobs[1].options[:2]]
    kernel = space.build(base).kernel
    assert any(f.startswith("aotc_transpose") for s in kernel.stages for f in _calls(s))
    xv, bv = rand(n, c, hw, hw), rand(24)
    ref = general_conv_ref(xv, wv, bv, (1, 1, 1, 1), stride, 1, 1)
    for cfg, got in zip(configs, run_all(space, configs, [xv, wv, bv]), strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3, err_msg=str(cfg))


# run-time dimensions ---------------------------------------------------------------------------

@pytest.mark.parametrize("where,bound", [("m", 40), ("n", 40), ("k", 40), ("m-const-b", 40),
                                         ("m-blocked", 1200), ("k-blocked", 300)])
def test_every_schedule_stops_at_the_run_time_dimension(where, bound, run_target):
    """A batched product whose M, N or K axis runs to a run-time dimension: every
    configuration (the blocked order and K blocks among them where the bound offers them), run
    at lengths from 1 to the bound, matches numpy on the first `length` rows, columns or terms;
    it never reads the operands past the length (NaN there) and never writes the output past
    it (left NaN)."""
    L = te.DynExtent(te.dim_var(0, 1, bound))
    shapes = {"m": ((2, L, 24), (2, 24, 20)), "n": ((2, 16, 32), (2, 32, L)),
              "k": ((2, 16, L), (2, L, 32)), "m-const-b": ((L, 64), (64, 48)),
              "m-blocked": ((L, 300), (300, 40)), "k-blocked": ((16, L), (L, 32))}[where]
    kind = where.split("-")[0]
    a = te.placeholder(shapes[0], "float32", "a")
    b = te.placeholder(shapes[1], "float32", "b")
    out_shape = (*shapes[0][:-1], shapes[1][-1])
    out = op_outputs("MatMul", [a, b], [None, None], out_shape)[0]
    av, bv = rand(*map(int, shapes[0])), rand(*map(int, shapes[1]))
    consts = [None, bv] if where == "m-const-b" else [None, None]
    space = GemmTemplate.match([a, b], [out], consts, run_target)
    assert space is not None and space.dynamic
    configs = all_configs(space)
    assert {c["parallel"] for c in configs} >= {"n", "m"}
    if where == "m-blocked":
        assert "blocked" in {c["parallel"] for c in configs}
    if where == "k-blocked":
        assert min(c["kc"] for c in configs) < bound
    axis = {"m": (-2, None), "n": (None, -1), "k": (-1, -2)}[kind]
    out_ax = {"m": -2, "n": -1, "k": None}[kind]
    run = at_lengths(space, configs)
    for length in sorted({1, 13, 2 * bound // 3 + 1, bound}):
        a_in, b_in = av.copy(), bv.copy()
        for arr, ax in zip((a_in, b_in), axis, strict=True):
            if ax is not None:
                np.moveaxis(arr, ax, 0)[length:] = np.nan
        cut_a = a_in if axis[0] is None else np.take(a_in, range(length), axis[0])
        cut_b = b_in if axis[1] is None else np.take(b_in, range(length), axis[1])
        want = cut_a @ cut_b
        for cfg, got in zip(configs, run([a_in, b_in], length),
                            strict=True):
            if out_ax is not None:
                assert np.isnan(np.moveaxis(got, out_ax, 0)[length:]).all(), cfg
                got = np.take(got, range(length), out_ax)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3,
                                       err_msg=f"length {length}: {cfg}")
