"""Latency of aotc bundles against onnxruntime, side by side in one process, interleaved.

For each sample model and thread count: the bundle's `NAME_run_context` (through ctypes, with
input/output pointer arrays built once) and an onnxruntime session with all graph optimisations
and the same intra-op thread count take turns in blocks of 5 runs, after a warm-up. Reports medians
and the ratio aotc/onnxruntime (< 1: aotc is faster) and the geometric mean of the ratios.

    python benchmarks/bench_models.py [--runs 50] [--threads 1 2] [--markdown]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from model_zoo import SAMPLE_MODELS, random_inputs  # noqa: E402
from table import print_rows  # noqa: E402

from aotc.driver import optimize_model  # noqa: E402
from aotc.package.build import build_bundle  # noqa: E402
from aotc.package.loaded import LoadedBundle, _pointer_array  # noqa: E402


def bench_one(path: Path, bundle: Path, threads: int, runs: int) -> tuple[float, float]:
    model = onnx.load(str(path))
    inits = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    arrays = random_inputs(path, None, seed=0)
    inputs = [arrays[n] for n in names]
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    feed = dict(zip(names, inputs, strict=True))
    with LoadedBundle(bundle) as b:
        b.create(threads)
        ins, outs = b._prepare(inputs)
        pin, pout = _pointer_array(ins), _pointer_array(outs)
        run = b._run_context
        ctx = b._ctx
        for _ in range(5):
            run(ctx, pin, pout)
            sess.run(None, feed)
        ta, to = [], []
        # Interleave in short blocks with a pause between them: both runtimes' worker threads
        # spin after a run, and on two cores one's spinning workers starve the other's.
        block = 5
        for _ in range(max(1, runs // block)):
            for _ in range(block):
                t0 = time.perf_counter()
                run(ctx, pin, pout)
                ta.append(time.perf_counter() - t0)
            time.sleep(0.02)
            for _ in range(block):
                t0 = time.perf_counter()
                sess.run(None, feed)
                to.append(time.perf_counter() - t0)
            time.sleep(0.02)
    return statistics.median(ta), statistics.median(to)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, os.cpu_count() or 1])
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        bundles = {}
        for name, path in SAMPLE_MODELS.items():
            d = Path(tmp) / name
            optimize_model(path, d, input_shapes=[])
            build_bundle(d, target="shared")
            bundles[name] = d
        for threads in args.threads:
            ratios = []
            for name, path in SAMPLE_MODELS.items():
                a, o = bench_one(path, bundles[name], threads, args.runs)
                ratios.append(a / o)
                rows.append((name, threads, f"{a * 1e3:.3f}", f"{o * 1e3:.3f}", f"{a / o:.2f}"))
            gm = math.exp(sum(map(math.log, ratios)) / len(ratios))
            rows.append(("geometric mean", threads, "", "", f"{gm:.2f}"))
    head = ("model", "threads", "aotc median ms", "onnxruntime median ms", "aotc/ort")
    print_rows(head, rows, args.markdown)


if __name__ == "__main__":
    np.random.seed(0)
    main()
