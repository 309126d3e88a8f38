"""`aotc optimize --emit ort --measure-islands`: each island is timed on this machine with the
library and without it, and the islands slower with it are left to onnxruntime.

Which island is faster depends on the machine, so the tests that check the choice replace the
measured times after the real measurement has run (it also checks each island's outputs
against onnxruntime's); what is then left to onnxruntime, what the library holds and what the
model computes are checked for real.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
from collections.abc import Callable

import numpy as np
import onnx
import onnx_ir
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from model_zoo import SAMPLE_MODELS, random_inputs  # noqa: E402
from test_ort_library import _ops_run, _session, lstm_in_the_middle  # noqa: E402

from aotc.driver import emit_ort  # noqa: E402
from aotc.errors import AotcError  # noqa: E402
from aotc.ortlib import measure  # noqa: E402
from aotc.ortlib.refine import kept_label  # noqa: E402


def _slow_where(monkeypatch: pytest.MonkeyPatch,
                slow: Callable[[onnx_ir.Node], bool]) -> list[list[measure.IslandTiming]]:
    """Makes an island with a node for which `slow` holds measure twice onnxruntime's time and
    the others half of it; returns the real timings, a list per round of measurement."""
    real = measure.time_islands
    seen: list[list[measure.IslandTiming]] = []

    def fake(folder, library, rewritten, islands, name, threads, **kwargs):
        timings = real(folder, library, rewritten, islands, name, threads, **kwargs)
        seen.append(timings)
        return [t._replace(library_s=2 * t.onnxruntime_s + 1e-3)
                if any(slow(n) for n in isl.nodes) else t._replace(library_s=t.onnxruntime_s / 2)
                for isl, t in zip(islands, timings, strict=True)]

    def whole(*args, **kwargs):  # the model with what stays compiled: pays
        t = real_model(*args, **kwargs)
        return t._replace(library_s=t.onnxruntime_s / 2)

    real_model = measure.time_model
    monkeypatch.setattr(measure, "time_islands", fake)
    monkeypatch.setattr(measure, "time_model", whole)
    return seen


def _check_outputs(original: pathlib.Path, result) -> None:
    onnx.checker.check_model(str(result.model_path))
    feed = random_inputs(original, None, seed=1)
    want = _session(original, None).run(None, feed)
    for lib in (result.library_path, None):
        for w, g in zip(want, _session(result.model_path, lib).run(None, feed), strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_a_slow_island_is_halved_and_its_slow_node_left_to_onnxruntime(tmp_path, monkeypatch):
    original = lstm_in_the_middle(tmp_path / "m.onnx", "contrib")  # two islands around it
    seen = _slow_where(monkeypatch, lambda n: n.name == "tr")  # in the first, after a MatMul
    result = emit_ort(original, tmp_path / "out", input_shapes=[], name="m",
                      measure_islands=True)
    # round 1: both islands; round 2: the first one's halves (the MatMul, the Transpose)
    assert [[t.op for t in ts] for ts in seen] == [["m_island0", "m_island1"],
                                                   ["m_island2", "m_island3"]]
    assert all(t.library_s > 0 and t.onnxruntime_s > 0 for ts in seen for t in ts)
    assert [(t.op, t.pays, t.split) for t in result.timings] == [
        ("m_island0", False, True), ("m_island1", True, False), ("m_island2", True, False),
        ("m_island3", False, False), (measure.WHOLE_MODEL, True, False)]
    # the Transpose runs on onnxruntime now, with the reason; the rest is compiled
    assert sorted(op for op, _ in result.islands) == ["m_island1", "m_island2"]
    assert [kept_label(t, [op for op, _ in result.islands]) for t in result.timings] == [
        "no: split", "yes", "yes", "no: left to onnxruntime", "yes"]
    left = {node: why for node, _, why in result.left_out}
    assert set(left) == {"contrib", "tr"}
    assert "(m_island3) ran not clearly faster on this machine" in left["tr"]
    model = onnx.load(str(result.model_path), load_external_data=False)
    assert sorted(n.op_type for n in model.graph.node if n.domain == "ai.aotc.kernels") == [
        "m_island1", "m_island2"]
    _check_outputs(original, result)
    profiled = _session(result.model_path, result.library_path, profile=True)
    profiled.run(None, random_inputs(original, None, seed=1))
    assert {"m_island1", "m_island2"} <= _ops_run(profiled)


def test_halving_narrows_a_slow_island_to_its_slow_node(tmp_path, monkeypatch):
    """MLP: one island of five nodes; the fourth (the head's Gemm) measures slow. Halves of
    three and two nodes, then of one and one: the Gemm alone is left to onnxruntime."""
    original = SAMPLE_MODELS["mlp"]
    seen = _slow_where(monkeypatch, lambda n: n.name == "/head/Gemm")
    result = emit_ort(original, tmp_path / "out", input_shapes=[], name="m",
                      measure_islands=True)
    assert [len(ts) for ts in seen] == [1, 2, 2]
    assert [(node, op) for node, op, _ in result.left_out] == [("/head/Gemm", "Gemm")]
    assert [ops for _, ops in result.islands] == [
        ["Fused_Gemm_Relu", "Fused_MatMul_Add_Tanh", "Fused_MatMul_Add_Sigmoid"], ["Softmax"]]
    assert [t.split for t in result.timings if not t.pays] == [True, True, False]
    _check_outputs(original, result)


def _chain(length: int) -> onnx.ModelProto:
    """`length` unary nodes in a row, named n0, n1, ..."""
    ops = ["Abs", "Neg", "Relu"]
    nodes = [onnx.helper.make_node(ops[i % 3], [f"v{i}"], [f"v{i + 1}"], name=f"n{i}")
             for i in range(length)]
    graph = onnx.helper.make_graph(
        nodes, "chain", [onnx.helper.make_tensor_value_info("v0", onnx.TensorProto.FLOAT, [4])],
        [onnx.helper.make_tensor_value_info(f"v{length}", onnx.TensorProto.FLOAT, [4])])
    model = onnx.shape_inference.infer_shapes(onnx.helper.make_model(graph))
    return model


@pytest.mark.parametrize("slow_node, rounds, left, whole_pays", [
    (None, [1, 2, 4, 8], [f"n{i}" for i in range(12)], True),  # halved three times at most
    ("n8", [1, 2, 2, 2], ["n8"], True),  # 12 -> 6+6 -> 3+3 -> 2+1: n8 alone
    ("n7", [1, 2, 2, 2], ["n6", "n7"], True),  # ... -> 2+1: n6 and n7, halved three times
    ("n8", [1, 2, 2, 2], [f"n{i}" for i in range(12)], False),  # the parts lose together
])
def test_refinement_rounds(slow_node, rounds, left, whole_pays):
    """paying_islands alone, with made-up measurements and compiles: how a slow island is
    halved, when halving stops, and which islands are compiled again."""
    from aotc.ortlib.partition import find_islands
    from aotc.ortlib.refine import MAX_SPLITS, paying_islands

    proto = _chain(12)
    graph = onnx_ir.serde.deserialize_model(proto)
    islands, left_out = find_islands(graph)
    assert [len(i.nodes) for i in islands] == [12]
    measured: list[list[tuple[str, ...]]] = []
    compiled: list[tuple[str, ...]] = []

    def measure_(isls, programs, todo):
        assert all(p == tuple(n.name for n in i.nodes) for i, p in zip(isls, programs, strict=True))
        measured.append([tuple(n.name for n in isls[k].nodes) for k in todo])
        return [measure.IslandTiming(f"m_island{isls[k].index}",
                                     2.0 if slow_node is None or slow_node in names else 0.5,
                                     1.0)
                for k, names in zip(todo, measured[-1], strict=True)]

    def compile_(sub, isl):
        compiled.append(tuple(n.name for n in isl.nodes))
        return compiled[-1]

    def measure_model(isls, programs):
        assert isls and len(programs) == len(isls)
        return measure.IslandTiming(measure.WHOLE_MODEL, 0.5 if whole_pays else 1.0, 1.0)

    kept, left_by, programs, timings = paying_islands(
        proto, islands, left_out, [tuple(n.name for n in islands[0].nodes)], measure_,
        measure_model, compile_)
    assert [len(r) for r in measured] == rounds
    assert sorted(lo.node for lo in left_by) == sorted(left)
    assert all("ran not clearly faster" in lo.reason for lo in left_by)
    # the kept islands hold every other node once, each compiled once and measured once
    held = [n for p in programs for n in p]
    assert sorted(held + left) == sorted(f"n{i}" for i in range(12))
    assert len(compiled) == len(set(compiled)) and set(programs) <= set(compiled)
    # every island measured once, then the model with the islands that paid (when any did)
    whole = [t for t in timings if t.op == measure.WHOLE_MODEL]
    assert len(whole) == (slow_node is not None) and len(timings) == sum(rounds) + len(whole)
    assert len({t.op for t in timings}) == len(timings)
    if not whole_pays:
        assert kept == [] and programs == []
        assert any("the model ran not clearly faster" in lo.reason for lo in left_by)
    # a part halved MAX_SPLITS times is an eighth of the island, rounded up
    assert all(len(p) <= -(-12 // 2 ** MAX_SPLITS) for p in measured[MAX_SPLITS])


def test_every_island_left_to_onnxruntime_leaves_a_library_without_custom_ops(tmp_path,
                                                                               monkeypatch):
    original = SAMPLE_MODELS["mlp"]
    _slow_where(monkeypatch, lambda n: True)
    result = emit_ort(original, tmp_path / "out", input_shapes=[], name="m",
                      measure_islands=True)
    assert result.islands == [] and not any(t.pays for t in result.timings)
    # halved down to single nodes: each of the five measured alone, then left to onnxruntime
    assert sum(not t.split for t in result.timings) == 5 == len(result.left_out)
    assert result.library_path.is_file()
    model = onnx.load(str(result.model_path))
    assert not [n for n in model.graph.node if n.domain == "ai.aotc.kernels"]
    assert not (result.model_path.parent / "m.fallback.data").exists()
    _check_outputs(original, result)


def test_measured_islands_that_pay_stay_compiled(tmp_path, monkeypatch):
    """Without the replaced times the real medians decide (whatever this machine says): every
    island kept measured as paying, every measured island was kept, halved or left to
    onnxruntime, and the model computes what the original does."""
    original = SAMPLE_MODELS["resnet_tiny"]
    result = emit_ort(original, tmp_path / "out", input_shapes=[], name="m",
                      measure_islands=True)
    first = result.timings[0]
    assert first.op == "m_island0" and first.library_s > 0 and first.onnxruntime_s > 0
    by_op = {t.op: t for t in result.timings}
    assert all(by_op[op].pays for op, _ in result.islands)
    whole = result.timings[-1] if result.islands or first.pays else None
    assert (first.pays and whole is not None and whole.pays) == any(
        op == "m_island0" for op, _ in result.islands)
    if not by_op.get(measure.WHOLE_MODEL, first).pays:
        assert result.islands == []
    slow = [t for t in result.timings if not t.pays and not t.split]
    if slow:
        assert any("faster on this machine" in why for _, _, why in result.left_out)
    _check_outputs(original, result)


def test_an_island_whose_outputs_differ_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "compare", lambda got, want, tol: (1.0, 1.0, False))
    with pytest.raises(AotcError, match="differs from onnxruntime's"):
        emit_ort(SAMPLE_MODELS["mlp"], tmp_path / "out", input_shapes=[], name="m",
                 measure_islands=True)
    assert not (tmp_path / "out").exists()


def test_cli_measure_islands(tmp_path):
    def aotc(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "aotc", "optimize", *args],
                              capture_output=True, text=True)

    model = str(SAMPLE_MODELS["mlp"])
    proc = aotc(model, "-o", str(tmp_path / "a"), "--emit", "ort", "--measure-islands")
    assert proc.returncode == 0, proc.stderr
    assert "timed on this machine" in proc.stdout and "model_island0" in proc.stdout
    proc = aotc(model, "-o", str(tmp_path / "b"), "--measure-islands")
    assert proc.returncode == 2 and "--emit ort" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "b").exists()
