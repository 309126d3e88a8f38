"""`ort_demo`, the C program of an `--emit ort` folder: it loads onnxruntime's shared library with
dlopen (no Python), registers the custom-op library, runs the model on .npy files and writes the
outputs as .npy files, which must match onnxruntime in Python on the original model."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from test_ort_library import lstm_in_the_middle  # noqa: E402

from aotc.driver import emit_ort  # noqa: E402
from aotc.package.output_folder import read_manifest  # noqa: E402

ORT_LIBRARY = next(pathlib.Path(ort.__file__).parent.glob("capi/libonnxruntime.so*"))


def two_inputs(path: pathlib.Path) -> pathlib.Path:
    """A float and an int64 input; an output whose name is no file name."""
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("MatMul", ["a", "w"], ["m"], name="mm"),
             helper.make_node("Relu", ["m"], ["s"], name="relu"),
             helper.make_node("Add", ["ids", "ids"], ["out/g:0"], name="add")]
    graph = helper.make_graph(
        nodes, "two_inputs",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [3, 4]),
         helper.make_tensor_value_info("ids", TensorProto.INT64, [5])],
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, [3, 6]),
         helper.make_tensor_value_info("out/g:0", TensorProto.INT64, [5])],
        [numpy_helper.from_array(rng.standard_normal((4, 6)).astype(np.float32), "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def demo(folder: pathlib.Path, *args: str, ort_library: pathlib.Path | None = ORT_LIBRARY,
         cwd: pathlib.Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "AOTC_ONNXRUNTIME"}
    if ort_library is not None:
        env["AOTC_ONNXRUNTIME"] = str(ort_library)
    return subprocess.run([str(folder / "ort_demo"), *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=60)


@pytest.fixture(scope="module")
def lstm_folder(tmp_path_factory) -> tuple[pathlib.Path, pathlib.Path]:
    """(original model, --emit ort folder whose ort_demo `make demo` built)."""
    tmp = tmp_path_factory.mktemp("ort_demo")
    model = lstm_in_the_middle(tmp / "lstm.onnx")
    out = tmp / "out"
    emit_ort(model, out, input_shapes=[], name="m")
    (out / "ort_demo").unlink()  # emit_ort builds it too; the folder's Makefile must as well
    subprocess.run(["make", "-s", "-C", str(out), "demo"], check=True, capture_output=True)
    assert (out / "ort_demo").is_file()
    return model, out


def test_the_demo_runs_the_model_through_the_library_like_onnxruntime(lstm_folder, tmp_path):
    model, out = lstm_folder
    x = np.random.default_rng(1).standard_normal((1, 8, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    proc = demo(out, "--threads", "1", str(out / "m.onnx"), str(out / "libaotc_m.so"),
                "-i", f"x={tmp_path / 'x.npy'}", "-o", str(tmp_path / "res"))
    assert proc.returncode == 0, proc.stderr
    assert f"onnxruntime {ort.__version__}" in proc.stdout
    assert "output y: float32[8, 1, 5]" in proc.stdout
    want = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    got = np.load(tmp_path / "res" / "y.npy")
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_bench_threads_and_paths_relative_to_the_folder(lstm_folder, tmp_path):
    """--bench with either thread option; a plain library file name is the one in the current
    folder (not a library search), and a model with one input takes -i FILE without its name."""
    _, out = lstm_folder
    np.save(tmp_path / "x.npy", np.ones((1, 8, 16), np.float32))
    for threads in (["--threads", "2"], ["--aotc-threads", "2"]):
        proc = demo(out, "--bench", "3", *threads, "m.onnx", "libaotc_m.so",
                    "-i", str(tmp_path / "x.npy"), cwd=out)
        assert proc.returncode == 0, proc.stderr
        assert "latency ms: min" in proc.stdout and "median" in proc.stdout
        assert "(3 runs)" in proc.stdout


def test_the_islands_run_in_the_library(lstm_folder, tmp_path):
    """The rewritten model with a dynamic batch, fed batch 2: the message comes from the library's
    island (the kernels ran in the demo's process), and the demo exits 2."""
    _, out = lstm_folder
    rewritten = onnx.load(str(out / "m.onnx"))
    rewritten.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.save(rewritten, tmp_path / "loose.onnx")
    np.save(tmp_path / "x2.npy", np.ones((2, 8, 16), np.float32))
    proc = demo(out, str(tmp_path / "loose.onnx"), str(out / "libaotc_m.so"),
                "-i", f"x={tmp_path / 'x2.npy'}")
    assert proc.returncode == 2
    assert "running the model" in proc.stderr and "aotc island m_island0: input 0" in proc.stderr


def test_the_demo_is_clean_under_asan_and_ubsan(lstm_folder, tmp_path):
    """The demo built with AddressSanitizer/UBSan, a run and an error, leaks checked. The library
    is preloaded so that its frames stay named: its registration's allocations live as long as
    the process by design (aotc_ort.c), the one suppression."""
    _, out = lstm_folder
    asan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True,
                          text=True).stdout.strip() if shutil.which("gcc") else ""
    if not os.path.isabs(asan):
        pytest.skip("gcc's libasan is not installed")
    exe = tmp_path / "ort_demo_asan"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O1", "-g",
                    "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-o", str(exe),
                    "aotc_ort_demo.c", "aotc_npy.c", "-ldl"], cwd=out, check=True)
    (tmp_path / "lsan.supp").write_text("leak:RegisterCustomOps\n")
    np.save(tmp_path / "x.npy", np.ones((1, 8, 16), np.float32))
    env = {**os.environ, "AOTC_ONNXRUNTIME": str(ORT_LIBRARY),
           "LD_PRELOAD": f"{asan} {out / 'libaotc_m.so'}",
           "ASAN_OPTIONS": "detect_leaks=1:fast_unwind_on_malloc=0",
           "LSAN_OPTIONS": f"suppressions={tmp_path / 'lsan.supp'}:print_suppressions=0"}
    for args, status in ((["--bench", "2", "-i", f"x={tmp_path / 'x.npy'}", "-o",
                           str(tmp_path / "res")], 0), (["-i", "z=x.npy"], 2)):
        proc = subprocess.run([str(exe), str(out / "m.onnx"), str(out / "libaotc_m.so"), *args],
                              capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == status, proc.stderr
        assert "Sanitizer" not in proc.stderr and "runtime error" not in proc.stderr, proc.stderr


def test_errors_exit_2_with_a_message(lstm_folder, tmp_path):
    _, out = lstm_folder
    model, library = str(out / "m.onnx"), str(out / "libaotc_m.so")
    np.save(tmp_path / "x.npy", np.ones((1, 8, 16), np.float32))
    np.save(tmp_path / "wide.npy", np.ones((2, 8, 16), np.float32))
    x, wide = f"x={tmp_path / 'x.npy'}", f"x={tmp_path / 'wide.npy'}"
    cases = [
        # the custom-op library is not there: onnxruntime's message names it
        (demo(out, model, str(out / "missing.so"), "-i", x),
         ["registering the library", "missing.so"]),
        # a wrong input shape: onnxruntime refuses it before the islands run
        (demo(out, model, library, "-i", wide), ["running the model", "Got: 2 Expected: 1"]),
        # no onnxruntime: the message says how to find the wheel's
        (demo(out, model, library, "-i", x, ort_library=None),
         ["AOTC_ONNXRUNTIME", "--ort", "import onnxruntime"]),
        (demo(out, "--ort", library, model, library, "-i", x), ["has no OrtGetApiBase"]),
        (demo(out, model, library, "-i", f"z={tmp_path / 'x.npy'}"),
         ["the model has no input z", "inputs: x"]),
        (demo(out, model, library), ["no file for the input x"]),
        (demo(out, model, library, "-i", f"x={tmp_path / 'none.npy'}"), ["none.npy"]),
        (demo(out, "--bench", "0", model, library), ["--bench needs an integer >= 1", "usage:"]),
        (demo(out, model), ["expected MODEL.onnx and LIBRARY.so"]),
    ]
    for proc, messages in cases:
        assert proc.returncode == 2, (proc.args, proc.stderr)
        for m in messages:
            assert m in proc.stderr, (proc.args, proc.stderr)
    assert demo(out, "--help").returncode == 0


def test_inputs_by_name_any_dtype_and_output_file_names(tmp_path):
    model = two_inputs(tmp_path / "two.onnx")
    out = tmp_path / "out"
    result = emit_ort(model, out, input_shapes=[], name="two")
    assert result.islands
    assert "ort_demo" in read_manifest(out)["files"]  # so aotc may replace the folder later
    rng = np.random.default_rng(2)
    feed = {"a": rng.standard_normal((3, 4)).astype(np.float32),
            "ids": rng.integers(-50, 50, 5).astype(np.int64)}
    for name, value in feed.items():
        np.save(tmp_path / f"{name}.npy", value)
    proc = demo(out, str(result.model_path), str(result.library_path),
                "-i", f"ids={tmp_path / 'ids.npy'}", "-i", f"a={tmp_path / 'a.npy'}",
                "-o", str(tmp_path / "res"))
    assert proc.returncode == 0, proc.stderr
    want = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, feed)
    np.testing.assert_allclose(np.load(tmp_path / "res" / "s.npy"), want[0], rtol=1e-4, atol=1e-5)
    got = np.load(tmp_path / "res" / "out_g_0.npy")
    assert got.dtype == np.int64 and (got == want[1]).all()
    # the input's dtype is onnxruntime's to check
    np.save(tmp_path / "a64.npy", feed["a"].astype(np.float64))
    proc = demo(out, str(result.model_path), str(result.library_path),
                "-i", f"ids={tmp_path / 'ids.npy'}", "-i", f"a={tmp_path / 'a64.npy'}")
    assert proc.returncode == 2 and "tensor(double)" in proc.stderr, proc.stderr
    # -i FILE without a name needs a model with one input
    proc = demo(out, str(result.model_path), str(result.library_path), "-i", str(tmp_path / "a.npy"))
    assert proc.returncode == 2 and "name the input" in proc.stderr, proc.stderr
    # after `make demo` the folder is still aotc's to replace
    subprocess.run(["make", "-s", "-B", "-C", str(out), "demo"], check=True, capture_output=True)
    emit_ort(model, out, input_shapes=[], name="two")
