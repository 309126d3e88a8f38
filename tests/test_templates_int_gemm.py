"""The integer GEMM template (lowering/templates/int_gemm): which instruction each target gets,
and quantized convolutions and matrix products on it (depthwise ones on the depthwise
template's integer form), bit-exact against onnxruntime on every
target this machine runs (and on AArch64 under qemu)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from program_runner import load_graph, reference_outputs, run_program

from aotc.compiler import compile_model
from aotc.driver import optimize_model
from aotc.package.build import build_bundle, run_model_process
from lowering import te
from lowering.ops import OPS, OpContext
from lowering.search.select import space_for
from lowering.templates.depthwise import DepthwiseSpace, exact_in_float
from targets.cpu.codegen import ModuleBuilder
from targets.cpu.target import NAMED_TARGETS

RNG = np.random.default_rng(7)
ONNX_TYPE = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8, np.int32: TensorProto.INT32}


def _ints(dtype, shape, lo=None, hi=None) -> np.ndarray:
    info = np.iinfo(dtype)
    return RNG.integers(info.min if lo is None else lo, (info.max if hi is None else hi) + 1,
                        shape).astype(dtype)


def _model(node: onnx.NodeProto, inputs: dict[str, np.ndarray], inits: dict[str, np.ndarray],
           out_type) -> onnx.ModelProto:
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(k, ONNX_TYPE[v.dtype.type], list(v.shape))
         for k, v in inputs.items()],
        [helper.make_tensor_value_info(node.output[0], out_type, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    return onnx.shape_inference.infer_shapes(model)


def qlinear_conv(n=1, ci=8, h=10, w=10, co=16, k=3, pad=1, stride=1, xdt=np.uint8,
                 wdt=np.int8, per_channel=True, w_zero=0, bias=True, group=1):
    x = _ints(xdt, (n, ci, h, w))
    wts = _ints(wdt, (co, ci // group, k, k), *((-90, 90) if wdt == np.int8 else (0, 255)))
    cs = co if per_channel else 1
    inits = {
        "xs": np.float32(0.05), "xz": np.array(3 if xdt == np.uint8 else -5, xdt), "w": wts,
        "ws": (RNG.random(cs) * 0.01 + 0.001).astype(np.float32).reshape(-1 if per_channel else ()),
        "wz": np.full(cs, w_zero, wdt).reshape(-1 if per_channel else ()),
        "ys": np.float32(0.5), "yz": np.array(7, xdt)}
    names = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    if bias:
        inits["b"] = _ints(np.int32, (co,), -2000, 2000)
        names.append("b")
    node = helper.make_node("QLinearConv", names, ["y"], pads=[pad] * 4, strides=[stride] * 2,
                            group=group)
    return _model(node, {"x": x}, inits, ONNX_TYPE[xdt]), [x]


def qlinear_matmul(a_shape=(2, 24, 40), n=48, xdt=np.int8, const_b=True):
    a = _ints(xdt, a_shape)
    b = _ints(np.int8, (a_shape[-1], n), -100, 100)
    inits = {"as": np.float32(0.02), "az": np.array(-3 if xdt == np.int8 else 130, xdt),
             "bs": (RNG.random(n) * 0.01 + 0.001).astype(np.float32),
             "bz": np.zeros(n, np.int8), "ys": np.float32(0.3), "yz": np.array(2, xdt)}
    inputs = {"a": a}
    if const_b:
        inits["b"] = b
    else:
        inputs["b"] = b
        inits["bs"], inits["bz"] = np.float32(0.004), np.array(4, np.int8)
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"],
                            ["y"])
    return _model(node, inputs, inits, ONNX_TYPE[xdt]), list(inputs.values())


def matmul_integer():
    a, b = _ints(np.uint8, (33, 64)), _ints(np.int8, (64, 50))
    node = helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])
    return _model(node, {"a": a}, {"b": b, "az": np.array(12, np.uint8),
                                   "bz": np.array(0, np.int8)}, TensorProto.INT32), [a]


def conv_integer():
    x, w = _ints(np.uint8, (1, 6, 12, 11)), _ints(np.int8, (20, 6, 3, 3))
    node = helper.make_node("ConvInteger", ["x", "w", "xz"], ["y"], pads=[1, 0, 1, 2])
    return _model(node, {"x": x}, {"w": w, "xz": np.array(100, np.uint8)},
                  TensorProto.INT32), [x]


CASES = {
    "conv3x3_u8": lambda: qlinear_conv(),
    "conv3x3_s8_per_tensor": lambda: qlinear_conv(xdt=np.int8, per_channel=False),
    "conv_64ch_14x14": lambda: qlinear_conv(ci=64, co=72, h=14, w=14),
    "conv_stride2_batch2": lambda: qlinear_conv(n=2, ci=16, co=24, h=9, w=7, stride=2),
    "conv1x1_no_bias": lambda: qlinear_conv(k=1, pad=0, ci=32, co=40, bias=False),
    "conv_weight_zero_point": lambda: qlinear_conv(w_zero=5, per_channel=False),
    "conv_u8_weights": lambda: qlinear_conv(wdt=np.uint8, w_zero=128, per_channel=False),
    "conv_u8_weights_zero_0": lambda: qlinear_conv(wdt=np.uint8, w_zero=0, per_channel=False),
    "matmul_const_b_s8": lambda: qlinear_matmul(),
    "matmul_const_b_u8": lambda: qlinear_matmul(a_shape=(30, 64), xdt=np.uint8),
    "matmul_two_activations": lambda: qlinear_matmul(a_shape=(20, 36), n=40, const_b=False),
    "matmul_integer": matmul_integer,
    "conv_integer": conv_integer,
}


# depthwise convolutions (groups = channels) take the depthwise template's integer form
DEPTHWISE = {
    "dw3x3_u8": lambda: qlinear_conv(ci=24, co=24, h=20, w=20, group=24),
    "dw3x3_s8_stride2": lambda: qlinear_conv(ci=16, co=16, h=21, w=19, stride=2, group=16,
                                             xdt=np.int8),
    "dw5x5_multiplier2_no_bias": lambda: qlinear_conv(ci=8, co=16, h=17, w=17, k=5, pad=2,
                                                      group=8, bias=False),
    "dw3x3_unpadded_weight_zero_point": lambda: qlinear_conv(
        ci=12, co=12, h=18, w=18, pad=0, group=12, w_zero=3, per_channel=False),
}


@pytest.mark.parametrize("case", sorted(DEPTHWISE))
def test_depthwise_integer_convolutions_match_onnxruntime(case: str, run_target) -> None:
    model, inputs = DEPTHWISE[case]()
    program = compile_model(load_graph(model), run_target)
    np.testing.assert_array_equal(run_program(program, inputs)[0], reference_outputs(model, inputs)[0])


def test_depthwise_integer_convolution_takes_the_depthwise_template() -> None:
    space = _conv_space("zen4", group=16)
    assert space.kind == "depthwise" and space.pat.integer
    # the row form and the padded plane (its copy padded with zeros after the zero point is
    # taken off), not the masked plane, which pads with the combiner's identity
    assert [(k.name, k.options) for k in space.knobs] == [("rows", (2, 1, 4)),
                                                         ("plane", ("rows", "padded"))]
    assert exact_in_float(space.pat)  # 8-bit values, 9 taps: sums exact in float32


# depthwise cases for the plane forms (padded at stride 1, split by stride phase at 2): 7x7
# and 56-wide planes (MobileNetV2's), and 17x17 windows, whose sums of 8-bit products can
# leave float32's exact integers (an int32 copy then)
PLANE_CASES = {
    **DEPTHWISE,
    "dw3x3_s2_56_to_28": lambda: qlinear_conv(ci=8, co=8, h=56, w=56, stride=2, group=8),
    "dw3x3_7x7_s8": lambda: qlinear_conv(ci=40, co=40, h=7, w=7, group=40, xdt=np.int8),
    "dw3x3_56_wide": lambda: qlinear_conv(ci=8, co=8, h=10, w=56, group=8),
    "dw17x17": lambda: qlinear_conv(ci=4, co=4, h=20, w=20, k=17, pad=0, group=4),
}


@pytest.mark.parametrize("form", ["rows", "copy"])
@pytest.mark.parametrize("case", sorted(PLANE_CASES))
def test_depthwise_integer_plane_forms_match_onnxruntime(case, form, run_target,
                                                         monkeypatch) -> None:
    """Each form, forced (copy: the padded or split plane, whichever the case has), against
    onnxruntime bit for bit (the copies' float32 sums are exact integers, so the requantized
    outputs equal the int32 path's)."""
    chosen = DepthwiseSpace.default_config
    offered: list[tuple] = []

    def forced(self):
        config = chosen(self)
        (forms,) = [k.options for k in self.knobs if k.name == "plane"]
        offered.append(forms)
        return {**config, "plane": "rows" if form == "rows" else forms[1]}

    monkeypatch.setattr(DepthwiseSpace, "default_config", forced)
    model, inputs = PLANE_CASES[case]()
    program = compile_model(load_graph(model), run_target)
    assert offered and offered[0] in (("rows", "padded"), ("rows", "split"))
    np.testing.assert_array_equal(run_program(program, inputs)[0],
                                  reference_outputs(model, inputs)[0])


def test_wide_windows_of_8_bit_values_keep_int32_sums() -> None:
    """289 taps of products up to 255 x 255 can pass 2^24: the padded copy stays int32."""
    space = _conv_space("zen4", group=16, ksize=17, side=20, pad=0)
    assert space.kind == "depthwise" and space.pat.integer
    assert not exact_in_float(space.pat)


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_onnxruntime_bit_for_bit(case: str, run_target) -> None:
    model, inputs = CASES[case]()
    program = compile_model(load_graph(model), run_target)
    assert "@aotc_qgemm_" in program.kernel_ll, "the template did not take the product"
    got = run_program(program, inputs)[0]
    want = reference_outputs(model, inputs)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def _conv_space(target_name: str, wdt: str = "int8", group: int = 1, ksize: int = 3,
                side: int = 12, pad: int = 1, ci: int = 16, co: int | None = None,
                cores: int | None = None):
    x = te.placeholder((1, ci, side, side), "uint8", "x")
    names = ["xs", "xz", "w", "ws", "wz", "ys", "yz"]
    co = co or (32 if group == 1 else 16)
    shapes = {"xs": (), "xz": (), "w": (co, ci // group, ksize, ksize), "ws": (co,), "wz": (co,),
              "ys": (), "yz": ()}
    dtypes = {"xs": "float32", "xz": "uint8", "w": wdt, "ws": "float32", "wz": wdt,
              "ys": "float32", "yz": "uint8"}
    values = {"xs": np.float32(0.1), "xz": np.uint8(3),
              "w": np.full(shapes["w"], 200 if wdt == "uint8" else 1, dtype=wdt),
              "ws": np.ones(co, np.float32), "wz": np.zeros(co, dtype=wdt), "ys": np.float32(1),
              "yz": np.uint8(0)}
    inputs = [x] + [te.placeholder(shapes[k], dtypes[k], k) for k in names]
    consts = [None] + [values[k] for k in names]
    out = side + 2 * pad - ksize + 1
    ctx = OpContext(node="n", op_type="QLinearConv", attrs={"pads": [pad] * 4, "group": group},
                    inputs=inputs, consts=consts, out_shapes=[(1, co, out, out)],
                    out_dtypes=["uint8"])
    outputs = OPS["QLinearConv"](ctx)
    target = NAMED_TARGETS[target_name]
    if cores is not None:
        target = target.with_machine(target.machine.with_cores(cores))
    return space_for(inputs, outputs, consts, target)


@pytest.mark.parametrize("target,instruction,intrinsic", [
    ("zen4", "vnni512", "llvm.x86.avx512.vpdpbusd.512"),
    ("cpu-avx512", "pmaddwd512", "llvm.x86.avx512.pmaddw.d.512"),
    ("cpu-avx2", "pmaddwd256", "llvm.x86.avx2.pmadd.wd"),
    ("zen3", "pmaddwd256", "llvm.x86.avx2.pmadd.wd"),
    ("neoverse-n1", "sdot", "llvm.aarch64.neon.sdot"),
    ("aarch64", "smull", "sext <8 x i16>"),
])
def test_each_target_gets_its_integer_dot_instruction(target: str, instruction: str,
                                                      intrinsic: str) -> None:
    space = _conv_space(target)
    assert space.kind == "int_gemm" and space.dot.name == instruction
    kernel = space.build(space.default_config()).kernel
    mb = ModuleBuilder(NAMED_TARGETS[target])
    mb.add_kernel(kernel)
    assert intrinsic in mb.text()


def test_a_column_panel_that_outgrows_l1_costs_its_l2_stream() -> None:
    # ResNet-50's 64 -> 64 3x3 at 56x56 (K = 576): the 2x4 block's column panel (288 words x
    # 32 columns, 36 KiB) outgrows Zen 3's 32 KiB L1, 4x3's (27 KiB) does not; measured on
    # Zen 3 (benchmarks/RESULTS.md) 2x4 ran 1.14x 4x3's time
    space = _conv_space("zen3", ci=64, co=64, side=56, cores=1)
    assert space.kind == "int_gemm"
    l1 = space.target.machine.l1
    panel = {b.name: space.kg * b.nr * 4 for b in space.blocks}
    assert panel["2x4"] > l1 >= panel["4x3"]
    cost = {b: space.cost({"block": b, "split": 1}) for b in ("2x4", "4x3")}
    assert cost["2x4"] > cost["4x3"]
    assert space.default_config()["block"] != "2x4"


def test_the_integer_block_is_the_cost_models_pick_per_layer() -> None:
    # the blocks' modelled times differ by a few per cent, less than the margin by which the
    # model leaves a default, so the default itself is the model's best: a 7x7 layer (49
    # columns) takes the one-vector block that wastes least of its last panel, a 14x14 layer
    # (196 columns) a two-vector one
    small = _conv_space("zen3", ci=512, co=512, ksize=1, side=7, pad=0, cores=1)
    wide = _conv_space("zen3", ci=256, co=256, ksize=1, side=14, pad=0, cores=1)
    for space in (small, wide):
        best = min((space.cost(c) + space.threaded_cost(c), c["block"]) for c in (
            {"block": b.name, "split": s} for b in space.blocks for s in (1,)))
        assert space.default_config() == {"block": best[1], "split": 1}
    assert small.default_config()["block"] == "12x1"
    assert wide.default_config()["block"] != "12x1"


def test_unsigned_weights_that_do_not_fit_s8_take_the_s16_instruction() -> None:
    # weights 0..255 with zero point 0 do not fit vpdpbusd's signed operand
    assert _conv_space("zen4", "uint8").dot.name == "pmaddwd512"


@pytest.mark.cross
@pytest.mark.parametrize("target", ["aarch64", "neoverse-n1"])
def test_aarch64_integer_kernels_under_qemu(tmp_path: Path, target: str) -> None:
    if not (shutil.which("aarch64-linux-gnu-gcc") and shutil.which("qemu-aarch64")):
        pytest.skip("aarch64-linux-gnu-gcc / qemu-aarch64 not installed")
    for case in ("conv3x3_s8_per_tensor", "matmul_const_b_u8"):
        model, inputs = CASES[case]()
        path = tmp_path / f"{case}.onnx"
        onnx.save(model, path)
        d = tmp_path / f"{case}_{target}"
        result = optimize_model(path, d, input_shapes=[], target=target)
        assert re.search(r"define internal void @aotc_qgemm_", result.program.kernel_ll)
        build_bundle(d, cc="aarch64-linux-gnu-gcc")
        got = run_model_process(d, inputs, runner=["qemu-aarch64", "-L",
                                                   "/usr/aarch64-linux-gnu"])[0]
        np.testing.assert_array_equal(got, reference_outputs(model, inputs)[0])
