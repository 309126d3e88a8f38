"""Fusion passes (fuse_epilogue, fuse_elementwise): which nodes become one `ai.aotc` node, what
its function body holds, that the rewritten model is valid ONNX with onnxruntime's outputs, and
that aotc compiles a fused region into one element-wise loop nest (after a product stage)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).parent))
from model_zoo import SAMPLE_MODELS, random_inputs  # noqa: E402
from program_runner import assert_close, ort_outputs, run_program  # noqa: E402

from aotc.compiler import _Compiler, compile_model  # noqa: E402
from aotc.driver import compile_file, emit_onnx  # noqa: E402
from aotc.frontend import CANONICAL_OPSET, load_model  # noqa: E402
from aotc.fused import function_of  # noqa: E402
from aotc.passes import PIPELINE, run_passes  # noqa: E402
from aotc.passes.fuse_elementwise import fuse_elementwise  # noqa: E402
from aotc.passes.fuse_epilogue import fuse_epilogue  # noqa: E402
from aotc.passes.fused_function import DOMAIN  # noqa: E402
from aotc.passes.fusion_regions import ELEMENTWISE_OPS  # noqa: E402
from lowering import te  # noqa: E402
from lowering.lower import stages_of  # noqa: E402
from targets.cpu.target import host_target  # noqa: E402

F = TensorProto.FLOAT
ROOT = Path(__file__).resolve().parent.parent
RNG = np.random.default_rng(3)
FUSION_PASSES = ["fuse_epilogue", "fuse_elementwise"]
OTHER_PASSES = [name for name, _ in PIPELINE if name not in FUSION_PASSES]


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def vi(name: str, shape: list[int], elem: int = F) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def make_proto(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", CANONICAL_OPSET)])
    model.ir_version = 10
    return model


def frontend(proto: onnx.ModelProto, tmp_path: Path) -> ir.Model:
    """The model as the passes get it, with every non-fusion pass already run."""
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    return run_passes(load_model(path), disabled=FUSION_PASSES)


def to_proto(model: ir.Model) -> onnx.ModelProto:
    proto = ir.to_proto(model)
    proto.ir_version = min(proto.ir_version, 10)  # what this onnxruntime reads
    return proto


def fused_nodes(model: ir.Model) -> list[ir.Node]:
    return [n for n in model.graph if n.domain == DOMAIN]


def body_ops(model: ir.Model, node: ir.Node) -> list[str]:
    function = function_of(model.functions, node)
    assert function is not None and function.domain == DOMAIN
    return [n.op_type for n in function]


def ops(model: ir.Model) -> list[str]:
    return [n.op_type if n.domain == "" else f"{n.domain}::{n.op_type}" for n in model.graph]


def check_rewrite(model: ir.Model, feeds: dict[str, np.ndarray], *passes) -> ir.Model:
    """Run `passes`; the result passes the full ONNX check and gives onnxruntime's outputs
    both in onnxruntime and compiled by aotc."""
    names = [i.name for i in model.graph.inputs]
    inputs = [feeds[n] for n in names]
    before = ort_outputs(to_proto(model), inputs)
    for p in passes:
        model = p(model)
    check_rewritten(model, inputs, before)
    return model


def check_rewritten(model: ir.Model, inputs: list[np.ndarray], want: list[np.ndarray]) -> None:
    """A rewritten model passes the full ONNX check, keeps its output names and gives `want`
    both in onnxruntime and compiled by aotc."""
    proto = to_proto(model)
    onnx.checker.check_model(proto, full_check=True)
    assert [o.name for o in proto.graph.output] == [v.name for v in model.graph.outputs]
    for got, ref in zip(ort_outputs(proto, inputs), want, strict=True):
        assert_close(got, ref, 1e-5)
    for got, ref in zip(run_program(compile_model(model, host_target()), inputs), want,
                        strict=True):
        assert_close(got, ref)


def lowered_stages(model: ir.Model, node: ir.Node) -> list[te.Tensor]:
    """The stages (non-inline computes) aotc builds for `node`, producers first."""
    _ctx, results = _Compiler(model, host_target(), "t", None).lower_node(node)
    outs = [r for r in results if isinstance(r, te.Tensor)]
    return [t for t in stages_of(outs) if t.op is not None and not t.op.inline]


def buffers_read(t: te.Tensor) -> list[te.Tensor]:
    """The tensors `t` loads from memory: what it reads, looking through inline stages."""
    assert t.op is not None
    found = []
    for dep in te.tensors_read(t.op.body):
        found += buffers_read(dep) if dep.op is not None and dep.op.inline else [dep]
    return found


def loads(e: te.Expr) -> list[te.Load]:
    found = [e] if isinstance(e, te.Load) else []
    for c in te.children(e):
        found += loads(c)
    return found


def is_reduction(t: te.Tensor) -> bool:
    return t.op is not None and isinstance(t.op.body, te.Reduce)


# ---------------------------------------------------------------- the element-wise table

def test_elementwise_table_comes_from_the_operator_families():
    assert {"Relu", "Add", "Where", "Cast", "Clip", "Sigmoid", "HardSwish", "Sum"} <= ELEMENTWISE_OPS
    assert not {"Conv", "MatMul", "Softmax", "Reshape", "ReduceSum"} & ELEMENTWISE_OPS


# ---------------------------------------------------------------- fuse_elementwise

def test_elementwise_chain_becomes_one_node_and_one_loop_nest(tmp_path):
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]),
             helper.make_node("Mul", ["x", "s"], ["m"]),  # x * sigmoid(x): a diamond
             helper.make_node("Add", ["m", "b"], ["a"]),  # per-column bias (broadcast)
             helper.make_node("Clip", ["a", "lo", "hi"], ["c"]),
             helper.make_node("Cast", ["c"], ["y"], to=TensorProto.DOUBLE)]
    inits = [init("b", rand(16)), init("lo", np.float32(-0.5)), init("hi", np.float32(1.5))]
    model = frontend(make_proto(nodes, [vi("x", [4, 16])], [vi("y", [4, 16],
                                                                TensorProto.DOUBLE)], inits),
                     tmp_path)
    model = check_rewrite(model, {"x": rand(4, 16)}, fuse_elementwise)
    [node] = list(model.graph)
    assert node.domain == DOMAIN and model.opset_imports[DOMAIN] == 1
    assert body_ops(model, node) == ["Sigmoid", "Mul", "Add", "Clip", "Cast"]
    function = function_of(model.functions, node)
    assert function is not None and function.opset_imports[""] == CANONICAL_OPSET
    assert [v.name for v in node.inputs] == ["x", "b", "lo", "hi"]
    assert node.outputs[0].name == "y"
    [stage] = lowered_stages(model, node)  # every intermediate inlined
    assert stage.dtype == "float64" and not is_reduction(stage)


def test_elementwise_tree_with_where_is_one_region(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Exp", ["z"], ["e"]),
             helper.make_node("Add", ["r", "e"], ["s"]),
             helper.make_node("Greater", ["x", "half"], ["g"]),
             helper.make_node("Where", ["g", "s", "x"], ["y"])]
    model = frontend(make_proto(nodes, [vi("x", [3, 8]), vi("z", [8])], [vi("y", [3, 8])],
                                [init("half", np.float32(0.5))]), tmp_path)
    model = check_rewrite(model, {"x": rand(3, 8), "z": rand(8)}, fuse_elementwise)
    [node] = list(model.graph)
    assert sorted(body_ops(model, node)) == sorted(["Relu", "Exp", "Add", "Greater", "Where"])
    assert len(lowered_stages(model, node)) == 1


def test_big_intermediate_read_twice_stays_a_stage(tmp_path):
    nodes = [helper.make_node("Gelu", ["x"], ["g"], approximate="tanh"),
             helper.make_node("Mish", ["g"], ["m1"]),
             helper.make_node("Mish", ["m1"], ["m2"]),
             helper.make_node("Mul", ["m2", "m2"], ["y"])]
    model = frontend(make_proto(nodes, [vi("x", [4, 16])], [vi("y", [4, 16])]), tmp_path)
    model = check_rewrite(model, {"x": rand(4, 16)}, fuse_elementwise)
    [node] = list(model.graph)
    assert body_ops(model, node) == ["Gelu", "Mish", "Mish", "Mul"]
    kept, output = lowered_stages(model, node)  # m2 computed once, not once per read
    assert [t.name for t in buffers_read(output)] == [kept.name]
    assert {t.name for t in buffers_read(kept)} == {"in"}


def test_value_used_outside_stops_the_region(tmp_path):
    nodes = [helper.make_node("Abs", ["x"], ["a"]),
             helper.make_node("Sqrt", ["a"], ["q"]),
             helper.make_node("Softmax", ["a"], ["sm"]),  # not element-wise: `a` stays a value
             helper.make_node("Add", ["q", "sm"], ["y"]),
             helper.make_node("Neg", ["x"], ["n"]),  # `n` is a graph output: Neg ends a region
             helper.make_node("Exp", ["n"], ["e"]),
             helper.make_node("Tanh", ["e"], ["t"])]
    model = frontend(make_proto(nodes, [vi("x", [2, 5])],
                                [vi("y", [2, 5]), vi("n", [2, 5]), vi("t", [2, 5])]), tmp_path)
    model = check_rewrite(model, {"x": rand(2, 5)}, fuse_elementwise)
    assert ops(model) == ["Abs", "Softmax", f"{DOMAIN}::Fused_Sqrt_Add", "Neg",
                          f"{DOMAIN}::Fused_Exp_Tanh"]
    assert [v.name for v in model.graph.outputs] == ["y", "n", "t"]


def test_identical_regions_share_one_function(tmp_path):
    nodes = [helper.make_node("Relu", ["x1"], ["r1"]), helper.make_node("Neg", ["r1"], ["y1"]),
             helper.make_node("Relu", ["x2"], ["r2"]), helper.make_node("Neg", ["r2"], ["y2"]),
             helper.make_node("Relu", ["x3"], ["r3"]), helper.make_node("Neg", ["r3"], ["y3"])]
    model = frontend(make_proto(nodes, [vi("x1", [4]), vi("x2", [4]), vi("x3", [6])],
                                [vi("y1", [4]), vi("y2", [4]), vi("y3", [6])]), tmp_path)
    model = check_rewrite(model, {"x1": rand(4), "x2": rand(4), "x3": rand(6)},
                          fuse_elementwise)
    # one body per distinct (ops, wiring, input shapes): the [6] region gets its own
    assert ops(model) == [f"{DOMAIN}::Fused_Relu_Neg"] * 2 + [f"{DOMAIN}::Fused_Relu_Neg_2"]
    assert len(model.functions) == 2


# ---------------------------------------------------------------- fuse_epilogue

def _conv_block(tmp_path):
    """Conv → bias Add → residual Add → Relu → Clip, then an element-wise tail after a pool."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "b"], ["cb"]),
             helper.make_node("Add", ["cb", "res"], ["cr"]),
             helper.make_node("Relu", ["cr"], ["r"]),
             helper.make_node("Clip", ["r", "lo", "hi"], ["y"]),
             helper.make_node("GlobalAveragePool", ["y"], ["p"]),
             helper.make_node("Mul", ["p", "p"], ["pp"]),
             helper.make_node("Sqrt", ["pp"], ["z"])]
    inits = [init("w", rand(8, 4, 3, 3)), init("b", rand(1, 8, 1, 1)),
             init("lo", np.float32(0.0)), init("hi", np.float32(6.0))]
    proto = make_proto(nodes, [vi("x", [1, 4, 6, 6]), vi("res", [1, 8, 6, 6])],
                       [vi("y", [1, 8, 6, 6]), vi("z", [1, 8, 1, 1])], inits)
    feeds = {"x": rand(1, 4, 6, 6), "res": rand(1, 8, 6, 6)}
    return frontend(proto, tmp_path), feeds


def test_conv_epilogue_is_one_node_with_product_then_one_output_stage(tmp_path):
    model, feeds = _conv_block(tmp_path)
    model = check_rewrite(model, feeds, fuse_epilogue)
    assert ops(model) == [f"{DOMAIN}::Fused_Conv_Add_Add_Relu_Clip", "GlobalAveragePool",
                          "Mul", "Sqrt"]
    node = fused_nodes(model)[0]
    assert [v.name for v in node.inputs] == ["x", "w", "b", "res", "lo", "hi"]
    *_padding, product, output = lowered_stages(model, node)  # Conv may copy a padded input
    assert is_reduction(product) and not is_reduction(output)
    assert output.shape == (1, 8, 6, 6)
    # the chain reads the product stage and the call's inputs, no other materialised tensor,
    # and it reads the product at its own element with its own index variables (batch 1 too)
    assert {t.name for t in buffers_read(output)} == {product.name, "in"}
    axes = [ax.var for ax in output.op.axes]  # type: ignore[union-attr]
    reads = [ld for ld in loads(output.op.body) if ld.tensor is product]  # type: ignore[union-attr]
    assert reads and all(list(ld.indices) == axes for ld in reads)


@pytest.mark.parametrize("passes", [["fuse_epilogue"], ["fuse_elementwise"], FUSION_PASSES])
def test_each_pass_alone_and_together(tmp_path, passes):
    model, feeds = _conv_block(tmp_path)
    fns = [fn for name, fn in PIPELINE if name in passes]
    model = check_rewrite(model, feeds, *fns)
    calls = {tuple(body_ops(model, n)) for n in fused_nodes(model)}
    epilogue = ("Conv", "Add", "Add", "Relu", "Clip")
    if passes == ["fuse_epilogue"]:
        assert calls == {epilogue}
    elif passes == ["fuse_elementwise"]:
        # without the epilogue pass the chain after the Conv is a plain element-wise region
        assert calls == {("Add", "Add", "Relu", "Clip"), ("Mul", "Sqrt")}
        assert "Conv" in ops(model)
    else:
        assert calls == {epilogue, ("Mul", "Sqrt")}


def test_gemm_and_matmul_epilogues_with_diamonds(tmp_path):
    nodes = [helper.make_node("Gemm", ["x", "w1", "c1"], ["g"], alpha=0.5, transB=1),
             helper.make_node("Sigmoid", ["g"], ["gs"]),
             helper.make_node("MatMul", ["gs", "w2"], ["m"]),
             helper.make_node("Add", ["m", "b2"], ["mb"]),
             helper.make_node("Sigmoid", ["mb"], ["sg"]),
             helper.make_node("Mul", ["mb", "sg"], ["y"])]  # SiLU: mb read twice
    inits = [init("w1", rand(12, 10)), init("c1", rand(12)), init("w2", rand(12, 7)),
             init("b2", rand(7))]
    model = frontend(make_proto(nodes, [vi("x", [5, 10])], [vi("y", [5, 7])], inits), tmp_path)
    model = check_rewrite(model, {"x": rand(5, 10)}, fuse_epilogue)
    assert [body_ops(model, n) for n in model.graph] == [
        ["Gemm", "Sigmoid"], ["MatMul", "Add", "Sigmoid", "Mul"]]
    for node in model.graph:
        product, output = lowered_stages(model, node)  # Gemm's own alpha/C stage inlined
        assert is_reduction(product) and not is_reduction(output)


def test_epilogue_needs_the_products_shape_and_its_only_use(tmp_path):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Add", ["m", "big"], ["y"]),  # broadcasts [1,6] up to [4,6]
             helper.make_node("MatMul", ["x", "w"], ["m2"]),  # m2 is also a graph output
             helper.make_node("Relu", ["m2"], ["y2"])]
    model = frontend(make_proto(nodes, [vi("x", [1, 3]), vi("big", [4, 6])],
                                [vi("y", [4, 6]), vi("m2", [1, 6]), vi("y2", [1, 6])],
                                [init("w", rand(3, 6))]), tmp_path)
    model = check_rewrite(model, {"x": rand(1, 3), "big": rand(4, 6)}, fuse_epilogue)
    assert not fused_nodes(model)


# ---------------------------------------------------------------- pipeline and switches

def _residual_chain(tmp_path, later_use: bool, from_input: bool):
    """x -> Conv -> a -> Conv -> b; Conv(b) + residual -> Relu -> c -> Conv -> y, where the
    residual is `a` (an arena value; with `later_use`, `a` also feeds a second output) or,
    with `from_input`, the second convolution's own input (an operand of its product)."""
    res = "b" if from_input else "a"
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),
             helper.make_node("Conv", ["a", "w2"], ["b"]),
             helper.make_node("Conv", ["b", "w3", "b3"], ["p"]),
             helper.make_node("Add", ["p", res], ["s"]),
             helper.make_node("Relu", ["s"], ["c"], name="relu"),
             helper.make_node("Conv", ["c", "w4"], ["y"])]
    outs = [vi("y", [1, 16, 12, 12])]
    if later_use:
        nodes.append(helper.make_node("Mul", ["a", "a"], ["z"]))
        outs.append(vi("z", [1, 16, 12, 12]))
    inits = [init("w1", rand(16, 8, 1, 1)), init("w2", rand(16, 16, 1, 1)),
             init("w3", rand(16, 16, 1, 1)), init("b3", rand(16)), init("w4", rand(16, 16, 1, 1))]
    proto = make_proto(nodes, [vi("x", [1, 8, 12, 12])], outs, inits)
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    return path, proto


@pytest.mark.parametrize("later_use, from_input, shared", [
    (False, False, True), (True, False, False), (False, True, False)])
def test_residual_epilogue_writes_over_its_dying_residual(tmp_path, later_use, from_input,
                                                          shared):
    """A convolution whose fused epilogue adds a residual that nothing reads afterwards
    stores its output over the residual (same arena offset: its lines are read, then
    written, no separate read-for-ownership); not when the residual is still needed later or
    is the product's own operand. Outputs equal onnxruntime's either way."""
    path, proto = _residual_chain(tmp_path, later_use, from_input)
    program, _ = compile_file(path, input_shapes=[])
    step = next(s for s in program.steps if "relu" in s.node)
    arena = [r.offset for r in step.args if r.storage == "arena"]
    assert (len(arena) != len(set(arena))) == shared, step
    feeds = [rand(1, 8, 12, 12)]
    for got, want in zip(run_program(program, feeds), ort_outputs(proto, feeds), strict=True):
        assert_close(got, want)


def test_disabling_the_passes_by_name_leaves_the_graph_unfused(tmp_path):
    model, _ = _conv_block(tmp_path)
    assert not fused_nodes(run_passes(model, disabled=FUSION_PASSES))
    model, _ = _conv_block(tmp_path)
    lines: list[str] = []
    model = run_passes(model, disabled=["fuse_epilogue"], log=lines.append)
    assert "fuse_epilogue: disabled" in lines
    assert "Conv" in ops(model) and len(fused_nodes(model)) == 2


def test_fusion_runs_epilogue_first_in_the_pipeline():
    names = [name for name, _ in PIPELINE]
    assert names.index("fuse_epilogue") < names.index("fuse_elementwise") == len(names) - 1


def _sample_inputs(path: Path) -> tuple[onnx.ModelProto, list[np.ndarray]]:
    proto = onnx.load(str(path))
    arrays = random_inputs(path, None, seed=1)
    inits = {i.name for i in proto.graph.initializer}
    return proto, [arrays[i.name] for i in proto.graph.input if i.name not in inits]


@pytest.mark.parametrize("name", sorted(SAMPLE_MODELS))
def test_sample_models_fused_keep_onnxruntime_outputs(name):
    path = SAMPLE_MODELS[name]
    proto, inputs = _sample_inputs(path)
    want = ort_outputs(proto, inputs)
    model = run_passes(load_model(path))
    calls = fused_nodes(model)
    assert calls and all(function_of(model.functions, n) is not None for n in calls)
    check_rewritten(model, inputs, want)
    # a fused region is its product's stages (if any) plus one element-wise output stage
    for node in calls:
        stages = lowered_stages(model, node)
        ops_in_body = body_ops(model, node)
        assert not is_reduction(stages[-1])
        if ops_in_body[0] in ("Conv", "Gemm", "MatMul"):
            assert is_reduction(stages[-2])
        else:
            assert len(stages) == 1


# ---------------------------------------------------------------- aotc optimize --emit onnx

def aotc(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aotc", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT)


def test_emit_onnx_cli_writes_a_checked_model_onnxruntime_runs(tmp_path):
    path = SAMPLE_MODELS["mobilenet_tiny"]
    out = tmp_path / "rewritten"
    proc = aotc("optimize", path, "-o", out, "--emit", "onnx")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    written = out / "model.onnx"
    assert "fused" in proc.stdout
    assert sorted(p.name for p in out.iterdir()) == ["aotc_bundle.json", "model.onnx"]
    model = onnx.load(str(written))
    onnx.checker.check_model(model, full_check=True)
    assert any(n.domain == DOMAIN for n in model.graph.node)
    assert {f.domain for f in model.functions} == {DOMAIN}
    proto, inputs = _sample_inputs(path)
    for got, want in zip(ort_outputs(model, inputs), ort_outputs(proto, inputs), strict=True):
        assert_close(got, want, 1e-5)
    # aotc reads its own output back (the frontend inlines the functions, the passes refuse)
    program, _ = compile_file(written, input_shapes=[])
    for got, want in zip(run_program(program, inputs), ort_outputs(proto, inputs), strict=True):
        assert_close(got, want)
    proc = aotc("inspect", written)
    assert proc.returncode == 0 and "ready to compile" in proc.stdout


def test_emit_onnx_with_fusion_disabled_and_other_emits(tmp_path):
    result = emit_onnx(SAMPLE_MODELS["resnet_tiny"], tmp_path / "o", input_shapes=[],
                       name="plain", disabled_passes=FUSION_PASSES)
    assert result.path == tmp_path / "o" / "plain.onnx" and result.fused_nodes == 0
    model = onnx.load(str(result.path))
    assert not model.functions and all(n.domain == "" for n in model.graph.node)
    proc = aotc("optimize", SAMPLE_MODELS["mlp"], "-o", tmp_path / "b", "--emit", "tflite")
    assert proc.returncode == 2 and "'tflite'" in proc.stderr and "'ort'" in proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    proc = aotc("optimize", SAMPLE_MODELS["mlp"], "-o", tmp_path / "c", "--emit", "onnx",
                "--disable-pass", "fuse_everything")
    assert proc.returncode == 2 and "fuse_everything" in proc.stderr
