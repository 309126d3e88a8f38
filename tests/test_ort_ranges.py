"""`aotc optimize --emit ort --input-shape x=1,1..N`: the islands are compiled once for the bound,
the rewritten model keeps the sequence axis symbolic, and onnxruntime runs it at any length in the
range, with the library (its kernels take the length from their inputs) and without it (the
islands' functions); both against onnxruntime on the original model. A length out of the range is
an onnxruntime error naming the input; nodes that cannot take the dimension stay with
onnxruntime."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as h

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from test_dynamic_shapes import BOUND, SHAPES, D, _encoder, _inputs, bert_feed, export_bert  # noqa: E402
from test_ort_library import _ops_run, _session  # noqa: E402

from aotc.driver import emit_ort  # noqa: E402

LENGTHS = (1, 7, BOUND)


def _feed(n: int) -> dict[str, np.ndarray]:
    ids, mask = _inputs(n)
    return {"ids": ids, "mask": mask}


def _input_dims(model: pathlib.Path) -> dict[str, list[int | str]]:
    proto = onnx.load(str(model), load_external_data=False)
    return {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in [*proto.graph.input, *proto.graph.output]}


def check_lengths(original: pathlib.Path, out: pathlib.Path, shapes: list[str],
                  feeds: list[dict[str, np.ndarray]]):
    """`emit_ort` with a range, then the rewritten model with and without the library against
    onnxruntime on the original at each feed's length; the islands' custom ops ran."""
    result = emit_ort(original, out, input_shapes=shapes, name="m")
    onnx.checker.check_model(str(result.model_path))
    want_sess = _session(original, None)
    with_lib = _session(result.model_path, result.library_path, profile=True)
    without = _session(result.model_path, None, profile=True)
    for feed in feeds:
        want = want_sess.run(None, feed)
        for sess in (with_lib, without):
            got = sess.run(None, feed)
            for w, g in zip(want, got, strict=True):
                assert g.shape == w.shape
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    islands = {op for op, _ in result.islands}
    assert islands and islands <= _ops_run(with_lib)  # the library's kernels ran
    assert not islands & _ops_run(without)  # the functions ran instead
    return result


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("ort_ranges") / "encoder.onnx"
    onnx.save(_encoder(), path)
    return path


def test_one_library_runs_every_length_and_the_model_keeps_the_axis_symbolic(encoder, tmp_path):
    result = check_lengths(encoder, tmp_path / "out", SHAPES, [_feed(n) for n in (*LENGTHS, 30)])
    assert len(result.islands) == 1 and result.left_out == []
    dims = _input_dims(result.model_path)
    assert dims["ids"] == [1, "seq"] and dims["mask"] == [1, "seq"]
    assert isinstance(dims["y"][1], str) and dims["pool"] == [1, D]
    # the island's program: compiled once for the bound, its length read at run time
    header = (tmp_path / "out" / "m_island0.h").read_text()
    assert f"#define M_ISLAND0_DIM_0_MAX {BOUND}" in header


def test_lengths_out_of_range_and_other_shapes_are_onnxruntime_errors(encoder, tmp_path):
    result = emit_ort(encoder, tmp_path / "out", input_shapes=SHAPES, name="m")
    sess = _session(result.model_path, result.library_path)
    for n in (0, BOUND + 1):
        feed = {"ids": np.zeros((1, n), np.int64), "mask": np.ones((1, n), np.int64)}
        with pytest.raises(Exception, match=rf"input 0 \('ids'\) has length {n} on axis 1, the "
                                            rf"run-time dimension, which was compiled for 1 to "
                                            rf"{BOUND}"):
            sess.run(None, feed)
    feed = {"ids": np.zeros((1, 5), np.int64), "mask": np.ones((1, 6), np.int64)}
    with pytest.raises(Exception, match=r"input 1 \('mask'\) has length 6 on axis 1.*has 5"):
        sess.run(None, feed)
    # the other axes as compiled (a model whose batch axis is loosened)
    model = onnx.load(str(result.model_path), load_external_data=False)
    for v in model.graph.input:
        v.type.tensor_type.shape.dim[0].dim_param = "batch"
    loose = result.model_path.parent / "loose.onnx"
    onnx.save(model, loose)
    feed = {"ids": np.zeros((2, 5), np.int64), "mask": np.ones((2, 5), np.int64)}
    with pytest.raises(Exception, match=rf"input 0 \('ids'\) has shape \[2, 5\], compiled for "
                                        rf"\[1, 1..{BOUND}\]"):
        _session(loose, result.library_path).run(None, feed)
    # the session still runs a good length afterwards
    want = _session(encoder, None).run(None, _feed(9))
    for w, g in zip(want, sess.run(None, _feed(9)), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("extra", "out", "op", "words"), [
    ([h.make_node("LayerNormalization", ["y", "g", "b"], ["norm"], axis=1, name="norm")], "norm",
     "LayerNormalization", "normalising over the run-time axis"),
    ([h.make_node("Concat", ["y", "y"], ["cat"], axis=1, name="cat")], "cat", "Concat",
     "not products or sums of it"),
    ([h.make_node("Flatten", ["y"], ["flat"], axis=1, name="flat")], "flat", "Flatten",
     "not products or sums of it"),
])
def test_what_cannot_take_the_dimension_stays_with_onnxruntime(extra, out, op, words, tmp_path):
    """The C path refuses these nodes (tests/test_dynamic_shapes.py); here onnxruntime runs them
    and the rest is one island."""
    path = tmp_path / "m.onnx"
    onnx.save(_encoder(extra, out), path)
    result = check_lengths(path, tmp_path / "out", SHAPES, [_feed(n) for n in LENGTHS])
    assert len(result.islands) == 1
    [(node, left_op, why)] = result.left_out
    assert (node, left_op) == (out, op) and words in why, why


def _with_contrib_op(on: str, shape: list[int | str]) -> onnx.ModelProto:
    """The encoder with onnxruntime's contrib Gelu (an operator aotc does not compile) on value
    `on`, whose readers read its result instead."""
    model = _encoder()
    nodes = list(model.graph.node)
    for node in nodes:
        node.input[:] = [f"{on}_g" if i == on else i for i in node.input]
    at = next(k for k, n in enumerate(nodes) if on in n.output) + 1
    nodes.insert(at, h.make_node("Gelu", [on], [f"{on}_g"], domain="com.microsoft", name="gelu"))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    # (onnx's shape inference does not know contrib operators)
    model.graph.value_info.append(h.make_tensor_value_info(f"{on}_g", TensorProto.FLOAT, shape))
    model.opset_import.append(h.make_opsetid("com.microsoft", 1))
    return model


def test_a_static_island_after_onnxruntime_s_node_stays_static(tmp_path):
    """The pooled output [1, D] goes through an operator onnxruntime runs into a second island
    whose values do not follow the dimension: it is compiled as a static island."""
    path = tmp_path / "m.onnx"
    model = _encoder([h.make_node("Gelu", ["pool"], ["pg"], domain="com.microsoft", name="gelu"),
                      h.make_node("Relu", ["pg"], ["r"], name="relu"),
                      h.make_node("Sigmoid", ["r"], ["s"], name="sig")], "y")
    model.graph.value_info.append(h.make_tensor_value_info("pg", TensorProto.FLOAT, [1, D]))
    del model.graph.output[1:]
    model.graph.output.append(h.make_tensor_value_info("s", TensorProto.FLOAT, [1, D]))
    model.opset_import.append(h.make_opsetid("com.microsoft", 1))
    onnx.save(model, path)
    result = check_lengths(path, tmp_path / "out", SHAPES, [_feed(n) for n in LENGTHS])
    assert [ops for _, ops in result.islands][-1] == ["Relu", "Sigmoid"]
    assert [(n, op) for n, op, _ in result.left_out] == [("gelu", "Gelu")]
    headers = {p.name: p.read_text() for p in (tmp_path / "out").glob("m_island*.h")}
    assert "M_ISLAND0_DIM_0_MAX" in headers["m_island0.h"]
    assert "_DIM_0_MAX" not in headers["m_island1.h"]


def test_an_island_s_inputs_and_outputs_have_the_dimension_first(tmp_path):
    """onnxruntime's node reads the queries [1, heads, seq, d]: an island's input or output
    may have the dimension only as its first axis longer than 1, so the transpose that makes
    them and the attention that reads the result are left to onnxruntime too, back to values
    [1, seq, ...]; every length still matches."""
    path = tmp_path / "m.onnx"
    onnx.save(_with_contrib_op("qt", [1, 4, "seq", D // 4]), path)
    result = check_lengths(path, tmp_path / "out", SHAPES, [_feed(n) for n in LENGTHS])
    left = {node: why for node, _, why in result.left_out}
    assert "gelu" in left
    first_axis = [why for why in left.values() if "first axis longer than 1" in why]
    assert first_axis and len(result.islands) == 2, left
    for ops in (ops for _, ops in result.islands):
        assert "Softmax" not in ops  # the scores [1, heads, seq, seq] stay with onnxruntime


def test_cli_reports_what_onnxruntime_runs_and_why(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_encoder([h.make_node("Concat", ["y", "y"], ["cat"], axis=1, name="cat")], "cat"),
              path)
    args = [sys.executable, "-m", "aotc", "optimize", str(path), "-o", str(tmp_path / "out"),
            "--emit", "ort", "--report"]
    for spec in SHAPES:
        args += ["--input-shape", spec]
    proc = subprocess.run(args, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "400"})
    assert proc.returncode == 0, proc.stderr
    assert "model_island0" in proc.stdout and "Concat" in proc.stdout
    assert "not products or sums of it" in proc.stdout, proc.stdout


@pytest.mark.torch
@pytest.mark.parametrize("dynamo", [False, True], ids=["ts", "dynamo"])
def test_bert_exports_run_every_length(dynamo, tmp_path):
    """A small BERT from PyTorch's two exporters (a symbolic sequence axis), compiled with bound
    64: one island, at lengths 1, 7 and 64 with and without the library."""
    path = export_bert(tmp_path / "bert.onnx", dynamo)
    rng = np.random.default_rng(3)
    result = check_lengths(path, tmp_path / "out",
                           ["input_ids=1,1..64", "attention_mask=1,1..64"],
                           [bert_feed(n, rng) for n in (1, 7, 64)])
    assert len(result.islands) == 1 and result.left_out == []
    dims = _input_dims(result.model_path)
    assert isinstance(dims["input_ids"][1], str) and isinstance(dims["last_hidden_state"][1], str)


_ASAN_RUN = r"""
import sys
import numpy as np
import onnxruntime as ort
model, library, feeds, outputs = sys.argv[1:5]
so = ort.SessionOptions()
so.intra_op_num_threads = 2
so.register_custom_ops_library(library)
sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
data = np.load(feeds)
results = {}
for n in sorted({int(k.split("_")[1]) for k in data.files}):
    feed = {name: data[f"{name}_{n}"] for name in ("ids", "mask")}
    try:
        for i, y in enumerate(sess.run(None, feed)):
            results[f"{n}_{i}"] = y
    except Exception as e:  # an out-of-range length: onnxruntime's error, with the island's message
        results[f"{n}_error"] = np.array(str(e))
np.savez(outputs, **results)
"""


def test_the_range_library_is_clean_under_asan_and_ubsan(encoder, tmp_path):
    """The range library rebuilt by its Makefile with AddressSanitizer/UBSan, loaded by
    onnxruntime (2 threads) in a process that preloads libasan: lengths 1, 7 and the bound match
    onnxruntime on the original model, one past the bound is an error naming the input, and no
    sanitizer report. (Leaks are not checked: Python's and onnxruntime's allocations at exit.)"""
    import shutil

    asan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True,
                          text=True).stdout.strip() if shutil.which("gcc") else ""
    if not os.path.isabs(asan):
        pytest.skip("gcc's libasan is not installed")
    result = emit_ort(encoder, tmp_path / "out", input_shapes=SHAPES, name="m")
    lib = result.library_path
    lib.unlink()
    subprocess.run(["make", "CC=gcc", "CFLAGS=-O1 -g -fno-omit-frame-pointer "
                    "-fsanitize=address,undefined -fno-sanitize-recover=all"],
                   cwd=lib.parent, check=True, capture_output=True)
    symbols = subprocess.run(["nm", "-D", str(lib)], capture_output=True, text=True).stdout
    assert "__asan_report" in symbols and "__ubsan_handle" in symbols  # instrumented
    lengths = (1, 7, BOUND, BOUND + 1)
    feeds = {}
    for n in lengths:
        feeds |= {f"{k}_{n}": v for k, v in _feed(n).items()}
    np.savez(tmp_path / "feeds.npz", **feeds)
    (tmp_path / "run.py").write_text(_ASAN_RUN)
    # libstdc++ preloaded too: ASan intercepts __cxa_throw, which onnxruntime's error path calls,
    # and finds the real one only in a library loaded before it
    cxx = subprocess.run(["gcc", "-print-file-name=libstdc++.so.6"], capture_output=True,
                         text=True).stdout.strip()
    env = {**os.environ, "LD_PRELOAD": f"{asan} {cxx}", "ASAN_OPTIONS": "detect_leaks=0",
           "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"}
    proc = subprocess.run([sys.executable, str(tmp_path / "run.py"), str(result.model_path),
                           str(lib), str(tmp_path / "feeds.npz"), str(tmp_path / "got.npz")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Sanitizer" not in proc.stderr and "runtime error" not in proc.stderr, proc.stderr
    got = np.load(tmp_path / "got.npz")
    want_sess = _session(encoder, None)
    for n in lengths[:-1]:
        for i, w in enumerate(want_sess.run(None, _feed(n))):
            np.testing.assert_allclose(got[f"{n}_{i}"], w, rtol=1e-4, atol=1e-5)
    assert f"input 0 ('ids') has length {BOUND + 1} on axis 1" in str(got[f"{BOUND + 1}_error"])
