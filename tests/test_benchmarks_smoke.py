"""Smoke tests of the benchmark scripts: they run end to end on small inputs and print positive
numbers (the measurements themselves are for benchmarks/RESULTS.md, not for tests)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))


def _run(script: str, *args: str) -> list[dict]:
    """Runs a benchmark script; returns its printed rows (one dict literal per line)."""
    proc = subprocess.run([sys.executable, str(BENCH / script), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [ast.literal_eval(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def test_bench_ops_quick() -> None:
    rows = _run("bench_ops.py", "--quick", "--runs", "3")
    cases = [r for r in rows if "case" in r]
    assert [r["case"] for r in cases] == ["gemm.128", "mv2.960x320.k1s1.7", "softmax.12x128x128"]
    for r in cases:
        assert r["check"] == "ok"
        for key in ("aotc ms", "ort ms", "aotc rate", "ort rate"):
            assert float(r[key]) > 0, (r["case"], key)
    assert float(cases[0]["numpy ms"]) > 0 and float(cases[0]["aotc % peak"]) > 0
    groups = {r["group"] for r in rows if "group" in r}
    assert groups == {"gemm", "mv2", "softmax"}
    assert float(next(r for r in rows if "FMA peak GFLOP/s" in r)["FMA peak GFLOP/s"]) > 0


def test_bench_ops_in_huge_pages() -> None:
    """--pages huge: both engines read and write buffers advised for huge pages (2 MB aligned)
    and still agree."""
    from timing import HUGE_PAGE, huge_pages_empty, in_huge_pages

    a = huge_pages_empty((3, 5), "float32")
    assert a.shape == (3, 5) and a.dtype == "float32" and a.ctypes.data % HUGE_PAGE == 0
    x = np.arange(6, dtype=np.float64).reshape(2, 3)
    np.testing.assert_array_equal(in_huge_pages(x), x)
    rows = _run("bench_ops.py", "--quick", "--runs", "3", "--filter", "mv2", "--pages", "huge")
    (case,) = [r for r in rows if "case" in r]
    assert case["check"] == "ok" and float(case["aotc ms"]) > 0


def _host_has(flag: str) -> bool:
    try:
        return any(flag in line.split() for line in open("/proc/cpuinfo")
                   if line.startswith("flags"))
    except OSError:
        return False


@pytest.mark.skipif(not _host_has("avx2"), reason="runs AVX2 code on this machine")
def test_bench_ops_times_avx2_code_against_the_256_bit_peak() -> None:
    rows = _run("bench_ops.py", "--quick", "--runs", "3", "--target", "cpu-avx2",
                "--filter", "gemm")
    (gemm,) = [r for r in rows if "case" in r]
    assert gemm["check"] == "ok" and float(gemm["aotc % peak"]) > 0
    peak = next(r for r in rows if "FMA peak GFLOP/s" in r)
    assert peak["target"] == "cpu-avx2" and float(peak["FMA peak GFLOP/s"]) > 0


def test_bench_models_one_sample_model() -> None:
    rows = _run("bench_models.py", "--models", "mlp", "--runs", "3", "--threads", "1")
    mlp = next(r for r in rows if r.get("model") == "mlp" and "threads" in r)
    assert mlp["check"] == "ok"
    assert float(mlp["aotc median ms"]) > 0 and float(mlp["onnxruntime median ms"]) > 0
    ratio = float(mlp["aotc/ort"])
    gm = next(r for r in rows if r.get("model") == "geometric mean")
    assert float(gm["aotc/ort"]) == pytest.approx(ratio, abs=0.01)
    compile_row = next(r for r in rows if "aotc optimize s" in r)
    assert float(compile_row["aotc optimize s"]) > 0


def test_bench_models_with_the_ort_library() -> None:
    """--emit ort: a third engine, onnxruntime with the model's custom-op library."""
    rows = _run("bench_models.py", "--models", "mlp", "--runs", "3", "--threads", "1",
                "--emit", "ort")
    mlp = next(r for r in rows if r.get("model") == "mlp" and "threads" in r)
    assert mlp["check"] == "ok" and float(mlp["ort+library median ms"]) > 0
    assert float(mlp["ort+library/ort"]) > 0 and float(mlp["ort+library/aotc"]) > 0
    islands = next(r for r in rows if "islands" in r)
    assert islands["islands"] == 1 and islands["nodes left to onnxruntime"] == 0


def test_bench_models_measures_the_islands() -> None:
    """--emit ort --measure-islands: the library is compiled per thread count with its island
    timed; whichever way the timing goes, the row says how many islands stayed and how many
    measurements (and halvings) it took."""
    rows = _run("bench_models.py", "--models", "mlp", "--runs", "3", "--threads", "1",
                "--emit", "ort", "--measure-islands")
    islands = next(r for r in rows if "islands" in r)
    assert islands["compiled for threads"] == 1
    assert islands["islands"] in (0, 1)
    measured = re.fullmatch(r"(\d+) measured, (\d+) halved", islands["islands measured"])
    assert measured is not None and int(measured[1]) >= 1


def test_ort_memory_reports_the_three_cases() -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "ort_memory.py"), "models/mlp.onnx"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    cases = [line for line in proc.stdout.splitlines() if "onnxruntime" in line]
    assert len(cases) == 3 and all(float(c.split("|")[2]) > 0 for c in cases)


def test_bench_models_compiles_with_a_tuning_log(tmp_path: Path) -> None:
    """--tuning-log: the bundles take the schedules a tuning run recorded."""
    log = tmp_path / "tuning.jsonl"
    tuned = subprocess.run([sys.executable, "-m", "aotc", "optimize", "models/mlp.onnx", "-o",
                            str(tmp_path / "b"), "--tune", "1", "--tuning-log", str(log)],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert tuned.returncode == 0, tuned.stderr
    assert log.read_text().strip()
    rows = _run("bench_models.py", "--models", "mlp", "--runs", "3", "--threads", "1",
                "--tuning-log", str(log))
    mlp = next(r for r in rows if r.get("model") == "mlp" and "threads" in r)
    assert mlp["check"] == "ok" and float(mlp["aotc median ms"]) > 0


def test_profile_model_ranks_kernels_of_a_sample_model() -> None:
    """profile_model: aotc's steps and onnxruntime's nodes timed; the convolutions carry their
    FLOP rate, and the summary adds up to the total."""
    rows = _run("profile_model.py", "models/resnet_tiny.onnx", "--runs", "3", "--top", "50")
    summary = {r["work"]: r for r in rows if "work" in r}
    products, rest = summary["convolutions and matrix products"], summary["everything else"]
    total = summary["total (sum of kernels)"]
    assert float(products["aotc ms"]) > 0 and float(products["onnxruntime ms"]) > 0
    assert abs(float(products["aotc ms"]) + float(rest["aotc ms"]) - float(total["aotc ms"])) \
        <= 0.011
    steps = [r for r in rows if "aotc step" in r]
    convs = [r for r in steps if r["GFLOP/s"]]
    assert convs and all(0 < float(r["% peak"]) < 150 for r in convs)
    assert any("MaxPool" in r["aotc step"] and not r["GFLOP/s"] for r in steps)
    assert any(r["operator"] == "Conv" for r in rows if "onnxruntime node" in r)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_ab_steps_pairs_the_steps_of_a_model_with_and_without_a_pass(threads: str) -> None:
    """ab_steps: both programs run (serially, or on the runtime's pool of two), and every step
    is listed with a zero threshold."""
    proc = subprocess.run([sys.executable, str(BENCH / "ab_steps.py"), "models/resnet_tiny.onnx",
                           "--without", "pad_in_producer", "--runs", "3", "--min-change", "-1",
                           "--threads", threads],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "sum of medians" in proc.stdout and f"{threads} thread(s)" in proc.stdout
    rows = [ast.literal_eval(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert rows and all(float(r["A ms"]) > 0 and float(r["B ms"]) > 0 for r in rows)
    assert any("pad_in_producer" in r["node (B)"] for r in rows)


def test_peak_measures_vector_fmas() -> None:
    from peak import measure_peak

    p = measure_peak(threads=1, reps=1, seconds=0.05)
    assert p.lanes >= 4 and p.chains >= 8 and p.gflops > 0


def _convs_run(model: object, x: object) -> list:
    """The distinct Conv2d layers a forward pass runs, in order, as ConvLayer with counts."""
    import torch
    from conv_layers import ConvLayer

    seen: dict[ConvLayer, int] = {}

    def hook(m: torch.nn.Conv2d, inputs: tuple, _out: object) -> None:
        key = ConvLayer(m.in_channels, m.out_channels, m.kernel_size[0], m.stride[0],
                        inputs[0].shape[2], m.groups, 0)
        seen[key] = seen.get(key, 0) + 1

    for m in model.modules():  # type: ignore[attr-defined]
        if isinstance(m, torch.nn.Conv2d):
            m.register_forward_hook(hook)
    with torch.no_grad():
        model(x)  # type: ignore[operator]
    return [c._replace(count=n) for c, n in seen.items()]


def test_conv_tables_match_the_models() -> None:
    """conv_layers.py lists exactly the distinct convolutions (with counts) that the models of
    make_big_models.py run, and their FLOPs add up to the published totals (4.1 and 0.3 GMACs)."""
    pytest.importorskip("torch")
    from conv_layers import MOBILENETV2_CONVS, RESNET50_CONVS
    from make_big_models import build

    for name, table, gflops in (("resnet50", RESNET50_CONVS, 8.17),
                                ("mobilenetv2", MOBILENETV2_CONVS, 0.60)):
        assert _convs_run(*build(name)) == list(table), name
        total = sum(c.flops * c.count for c in table) / 1e9
        assert total == pytest.approx(gflops, rel=0.01)


def test_big_models_have_their_architectures_sizes() -> None:
    """bench_models knows every model make_big_models writes, and the three architectures added
    for per-ISA benchmarks have their published multiply-add counts (convolutions and linear
    layers): EfficientNet-B0 0.39 G, RegNetY-400MF 0.40 G, ViT-B/16 17.6 G (attention's two
    products included)."""
    torch = pytest.importorskip("torch")
    from bench_models import BIG_NAMES
    from make_big_models import BIG_MODELS, build

    assert BIG_NAMES == tuple(BIG_MODELS)
    for name, gmacs in (("efficientnet_b0", 0.39), ("regnety_400mf", 0.40), ("vit_b16", 17.6)):
        model, x = build(name)
        macs = 0

        def conv(m, inputs, out):  # noqa: ANN001
            nonlocal macs
            macs += out.numel() * m.in_channels // m.groups * m.kernel_size[0] * m.kernel_size[1]

        def linear(m, inputs, out):  # noqa: ANN001
            nonlocal macs
            macs += out.numel() * m.in_features

        for m in model.modules():
            if isinstance(m, torch.nn.Conv2d):
                m.register_forward_hook(conv)
            elif isinstance(m, torch.nn.Linear):
                m.register_forward_hook(linear)
        with torch.no_grad():
            model(x)
        if name == "vit_b16":  # q @ k^T and att @ v: 12 layers x 2 x 197^2 x 768
            macs += 12 * 2 * 197 * 197 * 768
        assert macs / 1e9 == pytest.approx(gmacs, rel=0.06), name


def test_bench_ml_times_a_converted_pipeline() -> None:
    pytest.importorskip("sklearn")
    pytest.importorskip("skl2onnx")
    rows = _run("bench_ml.py", "--models", "scaler_logistic", "--batch", "2", "--runs", "3")
    row = next(r for r in rows if r.get("model") == "scaler_logistic")
    assert row["check"] == "ok" and row["batch"] == 2
    assert float(row["aotc us"]) > 0 and float(row["onnxruntime us"]) > 0
