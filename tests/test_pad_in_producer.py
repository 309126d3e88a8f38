"""A convolution's zero padding written by its producer (pass `pad_in_producer` + the GEMM
template's padded outputs): where the pass applies, that the rewritten model is valid ONNX with
onnxruntime's outputs, that every schedule of a padded-output kernel writes the border's zeros
and the values inside, and that the consumer then reads its input in place."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).parent))
from program_runner import ort_outputs  # noqa: E402
from test_fusion import check_rewritten  # noqa: E402
from test_templates_gemm import general_conv, general_conv_ref, run_all  # noqa: E402

from aotc.compiler import _kernel_spaces  # noqa: E402
from aotc.frontend import CANONICAL_OPSET, load_model  # noqa: E402
from aotc.fused import function_of  # noqa: E402
from aotc.passes import run_passes  # noqa: E402
from aotc.passes.fused_function import DOMAIN  # noqa: E402
from lowering import te  # noqa: E402
from lowering.templates.gemm import GemmTemplate, PixelTiling  # noqa: E402
from targets.cpu.target import host_target  # noqa: E402

F = TensorProto.FLOAT
RNG = np.random.default_rng(5)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def bottleneck(c: int = 16, hw: int = 16, stride: int = 1, *, producer_tail=("Relu",),
               consumer_group: int = 1, pads=(1, 1, 1, 1), second_reader: bool = False,
               auto_pad: str | None = None) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """x -> 1x1 Conv (+ tail) -> t -> 3x3 Conv(pads) -> Relu -> y."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[1, 1])]
    prev = "c1"
    for i, op in enumerate(producer_tail):
        ins = [prev] + (["res"] if op == "Add" else ["lo", "hi"] if op == "Clip" else [])
        nodes.append(helper.make_node(op, ins, [f"t{i}"]))
        prev = f"t{i}"
    attrs = {"auto_pad": auto_pad} if auto_pad else {"pads": list(pads)}
    nodes += [helper.make_node("Conv", [prev, "w2", "b2"], ["c2"], kernel_shape=[3, 3],
                               strides=[stride, stride], group=consumer_group, **attrs),
              helper.make_node("Relu", ["c2"], ["y"])]
    out = -(-hw // stride) if auto_pad else (hw + pads[0] + pads[2] - 3) // stride + 1
    outputs = [helper.make_tensor_value_info("y", F, [1, c, out, out])]
    if second_reader:
        nodes.append(helper.make_node("Sigmoid", [prev], ["s"]))
        outputs.append(helper.make_tensor_value_info("s", F, [1, c, hw, hw]))
    inits = [numpy_helper.from_array(rand(c, c, 1, 1) * 0.2, "w1"),
             numpy_helper.from_array(rand(c), "b1"),
             numpy_helper.from_array(rand(c, c // consumer_group, 3, 3) * 0.1, "w2"),
             numpy_helper.from_array(rand(c), "b2"),
             numpy_helper.from_array(np.float32(0.0), "lo"),
             numpy_helper.from_array(np.float32(6.0), "hi")]
    inputs = [helper.make_tensor_value_info("x", F, [1, c, hw, hw])]
    feeds = {"x": rand(1, c, hw, hw)}
    if "Add" in producer_tail:
        inputs.append(helper.make_tensor_value_info("res", F, [1, c, hw, hw]))
        feeds["res"] = rand(1, c, hw, hw)
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", CANONICAL_OPSET)])
    proto.ir_version = 10
    return proto, feeds


def rewritten(proto: onnx.ModelProto, tmp_path: Path, disabled=()) -> ir.Model:
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    return run_passes(load_model(path), disabled=disabled)


def function_ops(model: ir.Model) -> list[list[str]]:
    return [[n.op_type for n in function_of(model.functions, node)]  # type: ignore[union-attr]
            for node in model.graph if node.domain == DOMAIN]


def consumer_pads(model: ir.Model) -> list[int]:
    """The pads of the model's second Conv (in graph order, looking into fused bodies)."""
    convs = []
    for node in model.graph:
        fn = function_of(model.functions, node)
        convs += [n for n in (fn if fn is not None else [node]) if n.op_type == "Conv"]
    return list(convs[1].attributes.get_ints("pads", [0, 0, 0, 0]))


def check_against_ort(model: ir.Model, proto: onnx.ModelProto, feeds) -> None:
    """The rewritten model gives the original's outputs (see test_fusion.check_rewritten)."""
    inputs = [feeds[i.name] for i in proto.graph.input]
    check_rewritten(model, inputs, ort_outputs(proto, inputs))


@pytest.mark.parametrize("stride,tail", [(1, ("Relu",)), (2, ("Relu",)), (1, ()),
                                         (1, ("Clip",)), (2, ("Relu", "Clip"))])
def test_producer_writes_the_padding_its_consumer_read_through_a_copy(tmp_path, stride, tail):
    proto, feeds = bottleneck(stride=stride, producer_tail=tail)
    model = rewritten(proto, tmp_path)
    assert function_ops(model)[0] == ["Conv", *tail, "Pad"]
    assert consumer_pads(model) == [0, 0, 0, 0]
    check_against_ort(model, proto, feeds)
    # the consumer's kernel reads the padded tensor in place: no copy stage before its product
    consumer = _kernel_spaces(model, host_target(), None)[1]
    assert consumer.kind == "gemm" and not consumer.pat.pre
    producer = _kernel_spaces(model, host_target(), None)[0]
    assert producer.kind == "gemm" and producer.pat.out_begin == (0, 0, 1, 1)


@pytest.mark.parametrize("case", ["residual", "depthwise", "narrow", "read_twice", "same_pads",
                                  "no_pads"])
def test_padding_stays_with_the_consumer_where_the_producer_cannot_write_it(tmp_path, case):
    kwargs = {"residual": {"producer_tail": ("Add", "Relu")},
              "depthwise": {"consumer_group": 16},
              "narrow": {"hw": 8},
              "read_twice": {"second_reader": True},
              "same_pads": {"auto_pad": "SAME_UPPER"},
              "no_pads": {"pads": (0, 0, 0, 0)}}[case]
    proto, feeds = bottleneck(**kwargs)
    model = rewritten(proto, tmp_path)
    assert not any("Pad" in ops for ops in function_ops(model))
    assert "Pad" not in [n.op_type for n in model.graph]
    check_against_ort(model, proto, feeds)


def test_disabling_the_pass_keeps_the_consumers_padding(tmp_path):
    proto, _ = bottleneck()
    model = rewritten(proto, tmp_path, disabled=["pad_in_producer"])
    assert function_ops(model)[0] == ["Conv", "Relu"]
    assert consumer_pads(model) == [1, 1, 1, 1]


def padded_relu(conv: te.Tensor, top: int, left: int, bottom: int, right: int,
                fill: float = 0.0) -> te.Tensor:
    """relu(conv) zero-padded, as the frontend composes Conv -> Relu -> Pad."""
    n, k, h, w = conv.shape

    def body(b, c, y, x):
        inside = te.all_of([te.ge(y - top, 0), te.lt(y - top, h),
                            te.ge(x - left, 0), te.lt(x - left, w)])
        v = conv[b, c, y - top, x - left]
        return te.select(inside, te.select(te.lt(v, 0.0), 0.0, v), fill)

    return te.compute((n, k, h + top + bottom, w + left + right), body, "padded")


@pytest.mark.parametrize("n,c,h,w,k,kh,pads", [
    (1, 16, 20, 20, 32, 1, (0, 0, 0, 0)),   # rows longer than every tile: stored in place
    (2, 8, 9, 11, 24, 3, (1, 1, 1, 1)),     # batch 2, a 3x3 producer, short rows
    (1, 24, 7, 7, 40, 1, (0, 0, 0, 0)),     # 7x7: tiles span rows, copied in after
])
def test_every_schedule_of_a_padded_output_writes_its_border_and_inside(n, c, h, w, k, kh,
                                                                       pads):
    ins, conv, wv = general_conv(n, c, h, w, k, kh, kh, pads)
    out = padded_relu(conv, 1, 2, 3, 1)
    space = GemmTemplate.match(ins, [out], [None, wv, None], host_target())
    assert space is not None and space.pat.out_begin == (0, 0, 1, 2)
    base = space.default_config()
    options = {kn.name: kn.options for kn in space.knobs}
    configs = [{**base, name: o} for name, opts in options.items() for o in opts]
    configs += [{**base, "b": "pixels", "block": b} for b in options["block"]]
    configs = [cfg for i, cfg in enumerate(configs) if cfg not in configs[:i]]
    xv, bv = rand(n, c, h, w), rand(k)
    ref = np.maximum(general_conv_ref(xv, wv, bv, pads, 1, 1, 1), 0)
    ref = np.pad(ref, ((0, 0), (0, 0), (1, 3), (2, 1)))
    # outputs start as NaN (run_all): a border element no stage writes fails
    for cfg, got in zip(configs, run_all(space, configs, [xv, wv, bv]), strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3, err_msg=str(cfg))
    stored = [space.stores_padded(cfg) for cfg in configs]
    tiles_in_rows = [PixelTiling.of(space.pixels, space.block(cfg).mr).g == 1
                     for cfg in configs]
    assert stored == [cfg["b"] == "pixels" and t for cfg, t in zip(configs, tiles_in_rows,
                                                                    strict=True)]


def test_only_a_zero_padding_of_the_pixels_is_a_padded_output():
    ins, conv, wv = general_conv(1, 16, 20, 20, 32, 1, 1)
    # padded with ones: not a padded epilogue (the template does not take it)
    assert GemmTemplate.match(ins, [padded_relu(conv, 1, 1, 1, 1, fill=1.0)],
                              [None, wv, None], host_target()) is None
    # padding the channels: neither
    chans = te.compute((1, 34, 20, 20), lambda b, c, y, x: te.select(
        te.all_of([te.ge(c - 1, 0), te.lt(c - 1, 32)]), conv[b, c - 1, y, x], 0.0))
    assert GemmTemplate.match(ins, [chans], [None, wv, None], host_target()) is None


def test_cost_model_keeps_padded_producers_in_pixel_mode(fitted_target):
    """A 1x1 producer at 56x56 (ResNet-50's first bottleneck): pixel mode stores into the
    padded output; reading in place then copying the result in measured 1.2x slower on the
    fitted machine; the `zen1` row ranks the two the other way, so this takes the fitted target."""
    ins, conv, wv = general_conv(1, 64, 56, 56, 64, 1, 1)
    space = GemmTemplate.match(ins, [padded_relu(conv, 1, 1, 1, 1)], [None, wv, None],
                               fitted_target)
    cfg = space.default_config()
    assert cfg["b"] == "pixels" and space.stores_padded(cfg)


@pytest.mark.parametrize("residual", [False, True])
def test_an_exporters_explicit_pad_after_a_convolution_joins_its_region(tmp_path, residual):
    """Keras-style exports write the padding as its own Pad before a VALID Conv: fuse_epilogue
    takes it into the producing Conv's region all the same (no pass needed), unless the
    region's epilogue is more than clamps (a residual Add): the Pad then stays a node."""
    c, hw = 16, 16
    tail = ["c1"] + (["a1"] if residual else [])
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], kernel_shape=[1, 1])]
    if residual:
        nodes.append(helper.make_node("Add", ["c1", "x"], ["a1"]))
    nodes += [helper.make_node("Relu", [tail[-1]], ["r1"]),
              helper.make_node("Pad", ["r1", "pads"], ["p1"], mode="constant"),
              helper.make_node("Conv", ["p1", "w2"], ["y"], kernel_shape=[3, 3])]
    inits = [numpy_helper.from_array(rand(c, c, 1, 1), "w1"),
             numpy_helper.from_array(rand(c, c, 3, 3) * 0.1, "w2"),
             numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, c, hw, hw])],
                              [helper.make_tensor_value_info("y", F, [1, c, hw, hw])], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", CANONICAL_OPSET)])
    proto.ir_version = 10
    feeds = {"x": rand(1, c, hw, hw)}
    model = rewritten(proto, tmp_path, disabled=["pad_in_producer"])
    want = ["Conv", "Add", "Relu"] if residual else ["Conv", "Relu", "Pad"]
    assert function_ops(model)[0] == want
    assert ("Pad" in [n.op_type for n in model.graph]) == residual
    check_against_ort(model, proto, feeds)
    if not residual:
        assert _kernel_spaces(model, host_target(), None)[0].pat.out_begin == (0, 0, 1, 1)


def test_the_padded_value_gets_a_name_no_other_value_has(tmp_path):
    proto, feeds = bottleneck()
    proto.graph.node[-1].output[0] = "t0_padded"  # the name the pass would pick first
    proto.graph.output[0].name = "t0_padded"
    model = rewritten(proto, tmp_path)
    names = [o.name for n in model.graph for o in n.outputs]
    assert len(names) == len(set(names))
    assert function_ops(model)[0] == ["Conv", "Relu", "Pad"]
    check_against_ort(model, proto, feeds)
