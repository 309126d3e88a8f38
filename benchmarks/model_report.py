"""Compile every sample model and report what the foundation promises, per model:
largest error against onnxruntime, arena vs lower bound vs no reuse, compile time, bundle size.

    python benchmarks/model_report.py [--markdown]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

from model_zoo import SAMPLE_MODELS, random_inputs  # noqa: E402
from table import print_rows  # noqa: E402

from aotc.driver import optimize_model  # noqa: E402
from aotc.package.build import build_bundle, run_model_process  # noqa: E402
from aotc.verify import compare, ort_run  # noqa: E402


def _kib(n: int) -> str:
    return f"{n / 1024:.1f}"


def report(markdown: bool) -> None:
    rows = []
    for name, path in SAMPLE_MODELS.items():
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "bundle"
            t0 = time.perf_counter()
            r = optimize_model(path, out, input_shapes=[])
            compile_s = time.perf_counter() - t0
            build_bundle(out)
            size = sum(p.stat().st_size for p in out.iterdir()
                       if p.suffix in (".o", ".bin", ".c", ".h", ".S"))
            lib = (out / "libmodel.a").stat().st_size
            model = onnx.load(str(path))
            inits = {i.name for i in model.graph.initializer}
            names = [i.name for i in model.graph.input if i.name not in inits]
            worst = 0.0
            for seed in range(3):
                arrays = random_inputs(path, None, seed=seed)
                inputs = [arrays[n] for n in names]
                got = run_model_process(out, inputs)
                for g, w in zip(got, ort_run(model, names, inputs), strict=True):
                    err, scale, ok = compare(g, np.asarray(w), 1e-4)
                    assert ok, (name, err, scale)
                    worst = max(worst, err / scale)
            rows.append((name, r.nodes_before, r.nodes_after, r.steps, r.unique_kernels,
                         f"{worst:.2e}", _kib(r.arena), _kib(r.arena_lower_bound),
                         _kib(r.arena_no_reuse), _kib(r.weights), f"{compile_s:.2f}",
                         _kib(size), _kib(lib)))
    head = ("model", "nodes", "after passes", "steps", "kernels", "max rel. error",
            "arena KiB", "lower bound KiB", "no reuse KiB", "weights KiB", "compile s",
            "bundle sources+objects KiB", "libmodel.a KiB")
    print_rows(head, rows, markdown)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--markdown", action="store_true")
    report(ap.parse_args().markdown)
